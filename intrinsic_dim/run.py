"""method=intrinsic_dim: one paradigm (icl-<k>, icl_unique-<k> or sft) on one (model, task).

Loads the causal LM in fp32 (once per process: a sweep reuses it and its fingerprint), builds the prompts of the
paper's split recipe, extracts the last token's state at every layer through the activation store, estimates TwoNN
(and MLE) per layer, the normalized AUC and the logit accuracy. SFT trains LoRA adapters and measures train and
validation prompts at every epoch's checkpoint (epoch 0 = the base model); checkpoints are cached, so another
experiment with the same SFT settings reuses them.
Writes nothing but the run record (curves go to ctx.extra) and the caches (store, LoRA checkpoints)."""
from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from experiments.context import RunContext
from experiments.data import load_rows
from experiments.files import cache_root, config_key, replacing, write_json
from experiments.memo import Memo
from experiments.models import load_causal_lm, tokenizer_fingerprint
from experiments.store import model_fingerprint
from intrinsic_dim import auc, estimators, extract, prompts, sft
from intrinsic_dim.config import check, parse_variant, sft_precision

log = logging.getLogger("strata.intrinsic_dim")
# bump when LoRA training changes (intrinsic_dim/sft.py): cached checkpoints are keyed by it; the base weights' and
# the training token ids' fingerprints are in the key already
CHECKPOINT_VERSION = 1
CURVE_REPLICATES = 200  # of the AUC replicates, those whose whole TwoNN curve a record keeps (31 floats each)
# a sweep in one process loads and fingerprints its LLM once (27-52 GB of fp32 weights and ~2 min per load and
# hash at paper scale); one entry, so two such models are never held together
_models = Memo(1)


# ---- model and data ------------------------------------------------------------------------------------------

def load_model(model_cfg: DictConfig) -> tuple:
    """(tokenizer, causal LM in fp32, its weights' fingerprint), loaded and hashed once per process per model
    config. A random-init model (source: config) is keyed by the torch RNG state it is drawn from too, and a hit
    leaves the RNG where a fresh load would, so what a run draws afterwards (LoRA init, dropout) is unchanged."""
    before = torch.get_rng_state()
    seeded = hashlib.sha256(before.numpy().tobytes()).hexdigest() if model_cfg.source == "config" else None
    key = (OmegaConf.to_yaml(model_cfg), seeded)

    def fresh():
        tok, lm = load_causal_lm(model_cfg)  # [C] default (fp32) dtype, pad = EOS
        # the weights as loaded, as every store user keys them (not the asset's files)
        return tok, lm, model_fingerprint(lm), before, torch.get_rng_state()

    tok, lm, base_key, rng_in, rng_out = _models(key, fresh)
    if not torch.equal(rng_in, rng_out):  # loading drew random numbers: draw as a fresh load would have
        if not torch.equal(before, rng_in):
            _models.clear()
            tok, lm, base_key, rng_in, rng_out = _models(key, fresh)
        torch.set_rng_state(rng_out)
    if any("lora_" in n for n, _ in lm.named_modules()):  # an SFT run that died before unwrapping its adapters
        _models.clear()
        tok, lm, base_key, _, rng_out = _models(key, fresh)
        torch.set_rng_state(rng_out)
    return tok, lm, base_key


def prompt_limit(m: DictConfig, lm) -> tuple[int, str]:
    """The longest prompt a run accepts and what sets it: method.max_prompt_tokens, or the model's context
    (config.max_position_embeddings) where that is shorter: RoPE past its trained range degrades states silently."""
    context = getattr(getattr(lm, "config", None), "max_position_embeddings", None)
    if isinstance(context, int) and context < m.max_prompt_tokens:
        return context, f"model.max_position_embeddings={context}"
    return m.max_prompt_tokens, f"method.max_prompt_tokens={m.max_prompt_tokens}"


def _take(rows, idx) -> list[dict]:
    return [rows[int(i)] for i in idx] if isinstance(rows, list) else list(rows.select([int(i) for i in idx]))


