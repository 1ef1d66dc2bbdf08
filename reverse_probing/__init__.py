"""Reverse Probing: Evaluating Knowledge Transfer via Finetuned Task Embeddings for Coreference Resolution

Anikina, Binder, Harbecke, Varanasi, Hennig, Ostermann, Möller, van Genabith (RepL4NLP 2025, arXiv 2501.19316).
"""
