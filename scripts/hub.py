"""Every Hugging Face hub id the configs name, resolved into conf/hub_manifest.yaml, and the configs checked against it.

    python -m scripts.hub --refresh            # needs network (HF_TOKEN for the gated repos): resolve every id, write
                                               # the manifest (confirmed: true) and pin each config's `revision:`
    python -m scripts.hub --refresh --only nyu-mll/glue FacebookAI/roberta-base
    python -m scripts.hub --check              # offline: every config against the manifest (tests run it too)
    python -m scripts.hub --unconfirmed        # the entries a refresh with network has not written yet

A dataset entry: revision (what its configs pin), format of its main branch (parquet | json | script: the repo ships
<name>.py, which datasets 5 refuses, so its configs must pin a revision without it, e.g. refs/convert/parquet, or
read its files through a packaged builder), gated, licence, and per builder config its splits (num_rows) and
features (datasets.Features.to_dict()). A task reads a script repo's export with hf.revision (and hf.data_dir:
<config>, the export's folder of that config, where the repo has several), or the repo's own files with
hf.data_files + hf.builder. A model entry: revision, gated, licence, model_type, tokenizer class, files, the
config.json dtype, the dtype its weights are stored in, add_prefix_space, the extras its tokenizer needs and the
architecture fields. `confirmed: false` marks facts transcribed from public hub pages, not read by a refresh.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from experiments import REPO

CONF = REPO / "conf"
MANIFEST = CONF / "hub_manifest.yaml"
PARQUET_REF = "refs/convert/parquet"
SHA = re.compile(r"^[0-9a-f]{40}$")
# config.json names of the architecture fields, per the names other model types give them
ALIASES = {"hidden_size": ("hidden_size", "dim", "n_embd", "d_model"),
           "num_hidden_layers": ("num_hidden_layers", "n_layers", "n_layer", "num_layers"),
           "num_attention_heads": ("num_attention_heads", "n_heads", "n_head"),
           "num_key_value_heads": ("num_key_value_heads",),
           "intermediate_size": ("intermediate_size", "hidden_dim", "n_inner", "ffn_dim"),
           "vocab_size": ("vocab_size",),
           "max_position_embeddings": ("max_position_embeddings", "n_positions"),
           "head_dim": ("head_dim",)}
HEADER = """\
# Every Hugging Face hub dataset and model id that conf/ names, with what the hub holds for it. Written by
# `python -m scripts.hub --refresh` (network); `confirmed: false` = transcribed from public hub pages, not yet read by
# a refresh. Configs pin `revision` as given here; `python -m scripts.hub --check` (and tests/test_hub_manifest.py)
# check every task and model config against this file offline. Fields: see scripts/hub.py.
"""


# ---- what the configs name ----------------------------------------------------------------------------------------

def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _sweep_configs(exp: dict) -> set[str]:
    """Builder configs an experiment loads beside its task's own: a method's `hub_configs` (e.g. PEMA's XNLI language
    sets, "en+de", swept through the variable it interpolates)."""
    value = (exp.get("method") or {}).get("hub_configs")
    if not isinstance(value, str):
        return set()
    m = re.fullmatch(r"\$\{(.+)\}", value)
    values = str(((exp.get("hydra") or {}).get("sweeper") or {}).get("params", {}).get(m.group(1), "")) if m \
        else value
    return {c.strip() for v in values.split(",") for c in v.split("+") if c.strip()}


def _override(exp: dict, group: str) -> str | None:
    """The option an experiment's defaults list picks for `group` (`- override /task: xnli`), None if it picks none."""
    for item in exp.get("defaults") or []:
        if isinstance(item, dict) and f"override /{group}" in item:
            return str(item[f"override /{group}"])
    return None


