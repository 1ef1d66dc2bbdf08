"""Activation store: hidden states of a frozen model, computed once and read back instead of recomputed.

Embedding Recycling's layer-k cache is this store; intrinsic dimension, reverse
probing and few-shot layer fusion read frozen hidden states from it too.

Layout under `root/`:
    shard-<uuid>.bin        raw entries, concatenated (C order, the store's dtype)
    shard-<uuid>.json       {"format", "created_ns", "bin_bytes", "entries": {key: [offset, shape, dtype, crc32]}}
    shard-<uuid>.*.bad      a quarantined (damaged) shard: never loaded again; `compact()` deletes it
    .lock, locks/*.lock     flock files (below)
One entry = one (example, layer). Its key is a sha256 over the model fingerprint, layer, tokenizer key, max
length, dtype, select and the example's token (type) ids, so shuffled batches hit, and computing every layer
once also serves a later request for one layer. Published files are never modified in place.

Writing. A shard is streamed to `*.bin.tmp` (flock-held by its writer while it lives), fsynced, then published
under the store lock (`.lock`): the index is re-read, keys another writer published meanwhile are left out, the
.bin is renamed, then its .json is written to a .tmp and renamed. Identical concurrent requests also share a
request lock (`locks/<hash of the missing keys>.lock`), so the second waits and then finds everything stored:
two writers never compute or store an entry twice. Readers never lock.
Damage. Every read checks the entry's crc32. A damaged shard (bad crc, truncated or missing .bin, unreadable
index) is salvaged once, under the lock: its intact entries are copied to a new shard together with the bad ones
the reading view can recompute (one shard for the whole bad region, not one per entry), then it is renamed to
`*.bad`, so no later open reads it or warns about it again. Entries nobody could recompute are dropped; they are
computed again when next requested.
Orphans. Temp files that no live writer holds (their flock is free; killed writers release it) and .bin files
whose index was never written are removed at open once they are a minute old.
Compaction. `compact()` rewrites the live entries into few shards and drops duplicate, superseded, corrupt and
quarantined data; the new shards are published before the old files are unlinked, so a reader that opened
earlier keeps reading (its mmaps stay valid; a shard it had not mapped yet makes it reload the index).
    python -m experiments.store [--dir D] --check      verify every entry, print entries / bytes / dead bytes
    python -m experiments.store [--dir D] --compact    compact, print the summary before and after
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import logging
import math
import os
import threading
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments.progress import Progress

log = logging.getLogger(__name__)

FORMAT = 1  # bump when the key recipe or the shard layout changes
_DTYPES = {torch.float16: "float16", torch.float32: "float32"}
# config fields that name where a model came from, not what it computes
_PROVENANCE_KEYS = {"_name_or_path", "transformers_version", "architectures", "torch_dtype", "dtype",
                    "_attn_implementation", "_attn_implementation_autoset", "_commit_hash"}
# a file younger than this is never an orphan: it covers the instant between a writer creating its temp file and
# locking it, and a writer of an older version of this module (no locks) between publishing its .bin and .json
ORPHAN_GRACE_S = 60.0
# where flock is not supported (some network file systems) a temp file is an orphan only after this long untouched
ORPHAN_AGE_S = 24 * 3600.0
_LOCK = ".lock"


def model_fingerprint(model: torch.nn.Module) -> str:
    """sha256 over the model class, its config (minus provenance fields) and every state_dict tensor's name,
    dtype, shape and bytes: any weight change gives a new fingerprint. Hashes all weights (~0.2 s per 100 MB);
    pass `model_key=` to `hidden_states` to skip it when the caller already knows the identity."""
    h = hashlib.sha256(f"{type(model).__module__}.{type(model).__qualname__}\n".encode())
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        cfg = {k: v for k, v in config.to_dict().items() if k not in _PROVENANCE_KEYS}
        h.update(json.dumps(cfg, sort_keys=True, default=str).encode())
    for name, t in model.state_dict().items():
        t = t.detach()
        h.update(f"\n{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@dataclass
class StoreStats:
    """Counters per (example, layer) entry. A lookup happens in `hidden_states` (is it stored?) and on every
    read through a `LayerStates` view (is it stored and intact?); hits + misses = lookups."""

    hits: int = 0  # lookups that found an entry (on a read: found and crc-verified)
    misses: int = 0  # lookups that did not (absent, truncated, or corrupt)
    computed: int = 0  # entries computed with the model (misses and rebuilds)
    rebuilt: int = 0  # entries found corrupt or gone on read, recomputed and rewritten
    reads: int = 0  # entries read from disk
    bytes_read: int = 0
    bytes_written: int = 0

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)

    @property
    def hit_rate(self) -> float:
        n = self.hits + self.misses
        return self.hits / n if n else float("nan")


@contextmanager
def _flock(path: Path, blocking: bool = True) -> Iterator[bool]:
    """Exclusive flock on `path` (created if needed) for the block; yields False if busy and not `blocking`."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _writer_gone(path: Path, now: float) -> bool:
    """True if `path` (a temp file) belongs to no live writer: older than the grace period and its flock is free
    (a writer holds it until the file has its final name; the kernel releases it when the writer dies)."""
    try:
        age = now - path.stat().st_mtime
        fd = os.open(path, os.O_RDWR)  # O_RDWR: NFS emulates flock with byte-range locks, which need it
    except OSError:
        return False
    try:
        if age < ORPHAN_GRACE_S:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live writer
        except OSError:  # no flock on this file system: only age can tell
            return age > ORPHAN_AGE_S
        return True
    finally:
        os.close(fd)


