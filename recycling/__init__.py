"""Embedding Recycling for Language Models.

Saad-Falcon, Singh, Soldaini, D'Arcy, Cohan, Downey (arXiv 2207.04993). How to run and deviations: recycling/README.md.

Cache the hidden states h^k of a frozen pretrained encoder's layer k once (the suite's activation store), then train
and run only layers k+1..N (and optionally Houlsby adapters in them) from the cache. `method=recycling` reproduces
the accuracy tables (variants full / frozen / reduced / half_adapters / full_adapters), `method=recycling_bench` the
efficiency tables (training, inference, storage, cost).
"""
