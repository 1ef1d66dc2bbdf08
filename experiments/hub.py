"""The Hugging Face hub: the one switch that lets runs reach it (models and datasets together), and the committed
manifest of every hub model and dataset id the configs name (conf/hub_manifest.yaml, written by scripts.hub)."""
from __future__ import annotations

import functools
import os
import sys

import yaml

from experiments import REPO

SWITCH = "STRATA_HUB"
MANIFEST = REPO / "conf" / "hub_manifest.yaml"
_TRUE = {"1", "ON", "YES", "TRUE"}  # what huggingface_hub and datasets read as set
_FALSE = {"0", "OFF", "NO", "FALSE"}


def wanted() -> bool:
    """Whether the environment asks for the hub, changing nothing: STRATA_HUB=1 turns it on and STRATA_HUB=0 off;
    unset, it is off unless HF_HUB_OFFLINE is set false (the older spelling, honoured for datasets too)."""
    value = os.environ.get(SWITCH, "").strip()
    if value:
        if value.upper() not in _TRUE | _FALSE:
            raise ValueError(f"{SWITCH}={value!r} is neither on nor off: set {SWITCH}=1 to let runs download hub "
                             f"models and datasets, or {SWITCH}=0 (the default) to keep them offline")
        return value.upper() in _TRUE
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in _FALSE


def online() -> bool:
    """Whether runs may reach the hub (`wanted`), for models and datasets alike, and make both libraries agree:
    HF_HUB_OFFLINE and HF_DATASETS_OFFLINE are set together (datasets obeys HF_DATASETS_OFFLINE over HF_HUB_OFFLINE,
    so turning one of them off alone leaves the datasets offline). The libraries read these variables when they are
    imported: call this first (already imported ones are updated too)."""
    on = wanted()
    flag = "0" if on else "1"
    os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = flag
    for module in ("huggingface_hub.constants", "datasets.config"):  # imported before the call: they read at import
        if module in sys.modules:
            sys.modules[module].HF_HUB_OFFLINE = not on
    if "datasets.config" in sys.modules:
        sys.modules["datasets.config"].HF_DATASETS_OFFLINE = not on
    return on


@functools.lru_cache(maxsize=1)
def manifest() -> dict:
    """conf/hub_manifest.yaml: {"datasets": {hf path: entry}, "models": {hf id: entry}} (see that file's header)."""
    doc = yaml.safe_load(MANIFEST.read_text(encoding="utf-8")) or {}
    return {"datasets": doc.get("datasets") or {}, "models": doc.get("models") or {}}
