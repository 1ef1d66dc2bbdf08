"""method=eat: fine-tune one arm (dense | eat | paper_code) on a classification task, calibrate the exit head and choose
tau on dev, then score eval once at the chosen tau and at every swept tau (the frontier).

Training [P Alg. 2, R]: CE(final) + 0.3 CE(exit head) [Eq. 1] (+ 0.3 CE(patience head), only with method.patience=true:
the rule needs a head of its own); pruning annealed per epoch (epoch e of
E prunes p (e-1)/(E-1)); local attention on throughout; no exit while training. The checkpoint is chosen on dev with
the arm's full inference settings minus the exit (pruning at its target). Weights are cached under
$STRATA_CACHE/eat-checkpoints keyed by everything that determines them, so method=eat_bench times the same models.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from eat import calibration as C
from eat import prune as P
from eat.config import VARIANTS
from eat.model import Distilled, EatModel, Settings
from experiments import batches as B
from experiments import data as D
from experiments import metrics as M
from experiments.assets import cache_dir, data_fingerprint
from experiments.context import RunContext
from experiments.evaluate import evaluate
from experiments.finetune import encode_dev, record_samples
from experiments.models import load_encoder, tokenizer_fingerprint
from experiments.results import write_json
from experiments.store import model_fingerprint
from experiments.train import fit

log = logging.getLogger(__name__)
TRAINING_KEYS = ("variant", "exit_layer", "patience_layer", "exit_weight", "pooling", "prune_after", "prune_ratio",
                 "prune_rule", "scorer", "window", "anneal", "distill", "distill_temperature", "distill_mu")
# bump when training semantics change: old checkpoints are then never read (2: an arm's training is seeded by its
# own config, no longer by whatever ran before it in the process; 3: no patience head unless patience=true, so the
# loss is Eq. 1, and layer 4 prunes before its exit head reads it)
CHECKPOINT_VERSION = 3


def patience_layer_of(m: DictConfig) -> int | None:
    """The layer of the patience head, or None: it exists only for the patience rule (method.patience=true)."""
    if m.variant == "dense" or not m.patience:
        return None
    return m.patience_layer if m.patience_layer is not None else m.exit_layer - 1


def settings_of(m: DictConfig) -> Settings:
    """The arm's inference settings without an exit threshold (tau is chosen on dev)."""
    if m.variant not in VARIANTS:
        raise ValueError(f"method.variant={m.variant!r} is not one of {', '.join(VARIANTS)}")
    if m.variant == "dense":
        return Settings().dense()
    s = Settings(prune_after=tuple(m.prune_after), prune_ratio=m.prune_ratio, prune_rule=m.prune_rule,
                 scorer=m.scorer, window=m.window, patience=m.patience)
    if m.variant == "paper_code":  # the official code: zero-masking under its keep rule, dense mask, batch exit [R]
        s = replace(s, prune_rule="repo", prune_mode="mask", kernel="masked", exit_mode="batch")
    return s


def check(cfg: DictConfig) -> None:
    """Refusals before any work."""
    m = cfg.method
    if cfg.task.type not in ("cls", "pair"):
        raise ValueError(f"method={m.name} classifies sentences (pairs); task={cfg.task.name} is type "
                         f"{cfg.task.type}: use a cls/pair task (rt-polarity, vitaminc, movie-reviews)")
    if m.anneal not in ("epoch", "none"):
        raise ValueError(f"method.anneal={m.anneal!r} is not one of epoch, none")
    if not m.taus or any(not 0 < t <= 1 for t in m.taus):
        raise ValueError(f"method.taus={list(m.taus)}: give thresholds in (0, 1]")
    ext = list(m.get("extension_taus") or [])
    if any(not 0 < t <= 1 for t in ext) or set(ext) & set(m.taus):
        raise ValueError(f"method.extension_taus={ext}: give thresholds in (0, 1] that are not already in "
                         f"method.taus={list(m.taus)}")
    if m.variant != "dense" and m.exit_layer is not None and m.exit_layer >= cfg.model.num_layers:
        raise ValueError(f"method.exit_layer={m.exit_layer} but model={cfg.model.name} has {cfg.model.num_layers} "
                         "layers: pick a layer below the last")
    if m.variant != "dense" and m.patience:
        if m.exit_layer is None:
            raise ValueError("method.patience=true compares the patience head with the exit head, but "
                             "method.exit_layer=null: set method.exit_layer or method.patience=false")
        p = patience_layer_of(m)
        if not 1 <= p < m.exit_layer:
            raise ValueError(f"method.patience_layer={p} must be in 1..{m.exit_layer - 1} (below method.exit_layer="
                             f"{m.exit_layer}): set method.patience_layer to a layer below the exit")
    settings_of(m)


