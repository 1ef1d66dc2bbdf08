"""Efficient Adaptive Transformer: An Empirical Study and Reproducible Framework.

J. Miller (OPSWAT, 2025; arXiv preprint, code github.com/miller-itsec/efficientAdaptiveTransformer, Zenodo
10.5281/zenodo.17282020). The paper summarised for users of the suite, with its inconsistencies: eat/SPEC.md.

An encoder that prunes tokens after chosen layers, attends within a local window (+ a global [CLS]) and exits early
when an intermediate head is confident. `method=eat` trains and scores the dense, EAT and paper-code arms (eat/run.py,
the model in eat/model.py, the banded kernel in eat/attention.py); `method=eat_bench` measures their speed side by side
(eat/bench.py).
"""