class _ShardWriter:
    """Streams entries into one temp .bin (flock-held, so no cleaner takes it for an orphan), then publishes
    .bin and .json atomically, in that order (the caller holds the store lock)."""

    def __init__(self, root: Path):
        self.root = root
        self.name = f"shard-{uuid.uuid4().hex}"
        self.tmp = root / f"{self.name}.bin.tmp"
        self.f = open(self.tmp, "wb")
        try:
            fcntl.flock(self.f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass  # no flock here: the age rule protects the file
        self.entries: dict[str, list] = {}
        self.nbytes = 0

    def add(self, key: str, arr: np.ndarray) -> None:
        data = np.ascontiguousarray(arr).tobytes()
        self.f.write(data)
        self.entries[key] = [self.nbytes, list(arr.shape), str(arr.dtype), zlib.crc32(data)]
        self.nbytes += len(data)

    def commit(self, entries: dict[str, list] | None = None) -> bool:
        """Publish the shard indexing `entries` (default: all added); False, and nothing left behind, if none."""
        entries = self.entries if entries is None else entries
        if not entries:
            self.abort()
            return False
        self.f.flush()
        os.fsync(self.f.fileno())
        os.replace(self.tmp, self.root / f"{self.name}.bin")  # renamed while still locked
        self.f.close()
        index = {"format": FORMAT, "created_ns": time.time_ns(), "bin_bytes": self.nbytes, "entries": entries}
        jtmp = self.root / f"{self.name}.json.tmp"
        with open(jtmp, "w") as f:
            json.dump(index, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(jtmp, self.root / f"{self.name}.json")
        _fsync_dir(self.root)
        return True

    def abort(self) -> None:
        self.f.close()
        self.tmp.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    # makes the renames themselves durable; not possible on every platform
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _num_states(model: torch.nn.Module) -> int | None:
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    return n + 1 if isinstance(n, int) else None


def _model_device(model: torch.nn.Module) -> torch.device:
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def token_batches(lengths: Sequence[int], batch_size: int, token_budget: int | None = None) -> list[list[int]]:
    """Consecutive positions of `lengths` cut into batches of at most `batch_size` examples and, with a budget, at
    most `token_budget` padded tokens (batch size x its longest example); an example longer than the budget is a
    batch alone. Callers pass length-sorted order (longest first), so a batch pads little."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}; need >= 1")
    if token_budget is not None and token_budget < 1:
        raise ValueError(f"token_budget={token_budget}; need >= 1 or None (no budget)")
    out: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for p, n in enumerate(lengths):
        t = max(longest, n)
        if cur and (len(cur) >= batch_size or (token_budget is not None and (len(cur) + 1) * t > token_budget)):
            out.append(cur)
            cur, t = [], n
        cur.append(p)
        longest = t
    if cur:
        out.append(cur)
    return out


def _collate(examples: Sequence[dict], bidx: Sequence[int], device: torch.device) -> tuple[dict[str, Any], list[int]]:
    """Right-padded model inputs of `examples[bidx]` on `device`, and the real lengths."""
    lens = [len(examples[i]["input_ids"]) for i in bidx]
    T = max(lens)
    ids = torch.zeros(len(bidx), T, dtype=torch.long)
    mask = torch.zeros(len(bidx), T, dtype=torch.long)
    use_tt = any(examples[i].get("token_type_ids") is not None for i in bidx)
    tt = torch.zeros(len(bidx), T, dtype=torch.long) if use_tt else None
    for b, i in enumerate(bidx):
        ids[b, :lens[b]] = torch.as_tensor(examples[i]["input_ids"], dtype=torch.long)
        mask[b, :lens[b]] = 1
        if tt is not None and examples[i].get("token_type_ids") is not None:
            tt[b, :lens[b]] = torch.as_tensor(examples[i]["token_type_ids"], dtype=torch.long)
    kwargs: dict[str, Any] = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
    if tt is not None:
        kwargs["token_type_ids"] = tt.to(device)
    return kwargs, lens


def batched_hidden_states(model: torch.nn.Module, examples: Sequence[dict], idxs: Sequence[int],
                          batch_size: int, device: torch.device, token_budget: int | None = None
                          ) -> Iterator[tuple[list[int], tuple, list[int]]]:
    """Forward `examples[idxs]` in right-padded batches (eval mode, inference_mode): yields
    (example indices, HF hidden_states tuple of (B, T_max, d), real lengths) per batch. Keeps every layer at every
    position of a batch: `selected_states` keeps only what a caller needs."""
    for bidx, kwargs, lens in _batches(model, examples, idxs, batch_size, device, token_budget):
        yield bidx, _hidden_states(model, kwargs), lens


def _batches(model: torch.nn.Module, examples: Sequence[dict], idxs: Sequence[int], batch_size: int,
             device: torch.device, token_budget: int | None) -> Iterator[tuple[list[int], dict, list[int]]]:
    """(example indices, model inputs, real lengths) per right-padded batch, the model in eval mode and inference
    mode while the caller forwards them (its training flag restored after)."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            lengths = [len(examples[i]["input_ids"]) for i in idxs]
            for pos in token_batches(lengths, batch_size, token_budget):
                bidx = [idxs[p] for p in pos]
                kwargs, lens = _collate(examples, bidx, device)
                yield bidx, kwargs, lens
    finally:
        model.train(was_training)


def _hidden_states(model: torch.nn.Module, kwargs: dict) -> tuple:
    out = model(**kwargs, output_hidden_states=True)
    hs = out.hidden_states if hasattr(out, "hidden_states") else out["hidden_states"]
    if hs is None:
        raise ValueError(f"{type(model).__name__} returned no hidden_states")
    return hs


class _Stop(Exception):
    """Raised by a hook once every requested layer is captured: the rest of the forward is not needed."""


def _blocks(model: torch.nn.Module) -> torch.nn.ModuleList | None:
    """The model's stack of `num_hidden_layers` blocks (hidden_states[k] is block k-1's output), or None."""
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    if not isinstance(n, int) or n < 1:
        return None
    return next((m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n), None)


def _slice(h: torch.Tensor, last: torch.Tensor | None) -> torch.Tensor:
    """(B, T, d) -> the kept positions: every position, or (B, 1, d) at each example's last real token."""
    return h if last is None else h[torch.arange(h.size(0), device=h.device), last.to(h.device)].unsqueeze(1)


def _hooked_forward(model: torch.nn.Module, blocks: torch.nn.ModuleList, kwargs: dict, layers: Sequence[int],
                    last: torch.Tensor | None) -> dict[int, torch.Tensor]:
    """{layer: states at the kept positions} for the HF hidden_states indices `layers`, captured by forward hooks
    (0 = block 0's input, k = block k-1's output, L = the model's last_hidden_state, i.e. after a final norm where
    the model has one), so no other layer or position is ever held; the forward stops after the deepest one."""
    L = len(blocks)
    want = set(layers)
    got: dict[int, torch.Tensor] = {}
    deepest = max(want)

    def pre(_m, args, kw):
        x = args[0] if args else kw["hidden_states"]
        got[0] = _slice(x, last)
        if deepest == 0:
            raise _Stop

    def post(k):
        def hook(_m, _args, output):
            if k in want and k < L:
                got[k] = _slice(output[0] if isinstance(output, tuple) else output, last)
            if k == deepest and k < L:
                raise _Stop
        return hook

    handles = []
    try:
        if 0 in want:
            handles.append(blocks[0].register_forward_pre_hook(pre, with_kwargs=True))
        handles += [blocks[k - 1].register_forward_hook(post(k)) for k in range(1, min(deepest, L - 1) + 1)]
        try:
            out = model(**kwargs)
        except _Stop:
            return got
        if L in want:
            h = out.last_hidden_state if hasattr(out, "last_hidden_state") else out["last_hidden_state"]
            got[L] = _slice(h, last)
        return got
    finally:
        for handle in handles:
            handle.remove()


# model class -> whether its hook-captured states equal its hidden_states bit for bit (checked once per process)
_HOOKS_MATCH: dict[type, bool] = {}


def _hooks_match(model: torch.nn.Module, blocks: torch.nn.ModuleList, kwargs: dict) -> bool:
    """Compare hooks against output_hidden_states on one example, once per model class; a class whose states differ
    keeps the full extraction (correct, only larger)."""
    cls = type(model)
    if cls not in _HOOKS_MATCH:
        one = {k: v[:1, : int(kwargs["attention_mask"][0].sum())] if torch.is_tensor(v) else v
               for k, v in kwargs.items()}
        full = model(**{k: v for k, v in one.items() if k != "use_cache"}, output_hidden_states=True)
        full = full.hidden_states if hasattr(full, "hidden_states") else full["hidden_states"]
        hooked = _hooked_forward(model, blocks, one, range(len(full)), None)
        ok = len(full) == len(blocks) + 1 and all(torch.equal(full[k], hooked[k]) for k in range(len(full)))
        if not ok:
            log.warning("activation store: %s's hook-captured states differ from its hidden_states; extracting "
                        "every layer and position for it", cls.__name__)
        _HOOKS_MATCH[cls] = ok
    return _HOOKS_MATCH[cls]


def selected_states(model: torch.nn.Module, examples: Sequence[dict], idxs: Sequence[int],
                    layers: dict[int, Sequence[int]], select: str, batch_size: int, device: torch.device,
                    token_budget: int | None = None) -> Iterator[tuple[list[int], dict[int, torch.Tensor], list[int]]]:
    """Forward `examples[idxs]` in right-padded batches (eval mode, inference_mode), keeping only the layers each
    example needs (`layers[i]`, HF hidden_states indices) at the positions `select` keeps ("all" or "last"): yields
    (example indices, {layer: (B, T_max or 1, d)}, real lengths). Same values as `batched_hidden_states`; what is held
    per batch is (layers needed) x (positions kept) instead of every layer at every position."""
    blocks = _blocks(model)
    for bidx, kwargs, lens in _batches(model, examples, idxs, batch_size, device, token_budget):
        if getattr(getattr(model, "config", None), "use_cache", None) is not None:
            kwargs["use_cache"] = False  # a decoder's KV cache of every layer (~1.6 MB a token at 13B) unused
        want = sorted({k for i in bidx for k in layers[i]})
        last = torch.as_tensor(lens) - 1 if select == "last" else None
        if blocks is not None and _hooks_match(model, blocks, kwargs):
            yield bidx, _hooked_forward(model, blocks, kwargs, want, last), lens
            continue
        hs = _hidden_states(model, kwargs)
        yield bidx, {k: _slice(hs[k], last) for k in want}, lens


class ActivationStore:
    """Content-addressed, memory-mapped store of per-example hidden states (see the module docstring).
    `maintain=False` opens without side effects (no salvage, no orphan removal): what `--check` uses."""

    def __init__(self, root: str | Path, dtype: torch.dtype = torch.float16,
                 max_shard_bytes: int = 1 << 30, *, maintain: bool = True):
        if dtype not in _DTYPES:
            raise ValueError(f"store dtype must be torch.float16 or torch.float32, got {dtype}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.dtype = dtype
        self.np_dtype = np.dtype(_DTYPES[dtype])
        self.max_shard_bytes = max_shard_bytes  # roll to a new shard past this, so no file grows unbounded
        self.maintain = maintain
        self.stats = StoreStats()
        self._mutex = threading.RLock()  # the store lock is one flock per process; threads queue here
        self._depth = 0
        self._unfixable: set[str] = set()  # damaged shards that could not be quarantined (warned once)
        self._reset()
        self.refresh()
        if maintain:
            self._clean_orphans()

    def _reset(self) -> None:
        self._shards: list[str] = []  # loaded shard names; entries refer to them by position
        self._sid: dict[str, int] = {}
        self._known: set[str] = set()  # loaded, or unreadable (never parsed twice)
        self._counts: dict[str, tuple[int, int]] = {}  # shard -> (entries in its index, entries past its .bin end)
        self._damaged: dict[str, str] = {}  # shard -> why, until salvaged (left in place: read-only, maintain=False)
        # key -> (shard position, offset, shape, dtype, crc32); a plain dict: ~200 B per entry
        self._index: dict[str, tuple[int, int, tuple[int, ...], str, int]] = {}
        self._maps: dict[int, np.memmap] = {}  # arrays already handed out keep their own map alive

    # ---- locks -------------------------------------------------------------------------------------
    @contextmanager
    def _locked(self, blocking: bool = True) -> Iterator[bool]:
        """The store lock (reentrant within this object): held to publish, salvage, clean and compact."""
        if not self._mutex.acquire(blocking):
            yield False
            return
        try:
            if self._depth:
                self._depth += 1
                try:
                    yield True
                finally:
                    self._depth -= 1
                return
            with _flock(self.root / _LOCK, blocking) as got:
                self._depth = int(got)
                try:
                    yield got
                finally:
                    self._depth = 0
        finally:
            self._mutex.release()

    def _request_lock(self, keys: Sequence[str]):
        """Serializes writers that miss the same keys: the second finds them stored when it gets the lock."""
        h = hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:32]
        (self.root / "locks").mkdir(exist_ok=True)
        return _flock(self.root / "locks" / f"{h}.lock")

    # ---- index -------------------------------------------------------------------------------------
    def refresh(self, repair: bool = True) -> int:
        """Bring the index up to date with the shards on disk (published, quarantined or compacted by any process);
        returns how many shards were loaded. Shards apply oldest first, so the newest copy of a key wins. A shard
        found damaged here (unreadable index, missing or truncated .bin) is salvaged when `repair` and the store
        maintains itself; otherwise it is only recorded (`summary()` counts it) and its readable entries are used."""
        loaded, damaged = 0, {}
        for _ in range(3):  # again if a shard vanished while we read (a concurrent compaction)
            names = {p.name[:-5] for p in self.root.glob("shard-*.json")}
            if not names.issuperset(self._shards):
                self._reset()  # shards were removed: rebuild the index from what is there now
            found, vanished = [], False
            for name in names - self._known:
                try:
                    meta = json.loads((self.root / f"{name}.json").read_text())
                    entries = meta["entries"]
                    if not isinstance(entries, dict):
                        raise TypeError(f"entries is a {type(entries).__name__}, not a dict")
                except FileNotFoundError:
                    vanished = True
                    continue
                except (OSError, ValueError, KeyError, TypeError) as e:
                    self._known.add(name)
                    damaged[name] = f"unreadable index: {e}"
                    continue
                found.append((meta.get("created_ns", 0), name, entries))
            for _, name, entries in sorted(found):
                why = self._add_shard(name, entries)
                if why == "vanished":
                    vanished = True
                elif why:
                    damaged[name] = why
                loaded += why != "vanished"
            if not vanished:
                break
        self._damaged.update(damaged)
        if repair and self.maintain:
            for name, why in list(self._damaged.items()):
                if name in self._unfixable:
                    continue
                try:
                    self._salvage(name, None, why)
                except OSError as e:  # e.g. a read-only root: use what is readable
                    self._unfixable.add(name)
                    log.warning("activation store: %s is damaged (%s) and cannot be quarantined (%s)",
                                self.root / name, why, e)
        return loaded

    def _add_shard(self, name: str, entries: dict[str, list]) -> str | None:
        """Index a shard; returns why it is damaged, "vanished" if it was removed meanwhile, else None."""
        binp = self.root / f"{name}.bin"
        try:
            size = binp.stat().st_size
        except FileNotFoundError:
            if not (self.root / f"{name}.json").exists():
                return "vanished"  # compaction unlinks the .json before the .bin
            size = -1
        self._known.add(name)
        sid = len(self._shards)
        self._shards.append(name)
        self._sid[name] = sid
        short = 0
        for key, (off, shape, dt, crc) in entries.items():
            shape = tuple(shape)
            if off + math.prod(shape) * np.dtype(dt).itemsize > size:
                short += 1  # past the end of the .bin: never stored
                continue
            self._index[key] = (sid, off, shape, dt, crc)
        self._counts[name] = (len(entries), short)
        if short:
            return f"{'missing' if size < 0 else 'truncated'} .bin: {short} of {len(entries)} entries unreadable"
        return None

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: str) -> bool:
        return key in self._index

    def disk_bytes(self) -> int:
        """Bytes of the .bin files this store indexes (what the paper's 'storage' counts on disk)."""
        return sum(_size(self.root / f"{n}.bin") for n in self._shards)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_maps"] = {}  # memmaps would pickle as full copies; a DataLoader worker reopens its own
        del state["_mutex"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _mutex=threading.RLock(), _depth=0)

    # ---- keys --------------------------------------------------------------------------------------
    def _example_hash(self, fp: str, ex: dict, tokenizer_key: str, max_length: int, select: str):
        ids = np.asarray(ex["input_ids"], dtype=np.int64)
        tt = ex.get("token_type_ids")
        if not 0 < len(ids) <= max_length:
            raise ValueError(f"example has {len(ids)} tokens; need 1..max_length={max_length} (truncate first)")
        if tt is not None and len(tt) != len(ids):
            raise ValueError("token_type_ids and input_ids differ in length")
        header = [FORMAT, fp, tokenizer_key, max_length, _DTYPES[self.dtype], select, len(ids), tt is not None]
        h = hashlib.sha256(json.dumps(header).encode())
        h.update(ids.tobytes())
        if tt is not None:
            h.update(np.asarray(tt, dtype=np.int64).tobytes())
        return h

    @staticmethod
    def _layer_key(base, layer: int) -> str:
        h = base.copy()
        h.update(b"|layer=%d" % layer)
        return h.hexdigest()

    # ---- the main call -----------------------------------------------------------------------------
    def hidden_states(self, model: torch.nn.Module, examples: Sequence[dict], layers: Sequence[int] | str,
                      *, tokenizer_key: str, max_length: int, select: str = "all", batch_size: int = 32,
                      device: Any = None, model_key: str | None = None,
                      token_budget: int | None = None) -> LayerStates:
        """Ensure every (example, layer) is stored, computing only what is missing; return a lazy view.

        `layers`: HF hidden_states indices (0 = embedding output, k = output of block k) or "all".
        `select`: "all" keeps every real token, (T_i, d); "last" keeps the last real token, (1, d).
        `device`: where to compute (default: where the model is; the model is moved there if needed).
        `model_key`: identifies the model instead of `model_fingerprint(model)` (skips hashing the weights).
        `token_budget`: at most this many padded tokens per forward (batch size x longest example), on top of
        `batch_size`; None = `batch_size` alone. Batching never changes a key, so cached entries are reused.
        Only the requested layers at the selected positions are held while computing (`selected_states`).
        """
        if select not in ("all", "last"):
            raise ValueError(f"select must be 'all' or 'last', got {select!r}")
        device = torch.device(device) if device is not None else _model_device(model)
        if _model_device(model) != device:
            model.to(device)
        n_states = _num_states(model)
        if n_states is None:  # no config: ask the model once
            if not examples:
                raise ValueError("cannot resolve layers for a model without config from zero examples")
            probe = batched_hidden_states(model, examples, [0], 1, device)
            try:
                n_states = len(next(probe)[1])
            finally:
                probe.close()  # restores the model's train/eval mode
        layer_list = list(range(n_states)) if layers == "all" else [int(k) for k in layers]
        bad = [k for k in layer_list if not 0 <= k < n_states]
        if bad or not layer_list:
            raise ValueError(f"layers {bad or layer_list} out of range 0..{n_states - 1}")
        fp = model_key if model_key is not None else model_fingerprint(model)
        keys = []
        for ex in examples:
            base = self._example_hash(fp, ex, tokenizer_key, max_length, select)
            keys.append([self._layer_key(base, k) for k in layer_list])

        view = LayerStates(self, model, examples, layer_list, keys, select, fp if model_key is None else None,
                           batch_size, device, token_budget)
        if any(k not in self._index for row in keys for k in row):
            self.refresh()  # another process may have computed them meanwhile
        need = self._missing(keys)
        pending = [keys[i][j] for i, js in need.items() for j in js]
        with self._request_lock(pending) if need else nullcontext():
            if need and self.refresh():  # a writer of the same keys finished while we waited
                need = self._missing(keys)
            misses = sum(k not in self._index for row in keys for k in row)
            self.stats.misses += misses
            self.stats.hits += sum(map(len, keys)) - misses
            if need:
                self._publish(self._fill(_ShardWriter(self.root), view, need))
        return view

    def _missing(self, keys: list[list[str]]) -> dict[int, list[int]]:
        """example -> positions in its key row that are not stored (a key repeated in the request: once)."""
        need: dict[int, list[int]] = {}
        seen: set[str] = set()
        for i, row in enumerate(keys):
            for j, key in enumerate(row):
                if key not in self._index and key not in seen:
                    seen.add(key)
                    need.setdefault(i, []).append(j)
        return need

    def _fill(self, writer: _ShardWriter, view: LayerStates, need: dict[int, list[int]],
              replaces: frozenset[str] = frozenset()) -> _ShardWriter:
        """Compute the (example, layer position) entries in `need` into `writer`, publishing it and starting a new
        one past max_shard_bytes; returns the last writer, unpublished (the caller publishes it)."""
        if not need:
            return writer
        idxs = sorted(need, key=lambda i: -len(view.examples[i]["input_ids"]))  # similar lengths pad less
        bar = Progress(len(idxs), "activation store", unit="ex")
        try:
            layers = {i: [view.layers[j] for j in need[i]] for i in idxs}
            batches = selected_states(view.model, view.examples, idxs, layers, view.select, view.batch_size,
                                      view.device, view.token_budget)
            for bidx, hs, lens in batches:
                bar.update(len(bidx))
                for b, i in enumerate(bidx):
                    for j in need[i]:
                        h = hs[view.layers[j]][b]
                        h = h[: lens[b]] if view.select == "all" else h
                        arr = h.to(dtype=self.dtype, device="cpu").numpy()
                        writer.add(view.keys[i][j], arr)
                        self.stats.computed += 1
                        self.stats.bytes_written += arr.nbytes
                if writer.nbytes >= self.max_shard_bytes:
                    self._publish(writer, replaces)
                    writer = _ShardWriter(self.root)
        except BaseException:
            try:  # keep finished work (e.g. an interrupted 10k-example pass)
                self._publish(writer, replaces)
            except Exception:
                writer.abort()
            raise
        finally:
            bar.close()
        return writer

    def _publish(self, writer: _ShardWriter, replaces: frozenset[str] = frozenset()) -> None:
        """Publish under the store lock, indexing only keys that no other shard (except `replaces`) holds now:
        what a concurrent writer stored meanwhile stays dead bytes in this .bin until `compact()`."""
        with self._locked():
            self.refresh(repair=False)
            fresh = {k: v for k, v in writer.entries.items()
                     if k not in self._index or self._shards[self._index[k][0]] in replaces}
            if writer.commit(fresh):
                self._add_shard(writer.name, fresh)

    # ---- damage ------------------------------------------------------------------------------------
    def _salvage(self, name: str, view: LayerStates | None, why: str) -> None:
        """Replace a damaged shard, once for all processes: its intact entries are copied (crc-verified) into a new
        shard, with the bad ones `view` requested recomputed by its model, then the shard is quarantined."""
        with self._locked():
            self.refresh(repair=False)
            if not (self.root / f"{name}.json").exists():
                return  # another process salvaged it first
            sid = self._sid.get(name)
            own = sorted((e[1], k) for k, e in self._index.items() if e[0] == sid) if sid is not None else []
            writer, bad = _ShardWriter(self.root), []
            for _, key in own:
                raw = self._raw(self._index[key])
                if isinstance(raw, str):
                    bad.append(key)
                else:
                    _, _, shape, dt, _ = self._index[key]
                    writer.add(key, raw.view(dt).reshape(shape))
            need: dict[int, list[int]] = {}
            if view is not None and bad:
                where = {k: (i, j) for i, row in enumerate(view.keys) for j, k in enumerate(row)}
                for key in bad:
                    if key in where:
                        need.setdefault(where[key][0], []).append(where[key][1])
            kept, rebuilt = len(own) - len(bad), sum(map(len, need.values()))
            n, short = self._counts.get(name, (0, 0))
            self._publish(self._fill(writer, view, need, frozenset({name})), frozenset({name}))
            self._quarantine(name)
            self.stats.rebuilt += rebuilt
            log.warning("activation store: %s is damaged (%s); %d of its %d entries unusable: %d recomputed now, "
                        "%d left to recompute when next requested; %d intact entries moved to a new shard; "
                        "quarantined as %s.*.bad", self.root / name, why, len(bad) + short, n, rebuilt,
                        len(bad) + short - rebuilt, kept, name)

    def _quarantine(self, name: str) -> None:
        for ext in ("json", "bin"):  # the index first: once it is gone no process loads the shard
            try:
                os.replace(self.root / f"{name}.{ext}", self.root / f"{name}.{ext}.bad")
            except FileNotFoundError:
                pass
        _fsync_dir(self.root)
        self._damaged.pop(name, None)
        self.refresh(repair=False)

    def _heal(self, view: LayerStates, i: int, j: int) -> tuple[np.ndarray, bool]:
        """Entry (i, j) of `view` could not be read: under the store lock, read it again (another process may have
        repaired it), else salvage its shard or, if it is gone, recompute every entry of `view` that is gone.
        Returns the entry and whether it was recomputed."""
        key = view.keys[i][j]
        with self._locked():
            self.refresh(repair=False)
            got = self._read(key)
            if isinstance(got, np.ndarray):
                return got, False
            if view.model is None:
                raise RuntimeError(f"stored entry (example {i}, layer {view.layers[j]}) is unusable ({got}) and "
                                   "this unpickled view holds no model to rebuild it")
            if view._fingerprint is not None and model_fingerprint(view.model) != view._fingerprint:
                raise RuntimeError("the model changed since hidden_states(); cannot rebuild a stored entry with it")
            e = self._index.get(key)
            if e is not None:
                self._salvage(self._shards[e[0]], view, got)
            else:
                need = self._missing(view.keys)
                n = sum(map(len, need.values()))
                log.warning("activation store: %d entries of this view are no longer stored; recomputing them", n)
                self._publish(self._fill(_ShardWriter(self.root), view, need))
                self.stats.rebuilt += n
            got = self._read(key)
        if not isinstance(got, np.ndarray):
            raise RuntimeError(f"stored entry (example {i}, layer {view.layers[j]}) is still unusable after "
                               f"rebuilding it ({got})")
        return got, True

    # ---- reads -------------------------------------------------------------------------------------
    def _map(self, sid: int) -> np.memmap:
        mm = self._maps.get(sid)
        if mm is None:
            if len(self._maps) >= 256:  # each map holds a file descriptor; close the oldest
                del self._maps[next(iter(self._maps))]
            mm = np.memmap(self.root / f"{self._shards[sid]}.bin", dtype=np.uint8, mode="r")
            self._maps[sid] = mm
        return mm

    def _raw(self, e: tuple) -> np.ndarray | str:
        """An index entry's crc-verified bytes (a view into its shard), or a string saying why it is unusable."""
        sid, off, shape, dt, crc = e
        n = math.prod(shape) * np.dtype(dt).itemsize
        try:
            mm = self._map(sid)
        except (FileNotFoundError, ValueError) as err:  # gone, or empty; other OSErrors (EMFILE...) are no damage
            return f"shard {self._shards[sid]}.bin cannot be opened ({err})"
        if off + n > mm.shape[0]:
            return f"shard {self._shards[sid]}.bin is truncated"
        raw = mm[off: off + n]
        if zlib.crc32(raw) != crc:
            return f"crc32 mismatch in shard {self._shards[sid]}.bin at offset {off}"
        return raw

    def _read(self, key: str) -> np.ndarray | str:
        """The entry as a read-only array view into its shard, or a string saying why it is unusable."""
        e = self._index.get(key)
        if e is None:
            return "not in the index"
        raw = self._raw(e)
        if isinstance(raw, str):
            return raw
        self.stats.reads += 1
        self.stats.bytes_read += raw.shape[0]
        return raw.view(e[3]).reshape(e[2])

    # ---- maintenance -------------------------------------------------------------------------------
    def _orphans(self) -> tuple[list[Path], list[Path]]:
        """(orphans, files being written): temp files and unindexed .bin files, split by whether a writer lives."""
        now, orphans, writing = time.time(), [], []
        for p in sorted(self.root.glob("shard-*.tmp")):
            (orphans if _writer_gone(p, now) else writing).append(p)
        for p in sorted(self.root.glob("shard-*.bin")):
            if not p.with_suffix(".json").exists():  # a writer died between its .bin and its .json
                try:
                    old = now - p.stat().st_mtime >= ORPHAN_GRACE_S
                except FileNotFoundError:
                    continue
                (orphans if old else writing).append(p)
        return orphans, writing

    def _clean_orphans(self) -> list[Path]:
        """Remove what killed writers left behind; skipped (not waited for) while another process holds the lock,
        since publishing an unindexed .bin's index happens under it."""
        try:
            with self._locked(blocking=False) as got:
                if not got:
                    return []
                orphans = self._orphans()[0]
                for p in orphans:
                    p.unlink(missing_ok=True)
        except OSError as e:  # read-only root
            log.debug("activation store: cannot clean orphans in %s (%s)", self.root, e)
            return []
        if orphans:
            log.info("activation store: removed %d orphan file(s) of killed writers from %s", len(orphans), self.root)
        return orphans

    def _live(self, verify: bool) -> tuple[list[tuple[str, tuple]], list[str]]:
        """(key, index entry) of every live entry in shard and offset order, and the shards of those that failed
        their crc32 (once per failed entry)."""
        live, corrupt = [], []
        for key, e in sorted(self._index.items(), key=lambda kv: (kv[1][0], kv[1][1])):
            if verify and isinstance(self._raw(e), str):
                corrupt.append(self._shards[e[0]])
            else:
                live.append((key, e))
        return live, corrupt

    def summary(self, verify: bool = True) -> dict[str, Any]:
        """What the root holds. bytes = live_bytes + dead_bytes + index_bytes (+ writing_bytes of live writers);
        dead bytes are duplicate or superseded copies, corrupt or truncated entries, quarantined shards and
        orphans. With `verify`, every live entry's crc32 is checked (a corrupt one counts as dead). Damaged shards
        hold a corrupt or truncated entry, or have an unreadable index."""
        return self._survey(verify)[0]

    def _survey(self, verify: bool) -> tuple[dict[str, Any], list[tuple[str, tuple]]]:
        self.refresh(repair=False)
        live, corrupt = self._live(verify)
        live_bytes = sum(math.prod(e[2]) * np.dtype(e[3]).itemsize for _, e in live)
        bin_bytes = self.disk_bytes()
        index_bytes = sum(_size(self.root / f"{n}.json") for n in self._shards)
        unreadable = [n for n in self._damaged if n not in self._sid]
        quarantined = sorted(self.root.glob("shard-*.bad"))
        orphans, writing = self._orphans()
        dead = (bin_bytes - live_bytes + sum(map(_size, quarantined + orphans))
                + sum(_size(self.root / f"{n}.{x}") for n in unreadable for x in ("json", "bin")))
        in_range = sum(n - short for n, short in self._counts.values())
        quarantined_shards = {p.name.split(".")[0] for p in quarantined}
        return {"root": str(self.root), "shards": len(self._shards), "entries": len(live),
                "live_bytes": live_bytes, "dead_bytes": dead, "index_bytes": index_bytes,
                "bytes": live_bytes + dead + index_bytes, "writing_bytes": sum(map(_size, writing)),
                "duplicate_entries": in_range - len(self._index), "corrupt_entries": len(corrupt),
                "truncated_entries": sum(short for _, short in self._counts.values()),
                "damaged_shards": len({*self._damaged, *corrupt}), "quarantined_shards": len(quarantined_shards),
                "orphan_files": len(orphans), "verified": verify}, live

    def compact(self) -> dict[str, Any]:
        """Rewrite the live, crc-verified entries into as few shards as max_shard_bytes allows and drop everything
        else (duplicates, superseded copies, corrupt entries, damaged and quarantined shards, orphans). The new
        shards are fsynced and published first (they are the newest, so they win), then the old indexes are
        unlinked, then the old .bin files: a crash leaves a consistent store, and a reader that opened before keeps
        reading valid data. Holds the store lock (writers wait to publish; readers never wait).
        Returns {"before": summary, "after": summary, "rewritten": bool}."""
        with self._locked():
            before, live = self._survey(verify=True)
            if (before["dead_bytes"] == 0 and not before["damaged_shards"]
                    and before["shards"] <= 1 + before["live_bytes"] // self.max_shard_bytes):
                return {"before": before, "after": before, "rewritten": False}
            old = [self.root / f"{n}.{x}" for n in [*self._shards, *self._damaged] for x in ("json", "bin")]
            junk = sorted(self.root.glob("shard-*.bad")) + self._orphans()[0]
            writer = _ShardWriter(self.root)
            try:  # a failure here leaves the old shards in charge and some new ones duplicating them: consistent
                for key, e in live:
                    raw = self._raw(e)  # verified again: what is written is what was checked
                    if isinstance(raw, str):
                        continue
                    writer.add(key, raw.view(e[3]).reshape(e[2]))
                    if writer.nbytes >= self.max_shard_bytes:
                        writer.commit()
                        writer = _ShardWriter(self.root)
                writer.commit()
            except BaseException:
                writer.abort()
                raise
            for p in old:  # .json first (all of them), so no reader loads an index whose .bin is gone
                if p.suffix == ".json":
                    p.unlink(missing_ok=True)
            _fsync_dir(self.root)
            for p in [q for q in old if q.suffix != ".json"] + junk:
                p.unlink(missing_ok=True)
            self._clean_locks()
            _fsync_dir(self.root)
            self._reset()
            self.refresh(repair=False)
            after = self.summary(verify=False)
        log.info("activation store: compacted %s: %d -> %d shards, %d -> %d bytes", self.root, before["shards"],
                 after["shards"], before["bytes"], after["bytes"])
        return {"before": before, "after": after, "rewritten": True}

    def _clean_locks(self) -> None:
        """Remove request-lock files nobody holds that are a day old (a rare race merely costs a duplicate
        computation, which publishing drops)."""
        now = time.time()
        for p in (self.root / "locks").glob("*.lock"):
            try:
                if now - p.stat().st_mtime < ORPHAN_AGE_S:
                    continue
                with _flock(p, blocking=False) as got:
                    if got:
                        p.unlink(missing_ok=True)
            except OSError:
                continue


class LayerStates:
    """Lazy view over the stored states of one `hidden_states` call. Each read is crc-verified; a bad entry is
    recomputed with the model held here (with every other bad entry of its shard this view asked for) and
    rewritten, so corrupt data is never returned."""

    def __init__(self, store: ActivationStore, model: torch.nn.Module, examples: Sequence[dict],
                 layers: list[int], keys: list[list[str]], select: str, fingerprint: str | None,
                 batch_size: int, device: torch.device, token_budget: int | None = None):
        self.store = store
        self.model = model
        self.examples = examples
        self.layers = layers
        self.keys = keys
        self.select = select
        self.batch_size = batch_size
        self.device = device
        self.token_budget = token_budget
        self._fingerprint = fingerprint  # None when the caller named the model (model_key)
        self.lengths = [len(ex["input_ids"]) if select == "all" else 1 for ex in examples]

    def __getstate__(self) -> dict:
        # HF models with forward hooks do not pickle; a copy (e.g. in a spawned DataLoader worker) can
        # still read and verify, but raises instead of rebuilding a bad entry
        return {**self.__dict__, "model": None}

    def __len__(self) -> int:
        return len(self.examples)

    def _pos(self, layer: int) -> int:
        try:
            return self.layers.index(layer)
        except ValueError:
            raise KeyError(f"layer {layer} was not requested (have {self.layers})") from None

    def _get(self, i: int, j: int) -> np.ndarray:
        """Entry (example i, layer position j); a read-only numpy view into its shard."""
        st = self.store
        got = st._read(self.keys[i][j])
        if not isinstance(got, np.ndarray) and st.refresh():
            got = st._read(self.keys[i][j])  # another process replaced its shard (salvage, compaction)
        rebuilt = False
        if not isinstance(got, np.ndarray):
            got, rebuilt = st._heal(self, i, j)
        if rebuilt:
            st.stats.misses += 1
        else:
            st.stats.hits += 1
        return got

    def _index(self, i: int) -> int:
        n = len(self.examples)
        if not -n <= i < n:
            raise IndexError(i)
        return i % n

    def __getitem__(self, i: int) -> torch.Tensor:
        """(n_layers, T_i or 1, d) for the requested layers, in request order."""
        i = self._index(i)
        return torch.from_numpy(np.stack([self._get(i, j) for j in range(len(self.layers))]))

    def __iter__(self) -> Iterator[torch.Tensor]:
        return (self[i] for i in range(len(self)))

    def layer(self, k: int) -> _LayerView:
        """Sequence-like view over examples returning (T_i or 1, d) tensors of layer k."""
        return _LayerView(self, self._pos(k))

    def padded(self, indices: Sequence[int], layer: int,
               dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded (B, T_max, d) states of `layer` for a batch, plus its (B, T_max) attention mask."""
        j = self._pos(layer)
        idx = [self._index(i) for i in indices]
        rows = [self._get(i, j) for i in idx]
        T = max(r.shape[0] for r in rows)
        out = np.zeros((len(rows), T, rows[0].shape[1]), dtype=self.store.np_dtype)
        mask = torch.zeros(len(rows), T, dtype=torch.long)
        for b, r in enumerate(rows):
            out[b, : r.shape[0]] = r
            mask[b, : r.shape[0]] = 1
        x = torch.from_numpy(out)
        return (x.to(dtype) if dtype is not None else x), mask


class _LayerView:
    def __init__(self, states: LayerStates, j: int):
        self.states, self.j = states, j

    def __len__(self) -> int:
        return len(self.states)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(self.states._get(self.states._index(i), self.j).copy())

    def __iter__(self) -> Iterator[torch.Tensor]:
        return (self[i] for i in range(len(self)))


_ROWS = (("shards", "shards"), ("entries", "entries"), ("live bytes", "live_bytes"), ("dead bytes", "dead_bytes"),
         ("index bytes", "index_bytes"), ("total bytes", "bytes"), ("duplicate entries", "duplicate_entries"),
         ("corrupt entries", "corrupt_entries"), ("truncated entries", "truncated_entries"),
         ("damaged shards", "damaged_shards"), ("quarantined shards", "quarantined_shards"),
         ("orphan files", "orphan_files"))


def format_summary(*columns: tuple[str, dict]) -> str:
    """A plain-text table of `summary()` dicts, one column each."""
    lines = [f"{'':20}" + "".join(f"{name:>16}" for name, _ in columns)]
    lines += [f"{label:20}" + "".join(f"{s[key]:>16,}" for _, s in columns) for label, key in _ROWS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from experiments.assets import cache_dir

    p = argparse.ArgumentParser(prog="python -m experiments.store", description="Check or compact an activation store.")
    p.add_argument("--dir", type=Path, default=None,
                   help="the store's root (default: $STRATA_CACHE/activations, the one the suite uses)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true",
                      help="verify every entry's crc32 and print a summary; changes nothing; exit 1 on damage")
    mode.add_argument("--compact", action="store_true",
                      help="rewrite the live entries into few shards, drop dead data, print the summary before/after")
    args = p.parse_args(argv)
    root = args.dir if args.dir is not None else cache_dir() / "activations"
    if not root.is_dir():
        p.error(f"--dir {root}: no such directory (pass --dir, or set STRATA_CACHE to the suite's cache)")
    # maintain=False: opening changes nothing, so --check reports the store as it is and --compact's "before" too
    store = ActivationStore(root, maintain=False)
    if args.check:
        s = store.summary(verify=True)
        print(f"activation store {root} (every entry's crc32 verified)\n{format_summary(('', s))}")
        damage = s["corrupt_entries"] + s["truncated_entries"] + s["damaged_shards"]
        if damage:
            print("damage found: `--compact` drops it; the lost entries are recomputed when next requested")
        return 1 if damage else 0
    res = store.compact()
    print(f"activation store {root}\n{format_summary(('before', res['before']), ('after', res['after']))}")
    if not res["rewritten"]:
        print("already compact: nothing rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
