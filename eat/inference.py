"""A trained arm at inference: its predictions with depth and retention per example, the exit head's calibration, the
choice of tau on dev, and what the record reads off the predictions (scores, frontier points, per-layer counts)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from omegaconf import DictConfig

from eat import calibration, prune
from eat.model import EatModel, Settings
from experiments import data, metrics


@torch.inference_mode()
def predict(model: EatModel, feats, pad: int, batch_size: int, device, settings: Settings,
            batch1: bool = True) -> dict[str, np.ndarray]:
    """Logits, depth and retention per example, and (no exit) the exit head's logits.

    A batch-level exit (paper_code: "exit only when the whole batch is confident") is scored as the paper scored and
    timed it, at batch 1 [P §6], where the batch is the example and the rule is the per-example one: computed on
    batches of `batch_size` under that rule (the numbers of batch-1 passes, up to float rounding, at a fraction of the
    time; tests/eat/test_inference.py checks it against batch-1 passes). batch1=False scores the batch rule on batches
    of `batch_size`, what a batched deployment of the official code computes."""
    if batch1 and settings.exit_mode == "batch":
        settings = replace(settings, exit_mode="example")
    rows = data.rows_of(feats)
    model.eval()
    out = {"logits": [], "depth": [], "retention": [], "exit_logits": [], "tokens_in": [], "tokens_kept": []}
    with model.using(settings):
        for i in range(0, len(rows), batch_size):
            b = {k: v.to(device) for k, v in data.collate(rows[i:i + batch_size], pad).items() if k != "labels"}
            o = model(**b, trace=True)
            out["logits"].append(o.logits.float().cpu())
            out["depth"].append(o.depth.cpu())
            out["retention"].append(o.retention.float().cpu())
            out["tokens_in"].append(o.tokens_in.cpu())
            out["tokens_kept"].append(o.tokens_kept.cpu())
            if settings.tau is None and model.exit_layer is not None:
                out["exit_logits"].append(o.layer_logits[model.exit_layer].float().cpu())
    res = {k: torch.cat(v).numpy() for k, v in out.items() if v}
    res["labels"] = np.asarray(feats["labels"])
    res["length"] = np.asarray([len(r["input_ids"]) for r in rows])
    return res


def layer_stats(p: dict, s: Settings) -> list[dict]:
    """Per encoder layer i: the share of examples that compute it, the mean token slots it computes per such example,
    their mean share of the example's own tokens left after layer i's pruning (observed) and the keep rule's share
    at the mean input length (scheduled; Fig. 2's two series). From predict()'s counts; None where nobody runs."""
    tokens, kept = p["tokens_in"], p["tokens_kept"]
    n = tokens[:, 0].astype(float)  # every example computes layer 1 on all its tokens
    sched = prune.scheduled_retention(max(1, int(round(n.mean()))), s.prune_after, s.prune_ratio, s.prune_rule,
                                      tokens.shape[1])
    out = []
    for i in range(tokens.shape[1]):
        on = tokens[:, i] > 0
        out.append({"layer": i + 1, "running": float(on.mean()),
                    "tokens_in": float(tokens[on, i].mean()) if on.any() else None,
                    "retention_observed": float((kept[on, i] / n[on]).mean()) if on.any() else None,
                    "retention_scheduled": sched[i]})
    return out


def shape_of(p: dict, model: EatModel, s: Settings) -> dict:
    """extra.layers, extra.seq_len_mean and extra.model_dims of predictions `p` made under settings `s`."""
    return {"layers": layer_stats(p, s), "seq_len_mean": float(p["tokens_in"][:, 0].mean()),
            "model_dims": {**model.dims(), "window": s.window}}


def probs(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    return torch.softmax(torch.as_tensor(logits, dtype=torch.float64) / temperature, -1).numpy()


def accuracy(p: dict) -> float:
    return float((p["logits"].argmax(1) == p["labels"]).mean())


def calibrate(cfg: DictConfig, model: EatModel, dev: dict, evals: dict) -> dict[str, float]:
    """The paper's rule (eat.calibration.calibrate: temperature fitted on dev, applied when the exit head's dev ECE
    exceeds the threshold [P §7.2]), set on the model; ECE before and after on dev and on the held-out eval split."""
    m = cfg.method
    if model.exit_layer is None:
        return {}
    # method.calibrate=false: a threshold no ECE exceeds, so T stays 1 (the fit is still reported)
    c = calibration.calibrate(dev["exit_logits"], dev["labels"], m.ece_threshold if m.calibrate else 1.0, m.ece_bins)
    model.temperature.fill_(c.temperature)
    return {"calib/ece_dev_before": c.ece_before, "calib/ece_dev_after": c.ece_after,
            "calib/temperature": c.temperature, "calib/fitted_temperature": c.fitted_temperature,
            **{f"calib/ece_eval_{when}": metrics.ece(probs(evals["exit_logits"], t), evals["labels"], m.ece_bins)
               for when, t in (("before", 1.0), ("after", c.temperature))}}


def choose_tau(cfg: DictConfig, model: EatModel, dev_feats, pad: int, base_acc: float,
               device) -> tuple[float | None, dict, str]:
    """The smallest swept tau (the most exits) whose dev accuracy stays within tau_tolerance points of no exit;
    None (no exit) when none does. Also why: when every tau gives the same dev predictions and depths, no tau was
    preferred over another, and the record says the lowest on the grid was taken for that reason."""
    m, s = cfg.method, model.settings
    accs, seen = {}, []
    for tau in sorted(m.taus):
        p = predict(model, dev_feats, pad, cfg.hardware.eval_batch_size, device, replace(s, tau=tau))
        accs[tau] = accuracy(p)
        seen.append((p["logits"].argmax(1), p["depth"]))
    ok = [t for t in sorted(accs) if 100 * (accs[t] - base_acc) >= -m.tau_tolerance]
    tau = ok[0] if ok else None
    identical = len(seen) > 1 and all(np.array_equal(a, seen[0][0]) and np.array_equal(d, seen[0][1])
                                      for a, d in seen[1:])
    if identical:
        why = ("all candidates identical on dev (the same predictions and depths at every tau): " +
               (f"the lowest tau on the grid, {tau}" if tau is not None else "none within tau_tolerance, no exit"))
    elif tau is not None:
        why = f"the smallest tau whose dev accuracy is within {m.tau_tolerance} points of no exit"
    else:
        why = f"no tau within {m.tau_tolerance} points of no exit on dev: no exit"
    return tau, accs, why


def score(p: dict, task: DictConfig) -> dict[str, float]:
    preds = p["logits"].argmax(1)
    out = metrics.classification_metrics(list(task.metrics), preds, p["labels"])
    out.update(metrics.majority_baselines(p["labels"], ["accuracy", *task.metrics]))
    return {f"eval/{k}": float(v) for k, v in out.items()}


def point(tau: float, p: dict) -> dict:
    """One point of the accuracy-depth frontier: predictions `p` at threshold `tau`."""
    return {"tau": tau, "accuracy": accuracy(p), "avg_depth": float(p["depth"].mean()),
            "avg_retention": float(p["retention"].mean()),
            "exit_hist": {int(d): int(n) for d, n in zip(*np.unique(p["depth"], return_counts=True))}}
