"""TACRED (LDC2018T24) into the asset cache as data/tacred/{train,dev,eval}.jsonl: {"text", "label"} rows, the
subject and object marked in the text ([E1] ... [/E1], [E2] ... [/E2]: plain-text markers the tokenizer splits like
any word, not added vocabulary [ours]), the label an index into conf/task/tacred.yaml's label_names.

    python -m reverse_probing.tacred /path/to/tacred/data/json      (train.json, dev.json, test.json of the LDC copy)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from omegaconf import OmegaConf

from experiments import REPO
from experiments.assets import cache_dir, write_manifest

FILES = {"train": "train.json", "dev": "dev.json", "eval": "test.json"}  # the suite's split -> the LDC copy's file
MARKERS = {"subj": ("[E1]", "[/E1]"), "obj": ("[E2]", "[/E2]")}


def labels() -> list[str]:
    return list(OmegaConf.load(REPO / "conf" / "task" / "tacred.yaml").label_names)


def marked(example: dict) -> str:
    """The sentence with the subject and object wrapped in their markers (spans are inclusive token indices)."""
    tokens = list(example["token"])
    inserts = []
    for role, (open_, close) in MARKERS.items():
        start, end = example[f"{role}_start"], example[f"{role}_end"]
        if not 0 <= start <= end < len(tokens):
            raise ValueError(f"example {example.get('id')!r}: {role} span [{start}, {end}] is outside its "
                             f"{len(tokens)} tokens")
        inserts += [(start, 0, open_), (end + 1, 1, close)]
    # right to left; at one position the open marker goes in first, so an entity's close ends up before the next's open
    for position, _, marker in sorted(inserts, key=lambda x: (-x[0], x[1])):
        tokens.insert(position, marker)
    return " ".join(tokens)


def convert(source: Path, out: Path | None = None) -> Path:
    """Write data/tacred (or `out`) from an LDC copy's json directory; MANIFEST last."""
    names = labels()
    out = out or cache_dir() / "data" / "tacred"
    missing = [f for f in FILES.values() if not (source / f).is_file()]
    if missing:
        raise SystemExit(f"reverse_probing.tacred: {source} lacks {', '.join(missing)}; name the LDC copy's "
                         "data/json directory")
    out.mkdir(parents=True, exist_ok=True)
    for split, name in FILES.items():
        rows = json.loads((source / name).read_text(encoding="utf-8"))
        unknown = sorted({r["relation"] for r in rows} - set(names))
        if unknown:
            raise SystemExit(f"reverse_probing.tacred: {name} has relations {unknown} that conf/task/tacred.yaml's "
                             "label_names do not list")
        with open(out / f"{split}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": marked(r), "label": names.index(r["relation"])}) + "\n" for r in rows)
    write_manifest(out, {"asset": "data/tacred", "source": {"local": str(source.resolve())}})
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(convert(Path(sys.argv[1]).expanduser()))