def config_ids(conf: Path = CONF) -> dict[str, dict]:
    """{"datasets": {hf path: {"configs": set of builder configs, "tasks": [task names]}}, "models": {hf id: [model
    names]}}: every id conf/task, conf/model and the experiments' hub_configs name."""
    datasets: dict[str, dict] = {}
    tasks: dict[str, str] = {}
    for path in sorted((conf / "task").glob("*.yaml")):
        hf = _yaml(path).get("hf") or {}
        if hf.get("path"):
            d = datasets.setdefault(hf["path"], {"configs": set(), "tasks": []})
            d["configs"].add(hf.get("name") or hf.get("data_dir") or "default")
            d["tasks"].append(path.stem)
            tasks[path.stem] = hf["path"]
    for path in sorted((conf / "experiment").rglob("*.yaml")):
        exp = _yaml(path)
        extra = _sweep_configs(exp)
        task = _override(exp, "task")
        if extra and task in tasks:
            datasets[tasks[task]]["configs"] |= extra
    models: dict[str, list[str]] = {}
    for path in sorted((conf / "model").glob("*.yaml")):
        hf_id = _yaml(path).get("hf_id")
        if hf_id:
            models.setdefault(hf_id, []).append(path.stem)
    return {"datasets": datasets, "models": models}


# ---- the manifest file ----------------------------------------------------------------------------------------------

def load(path: Path = MANIFEST) -> dict:
    doc = _yaml(path) if path.exists() else {}
    return {"datasets": doc.get("datasets") or {}, "models": doc.get("models") or {}}


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:  # every entry spelled out, no &id001 anchors
        return True


def _mapping(dumper, data: dict):
    """Leaf mappings (splits, architecture, one column's feature) on one line; entries, configs and features block
    style."""
    flow = "_type" in data or not any(isinstance(v, dict) or isinstance(v, list) and any(isinstance(x, dict) for x in v)
                                      for v in data.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=flow)


def _sequence(dumper, data: list):
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


_Dumper.add_representer(dict, _mapping)
_Dumper.add_representer(list, _sequence)


def dump(doc: dict) -> str:
    body = yaml.dump({"datasets": doc["datasets"], "models": doc["models"]}, Dumper=_Dumper, sort_keys=False,
                     width=96, allow_unicode=True, default_flow_style=False)
    return HEADER + body


def save(doc: dict, path: Path = MANIFEST) -> None:
    path.write_text(dump(doc), encoding="utf-8")


# ---- refresh (network) ---------------------------------------------------------------------------------------------

def _gated(info) -> bool:
    return bool(getattr(info, "gated", False))


def _licence(info) -> str | None:
    card = getattr(info, "card_data", None) or getattr(info, "cardData", None)
    value = card.get("license") if card is not None else None
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _files(info) -> list[str]:
    return sorted(s.rfilename for s in info.siblings or [])


def dataset_format(path: str, files: list[str]) -> str:
    """script when the repo ships a loading script (datasets 5 refuses the repo whatever else it holds), else the
    format of its data files."""
    script = f"{path.split('/')[-1]}.py"
    if script in files or any("/" not in f and f.endswith(".py") for f in files):
        return "script"
    for fmt, ends in (("parquet", (".parquet",)), ("json", (".json", ".jsonl", ".json.gz", ".jsonl.gz")),
                      ("csv", (".csv", ".tsv")), ("arrow", (".arrow",)), ("text", (".txt",))):
        if any(f.endswith(ends) and not f.startswith(".") and f != "README.md" for f in files):
            return fmt
    return "unknown"


def _export_infos(path: str, revision: str) -> dict:
    """The dataset viewer's infos of the parquet export: {config: DatasetInfo dict} (features, splits)."""
    from datasets.utils import _dataset_viewer
    return _dataset_viewer.get_exported_dataset_infos(dataset=path, commit_hash=revision, token=None)


def _builder_infos(path: str, config: str, revision: str) -> dict:
    """features and splits of one builder config as datasets resolves it (what a run's load_dataset will see)."""
    import datasets
    info = datasets.load_dataset_builder(path, None if config == "default" else config, revision=revision).info
    return {"features": info.features.to_dict() if info.features is not None else None,
            "splits": {k: v.num_examples for k, v in (info.splits or {}).items()} or None}


