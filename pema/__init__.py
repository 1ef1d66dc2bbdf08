"""PEMA: Partial Embedding Matrix Adaptation.

Williams & Aletras, "Vocabulary-level Memory Efficiency for Language Model Fine-tuning", RepL4NLP 2025
(arXiv 2309.08708; v1: "Frustratingly Simple Memory Efficiency for Pre-trained Language Models via Dynamic Embedding
Pruning"). Official code: https://github.com/mlsw/partial-embedding-matrix-adaptation (MIT; re-implemented here from
the paper, not copied).

Fine-tuning touches only the embedding rows of the tokens that occur in the fine-tuning data. PEMA finds that
sub-vocabulary V' before training, trains with the |V'| x d sub-matrix E' in place of E, and merges E' back into the
full matrix (kept on disk) afterwards, so the fine-tuned model is the one full fine-tuning would have produced.

Modules: `vocab` (token counts, V', usage statistics, reductions), `partial` (E' in place of E, id map, checkpoint
hooks, merge-back, PEFT and tied embeddings), `sizes` (|V|, N_emb, N from architecture configs, no weights; method
pema_sizes), `memory` (bytes of weights/grads/AdamW state, measured peak memory), `options` and `hook` (the
`pema.enabled` option of fine-tuning), `run` (method pema_vocab: V' and the reductions of a corpus), `counts` (its
per-split counts, cached), `bench` (method pema_bench: preparation time, step time, memory), `scores` (method
pema_scores: both arms in one process and the largest |Δ logit|, |Δ weight| between them), `report` (the paper's
tables).
"""