@dataclass
class Data:
    tok: object
    raw: object
    train: object
    dev: object
    evals: object


def load_data(cfg: DictConfig, tok=None) -> Data:
    if tok is None:
        tok, _ = load_encoder(cfg.model)
    raw = D.load_splits(cfg.task, cfg.data)
    n = D.max_length(cfg.task, cfg.data)
    return Data(tok, raw, D.encode(raw["train"], tok, cfg.task, n, train=True), encode_dev(cfg, tok, raw),
                D.encode(raw["eval"], tok, cfg.task, n, train=False))


def build(cfg: DictConfig) -> EatModel:
    m = cfg.method
    _, enc = load_encoder(cfg.model)
    dense = m.variant == "dense"  # the baseline is the encoder fine-tuned alone: no extra heads
    return EatModel(enc, len(cfg.task.label_names), exit_layer=None if dense else m.exit_layer,
                    patience_layer=patience_layer_of(m), exit_weight=m.exit_weight,
                    settings=settings_of(m), pooling=m.pooling or cfg.model.pooling)


def checkpoint_path(cfg: DictConfig, ctx: RunContext, model: EatModel, tok) -> Path:
    """Keyed by everything that determines the training: the configs, the untrained encoder's weights and the
    tokenizer (fingerprints, so a rebuilt asset is a new key) and the data asset's manifest."""
    m = cfg.method
    what = {"version": CHECKPOINT_VERSION, "model": OmegaConf.to_container(cfg.model, resolve=True),
            "task": OmegaConf.to_container(cfg.task, resolve=True),
            "data": OmegaConf.to_container(cfg.data, resolve=True),
            "train": {k: v for k, v in OmegaConf.to_container(cfg.train, resolve=True).items() if k != "progress"},
            # the patience layer as built: a patience_layer that patience=false never reads trains nothing
            "method": {**{k: OmegaConf.to_container(m, resolve=True)[k] for k in TRAINING_KEYS},
                       "patience_layer": patience_layer_of(m)},
            "seed": cfg.seed, "batch_size": cfg.hardware.batch_size, "precision": cfg.hardware.precision,
            "device": ctx.device.type, "weights": model_fingerprint(model.encoder),
            "tokenizer": tokenizer_fingerprint(tok), "data": data_fingerprint(cfg.task, cfg.data)}
    key = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:20]
    root = Path(m.checkpoint_dir) if m.checkpoint_dir else cache_dir() / "eat-checkpoints"
    return root / f"{m.variant}-{cfg.model.name}-{cfg.task.name}-{key}"


def _save(path: Path, model: EatModel, info: dict) -> None:
    from safetensors.torch import save_file
    path.mkdir(parents=True, exist_ok=True)
    (path / "train.json").unlink(missing_ok=True)  # a replaced checkpoint is incomplete until its new train.json
    tmp = path / "weights.safetensors.tmp"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp))
    tmp.replace(path / "weights.safetensors")
    write_json(path / "train.json", info)  # written last: its presence says the weights are complete