def split_items(cfg: DictConfig, unique: bool) -> tuple[list[dict], list[dict], list[dict]]:
    """(train pool rows, eval rows, unique-demo pool rows) by the task's recipe [C]: each split shuffled as
    datasets' shuffle(seed) does (numpy default_rng(seed).permutation), train = first n_train, eval = first n_eval of
    its split or, when it is the train split, the items after the train pool (after the unique pool when unique)."""
    m, task = cfg.method, cfg.task
    recipe = prompts.RECIPES.get(task.name)
    if recipe is None:
        raise KeyError(f"no split recipe for task {task.name!r}; add it to intrinsic_dim/prompts.py RECIPES")
    source = cfg.data.source or task.source
    if source != "hub":  # offline assets and fixtures have train/eval splits of their own
        recipe = prompts.Recipe("train", "eval", recipe.seed)
    # dev (choosing settings): train rows after the pool, and after the eval items where eval is carved from train
    skip = m.n_eval if m.dev and recipe.eval == recipe.train else 0
    if m.dev:
        recipe = prompts.Recipe(recipe.train, recipe.train, recipe.seed)
    seed = recipe.seed if m.split_seed is None else m.split_seed
    train = load_rows(task, cfg.data, recipe.train)
    perm_t = np.random.default_rng(seed).permutation(len(train))
    if recipe.eval == recipe.train:
        evals, perm_e = train, perm_t
        start = min(m.unique_pool, len(train) - m.n_eval) if unique else m.n_train + skip
        pool_end = start
    else:
        evals = load_rows(task, cfg.data, recipe.eval)
        perm_e, start, pool_end = np.random.default_rng(seed).permutation(len(evals)), 0, m.unique_pool
    n_eval = min(m.n_eval, len(perm_e) - start)
    if n_eval < m.n_eval:
        log.warning("task %s has %d eval items for this recipe, fewer than method.n_eval=%d; using them all",
                    task.name, n_eval, m.n_eval)
    if n_eval < 3:
        raise ValueError(f"task {task.name} leaves {n_eval} eval items; need at least 3 for TwoNN")
    n_train = min(m.n_train, len(perm_t))
    pool = _take(train, perm_t[:n_train])
    uniq = _take(train, perm_t[:min(pool_end, len(perm_t))]) if unique else []
    return pool, _take(evals, perm_e[start:start + n_eval]), uniq


# ---- measurement ---------------------------------------------------------------------------------------------

def estimate(states: np.ndarray, m: DictConfig, replicates: int = 0) -> dict:
    """Per-layer curves (TwoNN, MLE per k), duplicates, optional bootstrap CIs, every AUC variant and, with
    `replicates`, that many resampled-prompt replicates of the TwoNN curve and AUC (estimators.twonn_mu)."""
    device = None if m.id_device == "auto" else m.id_device
    curves: dict[str, list[float]] = {"twonn": []}
    dups, boot, mus = [], [], []
    for S in states:
        try:
            mu, n_dup = estimators.twonn_mu(S, dedup=m.dedup, device=device)
            value = float(estimators.twonn_fit(mu, m.discard_fraction))
        except estimators.TooFewPoints:  # the embedding output of a shared last token: one point, no dimension
            mu, value = None, float("nan")
            n_dup = len(S) - len(np.unique(S, axis=0))
        curves["twonn"].append(value)
        dups.append(n_dup)
        mus.append(mu)
        if m.bootstrap and not np.isnan(value):
            boot.append(estimators.bootstrap(S, estimators.twonn, n=m.bootstrap, seed=m.bootstrap_seed, device=device,
                                    discard_fraction=m.discard_fraction))
        elif m.bootstrap:
            boot.append([float("nan"), float("nan")])
    for k in m.mle_ks:
        curves[f"mle_k{k}"] = [_or_nan(estimators.mle, S, k=k, dedup=True, device=device) for S in states]
    aucs = {name: {f"{norm}{'_emb' if emb else ''}": auc.normalized_auc(c, norm, emb)
                   for norm in auc.NORMS for emb in (False, True)} for name, c in curves.items()}
    out = {"curves": curves, "n_duplicates": dups, "auc": aucs}
    if boot:
        out["bootstrap_twonn_95"] = boot
    if replicates:
        idx = estimators.resample_indices(states.shape[1], replicates, m.bootstrap_seed)
        reps = np.stack([np.full(replicates, np.nan) if mu is None  # (replicates, L+1)
                         else estimators.twonn_fit(mu[idx], m.discard_fraction) for mu in mus], axis=1)
        out["auc_replicates"] = [round(auc.normalized_auc(c, m.auc_norm, m.auc_include_embedding), 6) for c in reps]
        out["curve_replicates"] = np.round(reps[:CURVE_REPLICATES], 4).tolist()  # per-layer claims; kept small
    return out


