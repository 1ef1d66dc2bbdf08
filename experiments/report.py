"""python -m experiments.report: rebuild every table, figure and results/REPORT.md from the run records (the code
lives in experiments/evidence/report.py; this is the command users type)."""
from experiments.evidence.report import main

if __name__ == "__main__":
    main()
