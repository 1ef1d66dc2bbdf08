"""A Comparative Study of Learning Paradigms in Large Language Models via Intrinsic Dimension.

Saahith Janapati and Yangfeng Ji. Proceedings of the 10th Workshop on Representation Learning for NLP
(RepL4NLP 2025), pp. 59ff. Official code: github.com/saahithjanapati/intrinsic-dimension-of-learning-paradigms.

What we reproduce: the last input token's hidden state at every layer for zero-shot, ICL-k and LoRA-SFT prompts,
its intrinsic dimension per layer (TwoNN, with Levina-Bickel MLE as the check), the normalized AUC of the ID curve,
logit accuracy over the labels' first tokens, and the paper's Table 1 and figures (1-5, 7-12, 13-28, 37-39, 46).
How to run, deviations and results: intrinsic_dim/README.md.
Entry point: `python -m experiments.run method=intrinsic_dim ...`.
"""