def _read_files(builder: str, data_files: dict[str, str]) -> dict:
    """features and rows of a repo's own files read through a packaged builder (json infers its features only by
    reading them): the refresh downloads them, as a run would."""
    import datasets
    dd = datasets.load_dataset(builder, data_files=data_files)
    return {"features": next(iter(dd.values())).features.to_dict(), "splits": {k: v.num_rows for k, v in dd.items()}}


def _config_entry(infos: dict) -> dict:
    splits = infos.get("splits")
    if isinstance(splits, dict):  # DatasetInfo dict: {split: {"name", "num_examples", ...}}
        splits = {k: (v.get("num_examples") if isinstance(v, dict) else v) for k, v in splits.items()}
    return {"splits": splits or None, "features": infos.get("features")}


def hub_files(path: str, revision: str | None, data_files: dict[str, str]) -> dict[str, str]:
    """data_files as the hf://datasets/<repo>@<revision>/ paths experiments.data reads (the ref quoted)."""
    from urllib.parse import quote
    at = f"hf://datasets/{path}@{quote(revision or 'main', safe='')}"
    return {split: f"{at}/{f}" for split, f in data_files.items()}


def refresh_dataset(api, path: str, configs: Iterable[str], old: dict | None = None,
                    task_nodes: Iterable[dict] = ()) -> dict:
    """One dataset entry read from the hub: main's sha, files, gating and licence; per config the splits and
    features of the revision its configs pin: main's sha, or for a script repo its parquet export's. A task that reads
    data_files through a packaged builder pins main when they are main's own files (tner's JSON), else the export."""
    old = old or {}
    info = api.dataset_info(path, files_metadata=True)
    files = _files(info)
    fmt = dataset_format(path, files)
    export = None
    if fmt == "script":
        refs = api.list_repo_refs(path, repo_type="dataset")
        export = next((r.target_commit for r in getattr(refs, "converts", []) or [] if r.name == "parquet"), None)
    hf = next(((n.get("hf") or {}) for n in task_nodes if (n.get("hf") or {}).get("data_files")), None) or old
    data_files = dict(hf["data_files"]) if hf.get("data_files") else None
    builder = hf.get("builder") if data_files else None
    on_main = data_files and all(any(fnmatch.fnmatch(f, p) for f in files) for p in data_files.values())
    revision = info.sha if fmt != "script" or on_main else (export or old.get("revision"))
    entry: dict[str, Any] = {"revision": revision, "format": fmt, "gated": _gated(info), "licence": _licence(info),
                             "confirmed": True, "files": [f for f in files if not f.startswith(".")][:40]}
    if data_files:
        entry["builder"], entry["data_files"] = builder, data_files
    exported: dict = {}
    if not data_files:
        try:
            exported = _export_infos(path, revision)
        except Exception as e:  # no export (viewer disabled, gated): each config's builder is read below
            print(f"scripts.hub: {path}: no parquet export infos ({type(e).__name__}); reading its builders")
    entry["configs"] = {}
    for config in sorted(configs):
        if data_files:
            entry["configs"][config] = _config_entry(_read_files(builder, hub_files(path, revision, data_files)))
            continue
        if config == "default" and config not in exported and len(exported) == 1:
            config = next(iter(exported))  # name=None loads the one config, e.g. squad's plain_text
        infos = exported[config] if config in exported else _builder_infos(path, config, revision)
        entry["configs"][config] = _config_entry(infos)
    return entry


def _download_json(path: str, filename: str, revision: str) -> dict | None:
    import json

    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError
    try:
        return json.loads(Path(hf_hub_download(path, filename, revision=revision)).read_text(encoding="utf-8"))
    except EntryNotFoundError:
        return None


