"""method=pema_vocab: the sub-vocabulary V' a fine-tuning set uses, counted with the model's tokenizer on a task's
splits (and further hub configs or tasks): Fig. 2 (unique vs total tokens) [P §3], Table 1 (tokens of the tokenizer
the corpus never uses) and Tables 2-4 (embedding and model parameter reduction) [P §5]. Reads the tokenizer and the
architecture config only, never the weights.

PEMA's other methods: `pema_sizes` (pema/sizes.py), `pema_bench` (pema/bench.py) and `pema_scores` (pema/scores.py).
Fine-tuning with PEMA is not a method of its own: it is `method=finetune pema.enabled=true` (pema/hook.py).
"""
from __future__ import annotations

import time

import numpy as np
from omegaconf import DictConfig

from experiments import data
from experiments.config import ModelConfig, TaskConfig, load_group
from experiments.context import RunContext
from experiments.files import cache_root
from experiments.models import architecture, load_tokenizer, tokenizer_fingerprint
from pema import counts, vocab
from pema.hook import keep_ids, read_splits
from pema.sizes import sizes


def load_task(name: str) -> DictConfig:
    """conf/task/<name>.yaml as a typed TaskConfig (for `method.union`)."""
    return load_group("task", name, TaskConfig, "method.union")


def vocab_tokenizer(cfg: DictConfig, rows: int):
    """The tokenizer V' is counted with: the model's own, or (method.tokenizer_of) an offline model's tokenizer of
    the same vocabulary, for a model whose own tokenizer would come from the hub (its |V|, d and N still come from
    its architecture config). Refused when the two vocabularies differ in size."""
    name = cfg.method.tokenizer_of
    if not name:
        return load_tokenizer(cfg.model)
    tok = load_tokenizer(load_group("model", name, ModelConfig, "method.tokenizer_of"))
    if len(tok) != rows:
        raise ValueError(f"method.tokenizer_of={name}: its tokenizer has {len(tok)} tokens but {cfg.model.name} has "
                         f"{rows} embedding rows, so they are not one vocabulary; name a model with {cfg.model.name}'s "
                         "tokenizer, or leave method.tokenizer_of empty")
    return tok


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    m = cfg.method
    t0 = time.perf_counter()
    n_labels = m.num_labels or len(cfg.task.label_names) or 2
    sz = sizes(architecture(cfg.model), n_labels)
    tok = vocab_tokenizer(cfg, sz.rows)
    hub_names = [c for c in m.hub_configs.split("+") if c] or [None]
    tasks = [cfg.task] + [load_task(t) for t in m.union.split("+") if t and t != cfg.task.name]
    examples, cached = {}, []
    tok_key = tokenizer_fingerprint(tok)  # names the cache entries; the record's provenance notes the tokenizer
    cache = cache_root(counts.KIND) if m.cache else None
    total = np.zeros(sz.rows, dtype=np.int64)
    read = {}
    for task in tasks:
        read[task.name] = read_splits(cfg.pema.splits, bool(task.get("dev_from_train")) or "dev" in task.splits)
        for hub in (hub_names if task is cfg.task else [None]):
            for split in read[task.name]:
                c, n_ex, hit = counts.split_counts(tok, sz.rows, task, cfg.data, hub, split, m.truncation,
                                                   m.special_tokens, tok_key, cache, cfg.force)
                total += c
                name = f"{task.name}{':' + hub if hub else ''}/{split}"
                examples[name] = n_ex
                if hit:
                    cached.append(name)
    use = vocab.usage(total)
    keep = keep_ids(tok, cfg.pema.keep_special) if m.special_tokens else []
    used = len(vocab.select(total, keep))
    red = vocab.Reduction(rows=sz.rows, used=used, d=sz.d, n_params=sz.n)
    zero = vocab.zero_count(total, len(tok))
    longest = sorted(zero.tolist(), key=lambda i: (-len(tok.convert_ids_to_tokens(i)), i))[:m.zero_examples]
    ctx.n_samples.update(examples=sum(examples.values()), max_length=data.max_length(cfg.task, cfg.data))
    ctx.extra.update(
        corpus=examples, counts_from_cache=cached, tokenizer_key=tok_key,
        tokenizer=f"{m.tokenizer_of}'s (same vocabulary)" if m.tokenizer_of else cfg.model.hf_id or cfg.model.name,
        tokenizer_size=len(tok),
        truncation=m.truncation, special_tokens=m.special_tokens, splits=read[cfg.task.name],
        kept_ids=keep, zero_count_examples=[{"id": i, "token": tok.convert_ids_to_tokens(i)} for i in longest])
    return {"vocab/rows": sz.rows, "vocab/used": used, "vocab/unique": use.unique, "vocab/total": use.total,
            "vocab/unique_pct": use.unique_pct, "vocab/zero_count": len(zero), "vocab/tokenizer_size": len(tok),
            "reduction/embedding_pct": red.embedding_pct, "reduction/model_pct": red.model_pct,
            "reduction/params_removed_m": red.removed / 1e6, "params/d": sz.d, "params/n": sz.n,
            "params/n_emb": sz.n_emb, "time/vocab_s": time.perf_counter() - t0}