def _or_nan(fn, *args, **kwargs) -> float:
    try:
        return fn(*args, **kwargs)
    except estimators.TooFewPoints:
        return float("nan")


def measure(store, lm, tok, tok_key: str, model_key: str, texts: list[str], gold: list[int], label_ids: list[int],
            cfg: DictConfig, device: torch.device, replicates: int = 0) -> dict:
    """Accuracy, curves and AUCs of one prompt set; "pred" (per prompt) and, with `replicates`, "auc_replicates"
    are for the caller to keep where the claims read them (popped from the dict before it goes into a record)."""
    m = cfg.method
    limit, by = prompt_limit(m, lm)
    examples = extract.tokenize(tok, texts, limit, by)
    computed0 = store.stats.computed
    t0 = time.perf_counter()
    # the store key keeps method.max_prompt_tokens: a cap by the model's context changes no stored entry
    states = extract.last_token_states(store, lm, examples, tok_key=tok_key, max_length=m.max_prompt_tokens,
                                 batch_size=m.batch_size, device=device, model_key=model_key,
                                 token_budget=m.extract_token_budget)
    t_extract = time.perf_counter() - t0
    computed = (store.stats.computed - computed0) // states.shape[0]  # prompts whose states were computed now
    logits = extract.last_logits(lm, states[-1], label_ids, device)
    acc, _ = extract.logit_accuracy(logits, gold)
    n_lab = len(label_ids)
    t0 = time.perf_counter()
    est = estimate(states, m, replicates)
    n_tokens = [len(e["input_ids"]) for e in examples]
    uniq = {tuple(e["input_ids"]) for e in examples}  # the store computes a repeated prompt once
    return {"accuracy": acc, "n_prompts": len(texts),
            "majority_rate": float(np.bincount(gold, minlength=n_lab).max() / len(gold)),  # always-one-label baseline
            "pred_counts": np.bincount(logits.argmax(1), minlength=n_lab).tolist(),
            "mean_prompt_tokens": float(np.mean(n_tokens)),
            "max_prompt_tokens": int(max(n_tokens)), "computed_prompts": int(computed),
            "extract_s": t_extract, "id_s": time.perf_counter() - t0,
            "tokens_per_s": (sum(map(len, uniq)) / t_extract) if computed == len(uniq) and t_extract > 0 else None,
            "pred": logits.argmax(1).tolist(), **est}


def summary(res: dict, m: DictConfig, split: str) -> dict[str, float]:
    key = f"{m.auc_norm}{'_emb' if m.auc_include_embedding else ''}"
    out = {f"{split}/accuracy": res["accuracy"], f"{split}/auc_twonn": res["auc"]["twonn"][key]}
    for k in m.mle_ks:
        out[f"{split}/auc_mle_k{k}"] = res["auc"][f"mle_k{k}"][key]
    return out


# ---- the run -------------------------------------------------------------------------------------------------

