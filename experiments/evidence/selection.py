"""Learning-rate selection on dev, the papers' protocol ("LR selected per model and dataset on dev"): a sweep over
`train.lr` writes one record per (lr, seed); per group of records that share their whole config but the learning
rate and the seed (so per task, model, method, variant, k, caps), the lr with the best mean dev objective over its
seeds is selected, and tables and claims read only the records at that lr. The eval split never selects anything:
each record's eval/* were scored once, at the weights its dev split chose (experiments.finetune.fit_and_score).

Learning-rate fields are every config key whose last part ends in `lr` (train.lr, method.adapter_lr): an adapter
variant that trains at method.adapter_lr is swept and grouped like any other. Ties go to the smaller lr (the
cheaper, more conservative choice), so a selection never depends on record order."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from statistics import mean

from experiments.metrics import higher_is_better
from experiments.results import NOT_GROUPED

SELECTIONS = ("best_dev", "best_dev:<config field>")  # the lr chosen on dev, or the value of another field


class SelectionError(ValueError):
    """Records that cannot be selected on dev as asked (no dev metric, no learning rate)."""


def flatten(d: dict, prefix: str = "") -> dict:
    """A record's config as {dotted path: value} (lists kept as lists); one field: records.field_of."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _is_lr(key: str) -> bool:
    return key.rsplit(".", 1)[-1].endswith("lr")


def group_key(record: dict) -> str:
    """What a record computes, but for its learning rate(s) and seed (and where it was recorded, store.dir)."""
    flat = flatten(record.get("config") or {})
    kept = {k: v for k, v in flat.items()
            if k.split(".")[0] not in NOT_GROUPED and k not in NOT_GROUPED and not _is_lr(k)}
    return json.dumps(kept, sort_keys=True, default=str)


def learning_rate(record: dict, required: bool = True) -> float | None:
    """The lr the run trained at: the metric train/lr when the method recorded it (an adapter variant's
    method.adapter_lr), else config train.lr."""
    lr = (record.get("metrics") or {}).get("train/lr")
    if lr is None:
        lr = ((record.get("config") or {}).get("train") or {}).get("lr")
    if lr is None and not required:
        return None
    if lr is None:
        raise SelectionError(f"record {record.get('run_id', '?')} has no learning rate (metrics train/lr or config "
                             "train.lr): it cannot take part in an lr selection")
    return float(lr)


def dev_key(record: dict) -> str:
    """The dev metric that selects: the task objective with eval/ -> dev/ (eval/f1 -> dev/f1)."""
    obj = ((record.get("config") or {}).get("task") or {}).get("objective") or "eval/accuracy"
    return obj.replace("eval/", "dev/", 1)


@dataclass
class Choice:
    """One group's selection: the chosen lr, the mean dev score of every lr tried, and the records kept."""
    key: str
    lr: float | None  # None: records from before lrs were recorded (require_dev=False)
    dev_metric: str
    dev_by_lr: dict[float, float]
    seeds_by_lr: dict[float, list]
    records: list[dict] = field(default_factory=list)

    @property
    def label(self) -> str:
        """'lr 3e-04 (dev/accuracy 0.812; 1e-04: 0.79, 1e-03: 0.501)' style text for table notes."""
        if not self.dev_by_lr:
            return "the only lr run; no dev split"
        others = ", ".join(f"{lr:.0e}: {v:.4g}" for lr, v in sorted(self.dev_by_lr.items()) if lr != self.lr)
        return f"lr {self.lr:.0e} ({self.dev_metric} {self.dev_by_lr[self.lr]:.4g}" + \
            (f"; {others})" if others else ")")


def dedupe(records: list[dict]) -> list[dict]:
    """One record per computation (the same config hash published by two experiments: the newest)."""
    out: dict[str, dict] = {}
    rest = []
    for r in records:
        h = r.get("config_hash")
        if h is None:
            rest.append(r)
        elif h not in out or r.get("provenance", {}).get("created_at", "") > \
                out[h].get("provenance", {}).get("created_at", ""):
            out[h] = r
    return [*out.values(), *rest]