def _load(path: Path, model: EatModel) -> dict | None:
    """The cached training, or None when absent, incomplete or unreadable (then it is retrained, never used)."""
    from safetensors.torch import load_file
    try:
        info = json.loads((path / "train.json").read_text())
        state = load_file(str(path / "weights.safetensors"))
        model.load_state_dict(state, strict=True)
        return info
    except FileNotFoundError:
        return None
    except Exception as e:  # a truncated or foreign file
        log.warning("eat: ignoring the unreadable checkpoint %s (%s); retraining", path, e)
        return None


def train_arm(cfg: DictConfig, ctx: RunContext, data: Data) -> tuple[EatModel, dict]:
    """The arm's trained model (from the cache when its exact training exists) and its training summary. Its head
    init and dropout are seeded by the arm's own cfg.seed, so the weights a checkpoint holds do not depend on what
    ran before in the process (the benchmark trains three arms in one), and a cached arm reproduces when rerun."""
    torch.manual_seed(cfg.seed)
    model = build(cfg)
    path = checkpoint_path(cfg, ctx, model, data.tok)
    info = None if cfg.force else _load(path, model)  # force=true retrains and replaces the checkpoint
    if info is not None:
        log.info("eat: reusing the %s checkpoint %s", cfg.method.variant, path)
        return model.to(ctx.device), {**info, "cached": True}
    m, pad = cfg.method, data.tok.pad_token_id
    target = model.settings
    train_settings = target if m.variant == "dense" else replace(target, tau=None)
    batches, n_batches = B.train_batches(data.train, cfg.hardware.batch_size, pad, cfg.seed,
                                         cfg.train.group_by_length, **B.loading(cfg.hardware, ctx.device))
    epochs = max(1, math.ceil(cfg.train.epochs))

    def annealed(epoch: int):
        frac = 1.0 if m.anneal == "none" or epochs == 1 else min(1.0, epoch / (epochs - 1))
        model.settings = replace(train_settings, prune_ratio=train_settings.prune_ratio * frac)
        return batches(epoch)

    trainee = model
    if m.distill and m.variant != "dense":
        with torch.random.fork_rng(devices=range(torch.cuda.device_count())):  # a cached teacher draws nothing
            teacher, _ = train_arm(OmegaConf.merge(cfg, {"method": {"variant": "dense", "distill": False}}), ctx, data)
        trainee = Distilled(model, teacher.to(ctx.device), m.distill_temperature, m.distill_mu)
    dev_split = "dev" if data.dev is not None else "eval"
    dev_feats = data.dev if data.dev is not None else data.evals

    def select(_):
        with model.using(target):  # the checkpoint is judged as it will run, minus the exit
            return evaluate(model, dev_feats, data.raw[dev_split], cfg.task, cfg.hardware.eval_batch_size,
                            ctx.device, pad).as_split("dev")
    res = fit(trainee, annealed, n_batches, cfg.train, evaluate=select, objective="dev/accuracy",
              higher_is_better=True, device=ctx.device, precision=cfg.hardware.precision,
              on_eval=lambda s, mt: ctx.log_metrics(mt, s), log_metrics=ctx.sink)
    model.settings = target
    info = {"steps": res.steps, "best_step": res.best_step, "epochs": res.epochs, "train_s": res.train_s,
            "step_ms": res.step_ms, "history": res.history, "dev/accuracy": res.best["dev/accuracy"]}
    _save(path, model, info)
    return model, {**info, "cached": False}