@dataclass
class Setting:
    """What every paradigm of one run measures with: the model and its store keys, the store, the rendered items
    (the training pool and the eval items), the label set and the unique-demo pool's rows."""
    tok: Any
    lm: Any
    base_key: str  # the base weights' fingerprint
    tok_key: str  # the tokenizer's fingerprint: the store keys prompts by their token ids under it
    store: Any
    pool: list[tuple[str, str]]
    evals: list[tuple[str, str]]
    labels: list[str]
    label_ids: list[int]
    gold: list[int]
    unique_rows: list[dict]

    def measure(self, cfg: DictConfig, ctx: RunContext, model, model_key: str, texts: list[str], gold: list[int],
                replicates: int = 0) -> dict:
        return measure(self.store, model, self.tok, self.tok_key, model_key, texts, gold, self.label_ids, cfg,
                       ctx.device, replicates)


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    check(cfg)  # before the model loads (also the runner's Method.check; a second refusal check costs nothing)
    m = cfg.method
    paradigm, k = parse_variant(m.variant)
    tok, lm, base_key = load_model(cfg.model)
    limit, by = prompt_limit(m, lm)
    if limit < m.max_prompt_tokens:
        log.warning("prompts capped at %d tokens by %s (method.max_prompt_tokens=%d is longer); a longer prompt "
                    "is an error", limit, by, m.max_prompt_tokens)
    ctx.extra.update(prompt_token_limit=limit, prompt_token_limit_by=by.split("=")[0])
    lm.to(ctx.device)
    pool_rows, eval_rows, unique_rows = split_items(cfg, unique=paradigm == "icl_unique")
    pool, evals = _render(cfg, pool_rows), _render(cfg, eval_rows)
    labels = sorted({o for _, o in evals} | {o for _, o in pool})
    label_ids = extract.label_token_ids(tok, labels, in_context=m.label_space)
    setting = Setting(tok, lm, base_key, tokenizer_fingerprint(tok), ctx.store(dtype=m.store_dtype), pool, evals,
                      labels, label_ids, [labels.index(o) for _, o in evals], unique_rows)
    ctx.n_samples.update(train_examples=len(pool), eval_examples=len(evals), unique_pool=len(unique_rows),
                         max_length=m.max_prompt_tokens)
    ctx.extra.update(paradigm=paradigm, k=k, labels=labels,
                     label_tokens=[tok.convert_ids_to_tokens(i) for i in label_ids])
    return _sft(cfg, ctx, setting) if paradigm == "sft" else _icl(cfg, ctx, setting, paradigm, k)


def _render(cfg: DictConfig, rows: list[dict]) -> list[tuple[str, str]]:
    """The task's (input, output) items; with method.label_space, each label written as scored (" positive")."""
    items = prompts.render(cfg.task.name, rows, five_choices=cfg.method.csqa_five_choices)
    return prompts.with_label_space(items) if cfg.method.label_space else items


def _icl(cfg: DictConfig, ctx: RunContext, setting: Setting, paradigm: str, k: int) -> dict[str, float]:
    """ICL-k: the eval items with k demos each (from the pool, or never reused: the unique-demo pool) on the base
    model."""
    m = cfg.method
    demos = _render(cfg, setting.unique_rows) if paradigm == "icl_unique" else setting.pool
    texts = prompts.build(paradigm, k, setting.evals, demos, m.demo_seed)
    res = setting.measure(cfg, ctx, setting.lm, setting.base_key, texts, setting.gold, m.auc_bootstrap)
    _keep_for_claims(ctx, res, setting.gold, m)
    ctx.extra.update(prompt_examples=texts[:2], **res)
    return {**summary(res, m, "eval"), **_timing(res)}