def architecture(config: dict) -> dict:
    """The architecture fields of a config.json, under one name each (DistilBERT's `dim` is `hidden_size`, ...);
    a model whose text config is nested (Gemma 3) is read from it."""
    config = config.get("text_config") or config
    out = {}
    for name, keys in ALIASES.items():
        value = next((config[k] for k in keys if config.get(k) is not None), None)
        if value is not None:
            out[name] = value
    return out


def tokenizer_extras(files: list[str], tok_config: dict | None) -> list[str]:
    """Python packages the tokenizer needs: a SentencePiece model without a tokenizer.json is converted by
    sentencepiece (with protobuf); a tiktoken file needs tiktoken."""
    extras = []
    if "tokenizer.json" not in files and any(f.endswith(".model") for f in files):
        extras += ["sentencepiece", "protobuf"]
    if any(f.endswith(".tiktoken") for f in files):
        extras.append("tiktoken")
    return extras


def prefix_space(tok_config: dict | None, tokenizer_json: Callable[[], dict | None]) -> bool | None:
    """The tokenizer's add_prefix_space: tokenizer_config.json's, else the byte-level pre-tokenizer's in
    tokenizer.json (read only then: RoBERTa's repos ship no tokenizer_config.json); None when neither sets it."""
    if tok_config and "add_prefix_space" in tok_config:
        return tok_config["add_prefix_space"]
    pre = (tokenizer_json() or {}).get("pre_tokenizer") or {}
    for p in [pre, *(pre.get("pretokenizers") or [])]:
        if p.get("type") == "ByteLevel" and "add_prefix_space" in p:
            return p["add_prefix_space"]
    return None


def weights_dtype(info) -> str | None:
    """The dtype the safetensors weights are stored in (the hub's metadata); None for .bin-only repos."""
    st = getattr(info, "safetensors", None)
    params = getattr(st, "parameters", None) or {}
    if not params:
        return None
    names = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I64": "int64"}
    return names.get(max(params, key=params.get), max(params, key=params.get))


def refresh_model(api, hf_id: str, old: dict | None = None) -> dict:
    """One model entry read from the hub: sha, gating, licence, files, config.json and tokenizer_config.json."""
    from huggingface_hub.errors import GatedRepoError
    info = api.model_info(hf_id, files_metadata=True)
    files = _files(info)
    try:
        config = _download_json(hf_id, "config.json", info.sha) or {}
        tok = _download_json(hf_id, "tokenizer_config.json", info.sha)
    except GatedRepoError:  # the listing is public, the files need an accepted licence and a token
        print(f"scripts.hub: {hf_id} is gated: its files need HF_TOKEN (or `hf auth login`) with its licence "
              "accepted on the hub; its other fields are kept unconfirmed")
        return {**(old or {}), "revision": info.sha, "gated": True, "licence": _licence(info), "confirmed": False,
                "files": [f for f in files if not f.startswith(".")][:40]}
    entry = {"revision": info.sha, "gated": _gated(info), "licence": _licence(info), "confirmed": True,
             "model_type": config.get("model_type"), "tokenizer_class": (tok or {}).get("tokenizer_class"),
             "files": [f for f in files if not f.startswith(".")][:40],
             "torch_dtype": config.get("torch_dtype", config.get("dtype")),
             "weights_dtype": weights_dtype(info),
             "add_prefix_space": prefix_space(tok, lambda: _download_json(hf_id, "tokenizer.json", info.sha)
                                              if "tokenizer.json" in files else None),
             "extras": tokenizer_extras(files, tok), "config": architecture(config)}
    if info.id != hf_id:  # a legacy id the hub redirects
        entry["redirects_to"] = info.id
    return entry


