"""A Comparative Study of Learning Paradigms in LLMs via Intrinsic Dimension

Janapati & Ji (RepL4NLP 2025).
Spec: ../shared/papers/intrinsic_dim.md. Not implemented yet (issue #5): this package has no method and is not registered.
"""