def _sft(cfg: DictConfig, ctx: RunContext, setting: Setting) -> dict[str, float]:
    """SFT: LoRA on the pool's `input\noutput` texts; train and eval prompts (zero-shot) measured at every epoch's
    checkpoint, epoch 0 being the base model."""
    m, tok, pool = cfg.method, setting.tok, setting.pool
    train_texts = [tok(prompts.combined(it), truncation=True, max_length=m.sft_max_length)["input_ids"]
                   for it in pool]
    prompt_lens = completion_starts(tok, pool, m.sft_max_length) if m.sft_loss == "completion" else None
    n_tr = len(pool) if m.sft_eval_train_n is None else min(m.sft_eval_train_n, len(pool))
    splits = {"train": ([prompts.zero_shot(q) for q in pool[:n_tr]],
                        [setting.labels.index(o) for _, o in pool[:n_tr]]),
              "eval": ([prompts.zero_shot(q) for q in setting.evals], setting.gold)}
    checkpoints: list[dict] = []

    def measure_all(epoch: int, step: int, key: str) -> None:
        for split, (texts, gold) in splits.items():
            last = split == "eval" and epoch == m.sft_epochs  # the run's result: what the claims compare
            res = setting.measure(cfg, ctx, model, key, texts, gold, m.auc_bootstrap if last else 0)
            if last:
                _keep_for_claims(ctx, res, gold, m)
            for kept in ("pred", "auc_replicates", "curve_replicates"):  # not in the checkpoint list
                res.pop(kept, None)
            checkpoints.append({"epoch": epoch, "step": step, "split": split, **res})
            log.info("sft epoch %d %s: accuracy %.4f, TwoNN AUC %.2f", epoch, split, res["accuracy"],
                     res["auc"]["twonn"][m.auc_norm])

    model = sft.add_lora(setting.lm, m.lora_r, m.lora_alpha, m.lora_dropout, list(m.lora_targets))
    try:
        measure_all(0, 0, setting.base_key)  # B = 0: the wrapped model computes exactly what the base does
        ckpt_dir, timing = _sft_checkpoints(cfg, ctx, model, setting.base_key, train_texts, prompt_lens,
                                            tok.pad_token_id, measure_all)
        ctx.extra.update(checkpoints=checkpoints, prompt_examples=[prompts.combined(pool[0]), splits["eval"][0][0]],
                         checkpoint_dir=str(ckpt_dir), sft_steps_per_epoch=_steps_per_epoch(train_texts, m))
        last = {s: [c for c in checkpoints if c["split"] == s][-1] for s in splits}
        ext = sum(c["extract_s"] for c in checkpoints)
        return {**summary(last["eval"], m, "eval"), **summary(last["train"], m, "train"),
                "sft/epochs": m.sft_epochs, "sft/steps": timing["steps"], "sft/last_loss": timing["last_loss"],
                "time/train_s": timing["train_s"], "time/step_ms": timing["step_ms"], "time/extract_s": ext,
                "time/id_s": sum(c["id_s"] for c in checkpoints)}
    finally:
        model.unload()  # the base weights as loaded (frozen, untouched), for the next run of this process