def choose(records: list[dict], require_dev: bool = True) -> list[Choice]:
    """Per group, the lr with the best mean dev objective over seeds (ties: the smaller lr). A group whose records
    lack the dev metric is an error naming the record and the fix; with require_dev=False a group trained at one lr
    only (nothing to select: records from before dev splits) passes whole, with no dev scores."""
    groups: dict[str, list[dict]] = {}
    for r in dedupe(records):
        groups.setdefault(group_key(r), []).append(r)
    out = []
    for key, members in groups.items():
        metric = dev_key(members[0])
        by_lr: dict[float, list[dict]] = {}
        for r in members:
            by_lr.setdefault(learning_rate(r, required=require_dev), []).append(r)
        scores = {}
        if not require_dev and len(by_lr) == 1 and all((r.get("metrics") or {}).get(metric) is None for r in members):
            (lr, rs), = by_lr.items()
            out.append(Choice(key=key, lr=lr, dev_metric=metric, dev_by_lr={}, records=rs,
                              seeds_by_lr={lr: sorted(r["config"].get("seed") for r in rs)}))
            continue
        for lr, rs in by_lr.items():
            missing = [r for r in rs if (r.get("metrics") or {}).get(metric) is None]
            if missing:
                raise SelectionError(
                    f"record {missing[0].get('run_id', '?')} ({missing[0].get('exp_id', '?')}) has no {metric}: "
                    "selecting its lr on dev needs a dev split; set task.dev_from_train (e.g. 0.1) or a task.splits "
                    "dev entry for it and rerun")
            scores[lr] = mean(float(r["metrics"][metric]) for r in rs)
        sign = -1.0 if higher_is_better(metric) is False else 1.0
        best = min(scores, key=lambda lr: (-sign * scores[lr], lr))
        out.append(Choice(key=key, lr=best, dev_metric=metric, dev_by_lr=scores,
                          seeds_by_lr={lr: sorted(r["config"].get("seed") for r in rs) for lr, rs in by_lr.items()},
                          records=by_lr[best]))
    return out


def best_dev(records: list[dict]) -> list[dict]:
    """The records at each group's selected lr (all its seeds)."""
    return [r for c in choose(records) for r in c.records]


def best_dev_over(records: list[dict], path: str) -> list[dict]:
    """The records at each group's value of the config field `path` (e.g. method.trunc, a layer) with the best mean
    dev objective over seeds; a group shares the whole config but that field and the seed. Ties: the smaller value."""
    groups: dict[str, dict[str, list[dict]]] = {}
    for r in dedupe(records):
        flat = flatten(r.get("config") or {})
        kept = {k: v for k, v in flat.items() if k.split(".")[0] not in NOT_GROUPED and k not in NOT_GROUPED
                and k != path and not k.startswith(path + ".")}
        value = json.dumps(flat.get(path), sort_keys=True, default=str)
        groups.setdefault(json.dumps(kept, sort_keys=True, default=str), {}).setdefault(value, []).append(r)
    out = []
    for by_value in groups.values():
        metric = dev_key(next(iter(by_value.values()))[0])
        missing = [r for rs in by_value.values() for r in rs if (r.get("metrics") or {}).get(metric) is None]
        if missing:
            raise SelectionError(f"record {missing[0].get('run_id', '?')} has no {metric}: choosing {path} on dev "
                                 "needs a dev split (task.dev_from_train or a task.splits dev entry)")
        sign = -1.0 if higher_is_better(metric) is False else 1.0
        scores = {v: mean(float(r["metrics"][metric]) for r in rs) for v, rs in by_value.items()}
        out += by_value[min(scores, key=lambda v: (-sign * scores[v], len(v), v))]
    return out


def valid(how) -> bool:
    return how == "best_dev" or (isinstance(how, str) and how.startswith("best_dev:") and len(how) > len("best_dev:"))


def apply(how: str | None, records: list[dict]) -> list[dict]:
    """`how` = None (every record) or one of SELECTIONS: `best_dev` (the lr), `best_dev:<field>` (that field)."""
    if how is None:
        return records
    if not valid(how):
        raise SelectionError(f"select: {how!r} is not a selection; valid: {', '.join(SELECTIONS)}")
    return best_dev(records) if how == "best_dev" else best_dev_over(records, how.split(":", 1)[1])


def same_training(a: dict, b: dict) -> bool:
    """Whether two records were trained on the same data under the same schedule and caps, whatever the method and
    the learning rate (model, task with its dev split, data caps, train.* but lr, hardware): a Full baseline
    recorded by another experiment stands in for a variant=full run only when this holds."""
    def core(r):
        flat = flatten(r.get("config") or {})
        return {k: v for k, v in flat.items() if k.split(".")[0] in ("model", "task", "data", "train", "hardware")
                and not _is_lr(k) and k not in ("train.progress", "hardware.threads")}
    return core(a) == core(b)


def lr_notes(choices: list[Choice], name) -> list[str]:
    """One line per group that had an lr to choose: `name(records) -> str` names the group."""
    picked = [f"{name(c.records)}: {c.label}" for c in choices if len(c.dev_by_lr) > 1]
    return ["lr chosen on dev per variant (mean over seeds; eval never selects): " + "; ".join(sorted(picked)) + "."] \
        if picked else []


def for_table(records: list[dict], name) -> tuple[list[dict], list[str]]:
    """(the records a table shows, its note on the lr chosen per group): each group at its dev-chosen lr; records an
    lr sweep without dev scores produced stay whole (the table then shows train.lr as a column of its own)."""
    try:
        choices = choose(records, require_dev=False)
    except SelectionError:
        return records, []
    return [r for c in choices for r in c.records], lr_notes(choices, name)
