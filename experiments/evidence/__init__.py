"""Everything that reads run records: selecting them (records, selection), their statistics (stats), whether an arm
does its task (signal), the claims and their verdicts (claims), tables and figures (tables), the papers' numbers
(paper_values) and the reports built from all of them (report). Nothing here trains or loads a model."""