def _steps_per_epoch(train_texts: list[list[int]], m: DictConfig) -> int:
    return -(-len(train_texts) // m.sft_batch_size)


# ---- the LoRA checkpoint cache ---------------------------------------------------------------------------------

def _sft_checkpoints(cfg: DictConfig, ctx: RunContext, model, base_key: str, train_texts: list[list[int]],
                     prompt_lens: list[int] | None, pad_id: int,
                     measure_at: Callable[[int, int, str], None]) -> tuple[Path, dict]:
    """(cache directory, training timing) of one SFT setting's per-epoch LoRA checkpoints: read from the cache when
    a finished training left them there, else trained now and written. `measure_at(epoch, step, weights key)` runs at
    each checkpoint either way, with the checkpoint's adapters in `model`."""
    m = cfg.method
    precision = sft_precision(cfg)
    ckpt_dir = _checkpoint_dir(cfg, ctx, base_key, train_texts, precision)
    files = [ckpt_dir / f"epoch-{e}.safetensors" for e in range(1, m.sft_epochs + 1)]
    done = ckpt_dir / "train.json"
    # train.json is written last: without it the files may mix two trainings (a forced retrain cut short)
    if not cfg.force and done.is_file() and all(f.is_file() for f in files):
        from safetensors.torch import load_file
        log.info("sft: reusing %d cached LoRA checkpoints from %s", len(files), ckpt_dir)
        for e, f in enumerate(files, 1):
            state = load_file(str(f))
            sft.load_lora_state(model, state)
            measure_at(e, e * _steps_per_epoch(train_texts, m), extract.lora_key(base_key, state))
        return ckpt_dir, json.loads(done.read_text())
    from safetensors.torch import save_file
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    done.unlink(missing_ok=True)  # force=true: retrained, each file replaced whole

    def on_epoch(epoch: int, step: int) -> None:
        state = sft.lora_state(model)
        with replacing(files[epoch - 1]) as tmp:
            save_file(state, str(tmp))
        measure_at(epoch, step, extract.lora_key(base_key, state))

    timing = sft.train(model, train_texts, epochs=m.sft_epochs, lr=m.sft_lr, batch_size=m.sft_batch_size,
                       warmup_ratio=m.sft_warmup_ratio, seed=cfg.seed, device=ctx.device, pad_id=pad_id,
                       group_by_length=m.sft_group_by_length, on_epoch=on_epoch, log=log.info,
                       prompt_lens=prompt_lens, log_metrics=ctx.sink, precision=precision,
                       gradient_checkpointing=bool(m.sft_gradient_checkpointing))
    write_json(done, timing)
    return ckpt_dir, timing


def _checkpoint_dir(cfg: DictConfig, ctx: RunContext, base_key: str, train_texts: list[list[int]],
                    precision: str = "fp32") -> Path:
    """Cache directory of one SFT run's LoRA checkpoints, keyed by everything that determines the training: the base
    weights' fingerprint, the training texts' token ids (tokenizer and data), the settings and the code version."""
    m = cfg.method
    # precision enters the key only when it is not fp32, so the fp32 checkpoints cached so far keep their keys; 20
    # digits, the length every cached entry is named by
    key = config_key({
        **({"precision": precision} if precision != "fp32" else {}),
        "base": base_key, "r": m.lora_r, "alpha": m.lora_alpha, "dropout": m.lora_dropout,
        "targets": list(m.lora_targets), "epochs": m.sft_epochs, "lr": m.sft_lr, "bs": m.sft_batch_size,
        "warmup": m.sft_warmup_ratio, "group": m.sft_group_by_length, "seed": cfg.seed, "loss": m.sft_loss,
        "device": ctx.device.type, "data": config_key(train_texts, 64), "version": CHECKPOINT_VERSION,
    }, 20)
    return cache_root("lora-checkpoints", m.checkpoint_dir) / key


def completion_starts(tok, items: list[tuple[str, str]], max_length: int) -> list[int]:
    """Where each SFT text's label begins: the first token whose characters start at or after the zero-shot
    prompt's end (offsets of a fast tokenizer); a token straddling the boundary would hide the label's first token."""
    out = []
    for it in items:
        cut = len(prompts.zero_shot(it))
        offsets = tok(prompts.combined(it), return_offsets_mapping=True, truncation=True,
                      max_length=max_length)["offset_mapping"]
        real = [(i, a, b) for i, (a, b) in enumerate(offsets) if b > a]  # special tokens have empty spans
        start = next((i for i, a, _ in real if a >= cut), None)
        if start is None or any(a < cut < b for _, a, b in real):
            raise ValueError(f"method.sft_loss=completion: the label {it[1]!r} does not start a token after the "
                             f"prompt {prompts.zero_shot(it)[-30:]!r} (merged or truncated); use method.sft_loss=full")
        out.append(start)
    return out


def _keep_for_claims(ctx: RunContext, res: dict, gold: list[int], m: DictConfig) -> None:
    """Per-prompt predictions (accuracy CIs over examples) and the AUC's resampled-prompt replicates (AUC CIs) where
    experiments.evidence.claims reads them; both pop out of `res`, so checkpoints stay small."""
    ctx.per_example["eval"] = {"pred": res.pop("pred"), "label": list(gold)}
    reps, curves = res.pop("auc_replicates", None), res.pop("curve_replicates", None)
    if reps is not None:
        ctx.extra["replicates"] = {"eval/auc_twonn": reps, "extra.curves.twonn": curves}
        ctx.extra["replicates_how"] = (f"{m.auc_bootstrap} resamples of the eval prompts (seed {m.bootstrap_seed}), "
                                       "each layer's per-prompt mu = r2/r1 kept and TwoNN refitted")


def _timing(res: dict) -> dict[str, float]:
    out = {"time/extract_s": res["extract_s"], "time/id_s": res["id_s"], "id/n_prompts": res["n_prompts"],
           "id/max_duplicates": max(res["n_duplicates"]), "id/mean_prompt_tokens": res["mean_prompt_tokens"]}
    if res["tokens_per_s"] is not None:
        out["extract/tokens_per_s"] = res["tokens_per_s"]
    return out
