"""Embedding Recycling for Language Models

Saad-Falcon, Singh, Soldaini, D'Arcy, Cohan, Downey (arXiv 2207.04993).
Spec: ../shared/papers/recycling.md. Not implemented yet (issue #3): this package has no method and is not registered.
"""
