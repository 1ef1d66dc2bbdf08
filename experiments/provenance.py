"""What a run read, noted at the one place each thing is read: `assets.require` (and a hub model's load) notes the
asset and the hash of its manifest, `models.load_tokenizer` notes the tokenizer. The runner opens `recording()` around
a method and copies what it noted into the record, so no method has to remember a provenance line.

Recordings nest: a note goes to every open recording, so a per-process memo (experiments.memo) can hold what its
computation read and note it again when a later run of the sweep takes the memoised value instead of reading.

    with recording() as reads:
        method(cfg, ctx)
    record["provenance"]["assets"] = reads.assets"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator


@dataclass
class Reads:
    assets: dict[str, str | None] = field(default_factory=dict)  # "<kind>/<name>" -> sha256 of its MANIFEST.json
    tokenizers: list[Any] = field(default_factory=list)  # in load order; fingerprinted only when a record asks

    def replay(self) -> None:
        """Note everything here again, in the recordings open now."""
        for name, sha in self.assets.items():
            note_asset(name, sha)
        for tok in self.tokenizers:
            note_tokenizer(tok)

    def tokenizer_fingerprint(self) -> str | None:
        """The first tokenizer the run loaded: the model's own (a run that loads several, such as reverse probing's
        sources, loads the first source's first)."""
        if not self.tokenizers:
            return None
        from experiments.models import tokenizer_fingerprint  # lazy: this module stays free of torch
        return tokenizer_fingerprint(self.tokenizers[0])


_OPEN: ContextVar[tuple[Reads, ...]] = ContextVar("strata_reads", default=())


@contextmanager
def recording() -> Iterator[Reads]:
    reads = Reads()
    token = _OPEN.set((*_OPEN.get(), reads))
    try:
        yield reads
    finally:
        _OPEN.reset(token)


def note_asset(name: str, sha: str | None) -> None:
    for reads in _OPEN.get():
        reads.assets[name] = sha


def note_tokenizer(tok) -> None:
    for reads in _OPEN.get():
        if not any(t is tok for t in reads.tokenizers):
            reads.tokenizers.append(tok)