@torch.inference_mode()
def predict(model: EatModel, feats, pad: int, batch_size: int, device, settings: Settings,
            batch1: bool = True) -> dict[str, np.ndarray]:
    """Logits, depth and retention per example, and (no exit) the exit head's logits.

    A batch-level exit (paper_code: "exit only when the whole batch is confident") is scored as the paper scored and
    timed it, at batch 1 [P §6], where the batch is the example and the rule is the per-example one: computed on
    batches of `batch_size` under that rule (the numbers of batch-1 passes, up to float rounding, at a fraction of the
    time; tests/eat/test_run.py checks it against batch-1 passes). batch1=False scores the batch rule on batches of
    `batch_size`, what a batched deployment of the official code computes."""
    if batch1 and settings.exit_mode == "batch":
        settings = replace(settings, exit_mode="example")
    rows = D.rows_of(feats)
    model.eval()
    out = {"logits": [], "depth": [], "retention": [], "exit_logits": [], "tokens_in": [], "tokens_kept": []}
    with model.using(settings):
        for i in range(0, len(rows), batch_size):
            b = {k: v.to(device) for k, v in D.collate(rows[i:i + batch_size], pad).items() if k != "labels"}
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
    sched = P.scheduled_retention(max(1, int(round(n.mean()))), s.prune_after, s.prune_ratio, s.prune_rule,
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


def _probs(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    return torch.softmax(torch.as_tensor(logits, dtype=torch.float64) / temperature, -1).numpy()


def _acc(p: dict) -> float:
    return float((p["logits"].argmax(1) == p["labels"]).mean())


def calibrate(cfg: DictConfig, model: EatModel, dev: dict, evals: dict) -> dict[str, float]:
    """The paper's rule (eat.calibration.calibrate: temperature fitted on dev, applied when the exit head's dev ECE
    exceeds the threshold [P §7.2]), set on the model; ECE before and after on dev and on the held-out eval split."""
    m = cfg.method
    if model.exit_layer is None:
        return {}
    # method.calibrate=false: a threshold no ECE exceeds, so T stays 1 (the fit is still reported)
    c = C.calibrate(dev["exit_logits"], dev["labels"], m.ece_threshold if m.calibrate else 1.0, m.ece_bins)
    model.temperature.fill_(c.temperature)
    return {"calib/ece_dev_before": c.ece_before, "calib/ece_dev_after": c.ece_after,
            "calib/temperature": c.temperature, "calib/fitted_temperature": c.fitted_temperature,
            **{f"calib/ece_eval_{when}": M.ece(_probs(evals["exit_logits"], t), evals["labels"], m.ece_bins)
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
        accs[tau] = _acc(p)
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


def prepare(cfg: DictConfig, ctx: RunContext, data: Data | None = None):
    """Everything an arm needs to be scored or timed: data, the trained model with its exit head calibrated and
    its tau chosen on dev, and what was measured on the way."""
    check(cfg)
    data = data or load_data(cfg)
    model, info = train_arm(cfg, ctx, data)
    pad, bs = data.tok.pad_token_id, cfg.hardware.eval_batch_size
    s = model.settings
    dev_feats = data.dev if data.dev is not None else data.evals
    dev = predict(model, dev_feats, pad, bs, ctx.device, s)
    evals = predict(model, data.evals, pad, bs, ctx.device, s)
    out = {"dev/accuracy_no_exit": _acc(dev), **calibrate(cfg, model, dev, evals)}
    if "exit_logits" in evals:  # is the exit head doing the task? (an exit head at the majority class exits nothing)
        out["eval/exit_head_accuracy"] = float((evals["exit_logits"].argmax(1) == evals["labels"]).mean())
    tau, dev_accs, why = None, {}, "no exit head"
    if model.exit_layer is not None and cfg.method.variant != "dense":
        tau, dev_accs, why = choose_tau(cfg, model, dev_feats, pad, _acc(dev), ctx.device)
    model.settings = replace(s, tau=tau)
    return data, model, info, {"tau": tau, "dev_accs": dev_accs, "tau_choice": why, "no_exit": evals,
                               "metrics": out}


def score(p: dict, task: DictConfig) -> dict[str, float]:
    preds = p["logits"].argmax(1)
    out = M.classification_metrics(list(task.metrics), preds, p["labels"])
    out.update(M.majority_baselines(p["labels"], ["accuracy", *task.metrics]))
    return {f"eval/{k}": float(v) for k, v in out.items()}


def _point(tau: float, p: dict) -> dict:
    return {"tau": tau, "accuracy": _acc(p), "avg_depth": float(p["depth"].mean()),
            "avg_retention": float(p["retention"].mean()),
            "exit_hist": {int(d): int(n) for d, n in zip(*np.unique(p["depth"], return_counts=True))}}


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    data, model, info, sel = prepare(cfg, ctx)
    ctx.tokenizer_fingerprint = tokenizer_fingerprint(data.tok)
    record_samples(cfg, ctx, data.raw, data.train, data.evals)
    pad, bs, m = data.tok.pad_token_id, cfg.hardware.eval_batch_size, cfg.method
    swept, extension = {}, {}  # tau -> eval predictions; the chosen tau is one of swept, no exit came from prepare()
    if model.exit_layer is not None and m.variant != "dense":
        swept = {tau: predict(model, data.evals, pad, bs, ctx.device, replace(model.settings, tau=tau))
                 for tau in sorted(m.taus)}
        extension = {tau: predict(model, data.evals, pad, bs, ctx.device, replace(model.settings, tau=tau))
                     for tau in sorted(m.get("extension_taus") or [])}
    no_exit = sel["no_exit"]
    chosen = swept[sel["tau"]] if sel["tau"] in swept else no_exit
    metrics = {**score(chosen, cfg.task), **sel["metrics"],
               "eval/accuracy_no_exit": _acc(no_exit), "eval/avg_depth": float(chosen["depth"].mean()),
               "eval/avg_retention": float(chosen["retention"].mean()),
               "eat/tau": sel["tau"] if sel["tau"] is not None else float("nan"),
               "train/steps": info["steps"], "train/best_step": info["best_step"], "time/train_s": info["train_s"],
               "time/step_ms": info["step_ms"]}
    frontier = [{**_point(tau, p), "dev_accuracy": sel["dev_accs"][tau]} for tau, p in swept.items()]
    ctx.per_example["eval"] = {"pred": chosen["logits"].argmax(1).tolist(), "label": chosen["labels"].tolist()}
    # the frontier as parallel arrays: what experiments.evidence.claims correlates (depth vs tau)
    curve = {k: [f[k] for f in frontier] for k in ("tau", "accuracy", "avg_depth", "avg_retention")}
    ctx.extra.update(history=info["history"], checkpoint_cached=info["cached"], frontier=frontier, curve=curve,
                     tau_choice=sel["tau_choice"],
                     detail={"length": chosen["length"].tolist(), "retention": chosen["retention"].round(4).tolist(),
                             "depth": chosen["depth"].tolist()},
                     reliability={when: {k: v.tolist() for k, v in M.calibration_bins(
                         _probs(no_exit["exit_logits"], t), no_exit["labels"], m.ece_bins).items()}
                         for when, t in (("before", 1.0), ("after", float(model.temperature)))}
                     if "exit_logits" in no_exit else {})
    if extension:  # off the paper's grid: labelled, never the headline
        ctx.extra["frontier_extension"] = [{**_point(tau, p), "extension": True} for tau, p in extension.items()]
    if model.settings.exit_mode == "batch" and sel["tau"] is not None:
        # the headline is batch 1 (the paper's); the batch rule read on eval batches of `bs` for comparison
        p = predict(model, data.evals, pad, bs, ctx.device, model.settings, batch1=False)
        ctx.extra["batch_exit_at_eval_batch"] = {"batch_size": bs, **_point(sel["tau"], p)}
    ctx.extra["exit_scored_at_batch"] = 1  # every exit above is what batch-1 inference computes
    ctx.extra.update(shape_of(chosen, model, model.settings))  # per layer, at the headline tau on eval
    return metrics
