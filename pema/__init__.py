"""Vocabulary-level Memory Efficiency for Language Model Fine-tuning (PEMA, partial embedding matrix adaptation)

Williams & Aletras (arXiv 2309.08708; RepL4NLP 2025).
Spec: ../shared/papers/pema.md. Not implemented yet (issue #4): this package has no method and is not registered.
"""