def refresh(only: Iterable[str] = (), conf: Path = CONF, path: Path = MANIFEST, api=None,
            log: Callable[[str], Any] = print) -> tuple[dict, list[str]]:
    """Resolve every id conf/ names (or those in `only`) and write the manifest; ids that fail keep their old entry
    and are listed. Returns (the manifest, the ids not refreshed)."""
    from huggingface_hub import HfApi
    api = api or HfApi()
    ids = config_ids(conf)
    doc = load(path)
    only = set(only)
    failed = []
    nodes: dict[str, list[dict]] = {}
    for p in sorted((conf / "task").glob("*.yaml")):
        node = _yaml(p)
        if (node.get("hf") or {}).get("path"):
            nodes.setdefault(node["hf"]["path"], []).append(node)
    for ds_path, d in sorted(ids["datasets"].items()):
        if only and ds_path not in only:
            continue
        try:
            doc["datasets"][ds_path] = refresh_dataset(api, ds_path, d["configs"], doc["datasets"].get(ds_path),
                                                       nodes.get(ds_path, ()))
            log(f"scripts.hub: dataset {ds_path}: {doc['datasets'][ds_path]['revision']}")
        except Exception as e:
            failed.append(f"dataset {ds_path}: {type(e).__name__}: {e}")
    for hf_id in sorted(ids["models"]):
        if only and hf_id not in only:
            continue
        try:
            doc["models"][hf_id] = refresh_model(api, hf_id, doc["models"].get(hf_id))
            log(f"scripts.hub: model {hf_id}: {doc['models'][hf_id]['revision']}")
        except Exception as e:
            failed.append(f"model {hf_id}: {type(e).__name__}: {e}")
    doc["datasets"] = dict(sorted(doc["datasets"].items()))
    doc["models"] = dict(sorted(doc["models"].items()))
    save(doc, path)
    for line in failed:
        log(f"scripts.hub: not refreshed, old entry kept: {line}")
    return doc, failed


# ---- pinning the configs ------------------------------------------------------------------------------------------

def _set_revision(text: str, revision: str | None, flow_key: str | None) -> str:
    """The yaml text with its `revision` set: a top-level `revision:` line after hf_id (models), or a `revision:` key in
    the one-line `hf: {...}` mapping (tasks)."""
    value = "null" if revision is None else revision
    if flow_key is None:
        if re.search(r"^revision:.*$", text, flags=re.M):
            return re.sub(r"^revision:.*$", f"revision: {value}", text, count=1, flags=re.M)
        return re.sub(r"^(hf_id:.*)$", rf"\1\nrevision: {value}", text, count=1, flags=re.M)
    block = re.search(rf"^{flow_key}:[ \t]*(#.*)?\n((?:[ \t]+.*\n?)+)", text, flags=re.M)
    if block is not None:  # hf:\n  path: ...\n  revision: ...
        body = block.group(2)
        if re.search(r"^\s+revision:", body, flags=re.M):
            body = re.sub(r"^(\s+)revision:.*$", rf"\g<1>revision: {value}", body, count=1, flags=re.M)
        else:
            body = re.sub(r"^(\s+)(path:.*)$", rf"\g<1>\g<2>\n\g<1>revision: {value}", body, count=1, flags=re.M)
        return text[:block.start(2)] + body + text[block.end(2):]
    line = re.search(rf"^{flow_key}: \{{(.*)\}}(.*)$", text, flags=re.M)
    if line is None:
        raise ValueError(f"no `{flow_key}:` mapping to pin a revision in")
    inner = line.group(1)
    if re.search(r"\brevision:", inner):
        inner = re.sub(r"\brevision: [^,}]*", f"revision: {value}", inner)
    else:
        inner = f"{inner}, revision: {value}"
    return text[:line.start()] + f"{flow_key}: {{{inner}}}{line.group(2)}" + text[line.end():]


