"""Efficient Adaptive Transformer: An Empirical Study and Reproducible Framework

J. Miller (OPSWAT, 2025).
Spec: ../shared/papers/eat.md. Not implemented yet (a later issue): this package has no method and is not registered.
"""