def pin(doc: dict, conf: Path = CONF) -> list[Path]:
    """Set each task and model config's revision to its manifest entry's; returns the files changed."""
    changed = []
    for p in sorted((conf / "task").glob("*.yaml")):
        hf = _yaml(p).get("hf") or {}
        entry = doc["datasets"].get(hf.get("path"))
        if entry is None or hf.get("revision") == entry.get("revision"):
            continue
        p.write_text(_set_revision(p.read_text(encoding="utf-8"), entry.get("revision"), "hf"), encoding="utf-8")
        changed.append(p)
    for p in sorted((conf / "model").glob("*.yaml")):
        node = _yaml(p)
        entry = doc["models"].get(node.get("hf_id"))
        if entry is None or node.get("revision") == entry.get("revision"):
            continue
        p.write_text(_set_revision(p.read_text(encoding="utf-8"), entry.get("revision"), None), encoding="utf-8")
        changed.append(p)
    return changed


# ---- check (offline) ------------------------------------------------------------------------------------------------

def _label_names(feature: dict | None) -> list[str] | None:
    while isinstance(feature, dict) and "feature" in feature and feature.get("_type") in ("Sequence", "List"):
        feature = feature["feature"]
    return feature.get("names") if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" else None


def config_key(entry: dict, name: str | None) -> str:
    """The manifest's key of the builder config that `load_dataset(path, name)` loads: name=None loads a repo's one
    config, whatever it is called (squad's plain_text, an export's conll2003)."""
    configs = entry.get("configs") or {}
    if name is None and "default" not in configs and len(configs) == 1:
        return next(iter(configs))
    return name or "default"


def check(doc: dict | None = None, conf: Path = CONF) -> list[str]:
    """Every problem between the configs and the manifest, one line each naming the file, the key and the fix:
    an id with no entry, a script repo read without a pinned script-free revision or data_files, a revision other
    than the manifest's, a split, column or label order the hub's builder config does not have."""
    doc = doc if doc is not None else load()
    problems = []
    ids = config_ids(conf)
    for path, d in ids["datasets"].items():
        if path not in doc["datasets"]:
            problems.append(f"dataset {path} (tasks {', '.join(d['tasks'])}) has no entry in {MANIFEST.name}: "
                            "run python -m scripts.hub --refresh --only " + path)
        else:
            entry = doc["datasets"][path]
            named = {config_key(entry, None if c == "default" else c) for c in d["configs"]}
            missing = sorted(named - set(entry.get("configs") or {}))
            if missing:
                problems.append(f"dataset {path}: builder configs {missing} named by conf/ are not in its manifest "
                                f"entry: run python -m scripts.hub --refresh --only {path}")
    for hf_id, names in ids["models"].items():
        if hf_id not in doc["models"]:
            problems.append(f"model {hf_id} (conf/model/{names[0]}.yaml) has no entry in {MANIFEST.name}: run "
                            f"python -m scripts.hub --refresh --only {hf_id}")
    for p in sorted((conf / "task").glob("*.yaml")):
        node = _yaml(p)
        hf = node.get("hf") or {}
        entry = doc["datasets"].get(hf.get("path"))
        if entry is None:
            continue
        where = f"conf/task/{p.name}"
        if entry.get("data_files"):  # the manifest says how to read it: its files through a packaged builder
            want = {"builder": entry.get("builder"), "data_files": dict(entry["data_files"])}
            have = {"builder": hf.get("builder"), "data_files": dict(hf.get("data_files") or {}) or None}
            if have != want:
                problems.append(f"{where}: hf.path={hf['path']} is read through a packaged builder: set hf.builder: "
                                f"{want['builder']} and hf.data_files: {want['data_files']} (as {MANIFEST.name})")
        elif entry.get("format") == "script" and hf.get("revision") in (None, "main"):
            folder = f", hf.data_dir: {hf['name']} and hf.name: null" if hf.get("name") else ""
            problems.append(f"{where}: hf.path={hf['path']} ships a loading script on main, which datasets 5 "
                            f"refuses: set hf.revision: {entry.get('revision') or PARQUET_REF} (its parquet export)"
                            f"{folder}, or hf.data_files with hf.builder")
        elif entry.get("format") == "script" and hf.get("name"):
            problems.append(f"{where}: hf.name={hf['name']}: the parquet export of a script repo has no builder "
                            f"configs (datasets would merge them all): set hf.data_dir: {hf['name']} (its folder "
                            "there) and hf.name: null")
        if hf.get("revision") != entry.get("revision"):
            problems.append(f"{where}: hf.revision={hf.get('revision')} but {MANIFEST.name} pins "
                            f"{entry.get('revision')}: run python -m scripts.hub --refresh (it pins both)")
        if node.get("source", "offline") != "hub":  # an offline task's splits and columns are its asset's (its build
            continue                                # reads the hub copy at the pin above)
        config = (entry.get("configs") or {}).get(config_key(entry, hf.get("name") or hf.get("data_dir"))) or {}
        splits = config.get("splits")
        if splits:
            for role, split in (node.get("splits") or {"train": "train", "eval": "eval"}).items():
                if split not in splits:
                    problems.append(f"{where}: splits.{role}={split} is not a split of {hf['path']} "
                                    f"({hf.get('name') or 'default'}); it has {', '.join(splits)}")
        features = config.get("features")
        if features:
            for col in [*(node.get("text_fields") or []), node.get("label_field", "label")]:
                if col not in features:
                    problems.append(f"{where}: column {col} is not in {hf['path']}; it has {', '.join(features)}")
            names = _label_names(features.get(node.get("label_field", "label")))
            if names is not None and node.get("label_names") and list(node["label_names"]) != names:
                problems.append(f"{where}: label_names {node['label_names']} differ from the hub's ClassLabel "
                                f"order {names}: copy the hub's order")
    for p in sorted((conf / "model").glob("*.yaml")):
        node = _yaml(p)
        entry = doc["models"].get(node.get("hf_id"))
        if entry is not None and node.get("revision") != entry.get("revision"):
            problems.append(f"conf/model/{p.name}: revision={node.get('revision')} but {MANIFEST.name} pins "
                            f"{entry.get('revision')}: run python -m scripts.hub --refresh (it pins both)")
    return problems


def unconfirmed(doc: dict | None = None) -> list[str]:
    doc = doc if doc is not None else load()
    return [f"{kind[:-1]} {k}" for kind in ("datasets", "models") for k, v in doc[kind].items()
            if not v.get("confirmed")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.hub", description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--refresh", action="store_true", help="resolve every hub id (network) and pin the configs")
    mode.add_argument("--check", action="store_true", help="check the configs against the manifest (offline)")
    mode.add_argument("--unconfirmed", action="store_true", help="list the entries no refresh has written")
    ap.add_argument("--only", nargs="*", default=[], help="refresh these ids only")
    args = ap.parse_args(argv)
    failed: list[str] = []
    ids = config_ids()
    unknown = sorted(set(args.only) - set(ids["datasets"]) - set(ids["models"]))
    if unknown:
        ap.error(f"--only {' '.join(unknown)}: no conf/ file names these ids (hf.path of a task, hf_id of a model)")
    if args.refresh:
        os.environ["STRATA_HUB"] = "1"  # a refresh is the one command that must reach the hub
        from experiments.hub import online
        online()
        doc, failed = refresh(args.only)
        for p in pin(doc):
            print(f"scripts.hub: pinned {p.relative_to(REPO)}")
        if failed:  # the check below still runs: the configs agree with what the manifest holds
            print(f"scripts.hub: {len(failed)} ids not refreshed (see above); rerun with network, HF_TOKEN for the "
                  "gated ones", file=sys.stderr)
    if args.unconfirmed:
        print("\n".join(unconfirmed()) or "every entry confirmed")
        return 0
    problems = check()
    for line in problems:
        print(f"scripts.hub: {line}", file=sys.stderr)
    if not problems:
        print(f"scripts.hub: every task and model config agrees with {MANIFEST.relative_to(REPO)}")
    return 1 if problems or args.refresh and failed else 0


if __name__ == "__main__":
    sys.exit(main())
