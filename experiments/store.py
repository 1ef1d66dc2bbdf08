"""Activation store: hidden states of a frozen model, computed once and read back instead of recomputed.

Embedding Recycling's layer-k cache is this store (papers/recycling.md §1, §4); intrinsic dimension, reverse
probing and few-shot layer fusion read frozen hidden states from it too.

Layout under `root/` (append-only; nothing is ever modified in place):
    shard-<uuid>.bin    raw entries, concatenated (C order, the store's dtype)
    shard-<uuid>.json   {"format", "created_ns", "bin_bytes", "entries": {key: [offset, shape, dtype, crc32]}}
One entry = one (example, layer). Its key is a sha256 over the model fingerprint, layer, tokenizer key, max
length, dtype, select and the example's token (type) ids, so shuffled batches hit, and computing every layer
once also serves a later request for one layer. Both files are written to `*.tmp`, fsynced and renamed, the
.bin first: a crash leaves an orphan .tmp or an unindexed .bin, which are ignored. Every read checks the
entry's crc32; a bad entry is recomputed into a new shard, which supersedes the old one (newer shards win).
Not safe for concurrent writers *within* one process; separate processes may share a root (each writes its
own shards; `refresh()` picks up theirs).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)

FORMAT = 1  # bump when the key recipe or the shard layout changes
_DTYPES = {torch.float16: "float16", torch.float32: "float32"}
# config fields that name where a model came from, not what it computes
_PROVENANCE_KEYS = {"_name_or_path", "transformers_version", "architectures", "torch_dtype", "dtype",
                    "_attn_implementation", "_attn_implementation_autoset", "_commit_hash"}


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
    rebuilt: int = 0  # entries found corrupt or unreadable on read, recomputed and rewritten
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


class _ShardWriter:
    """Streams entries into one temp .bin, then publishes .bin and .json atomically (in that order)."""

    def __init__(self, root: Path):
        self.root = root
        self.name = f"shard-{uuid.uuid4().hex}"
        self.tmp = root / f"{self.name}.bin.tmp"
        self.f = open(self.tmp, "wb")
        self.entries: dict[str, list] = {}
        self.nbytes = 0

    def add(self, key: str, arr: np.ndarray) -> None:
        data = np.ascontiguousarray(arr).tobytes()
        self.f.write(data)
        self.entries[key] = [self.nbytes, list(arr.shape), str(arr.dtype), zlib.crc32(data)]
        self.nbytes += len(data)

    def commit(self) -> Path | None:
        """Publish the shard; returns its .json path (None, and nothing left behind, when empty)."""
        if not self.entries:
            self.abort()
            return None
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.root / f"{self.name}.bin")
        index = {"format": FORMAT, "created_ns": time.time_ns(), "bin_bytes": self.nbytes,
                 "entries": self.entries}
        jtmp = self.root / f"{self.name}.json.tmp"
        with open(jtmp, "w") as f:
            json.dump(index, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        path = self.root / f"{self.name}.json"
        os.replace(jtmp, path)
        _fsync_dir(self.root)
        return path

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


def _num_states(model: torch.nn.Module) -> int | None:
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    return n + 1 if isinstance(n, int) else None


def _model_device(model: torch.nn.Module) -> torch.device:
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def batched_hidden_states(model: torch.nn.Module, examples: Sequence[dict], idxs: Sequence[int],
                          batch_size: int, device: torch.device) -> Iterator[tuple[list[int], tuple, list[int]]]:
    """Forward `examples[idxs]` in right-padded batches (eval mode, inference_mode): yields
    (example indices, HF hidden_states tuple of (B, T_max, d), real lengths) per batch."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for s in range(0, len(idxs), batch_size):
                bidx = list(idxs[s:s + batch_size])
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
                kwargs: dict[str, Any] = {"input_ids": ids.to(device), "attention_mask": mask.to(device),
                                          "output_hidden_states": True}
                if tt is not None:
                    kwargs["token_type_ids"] = tt.to(device)
                out = model(**kwargs)
                hs = out.hidden_states if hasattr(out, "hidden_states") else out["hidden_states"]
                if hs is None:
                    raise ValueError(f"{type(model).__name__} returned no hidden_states")
                yield bidx, hs, lens
    finally:
        model.train(was_training)


class ActivationStore:
    """Content-addressed, memory-mapped store of per-example hidden states (see the module docstring)."""

    def __init__(self, root: str | Path, dtype: torch.dtype = torch.float16,
                 max_shard_bytes: int = 1 << 30):
        if dtype not in _DTYPES:
            raise ValueError(f"store dtype must be torch.float16 or torch.float32, got {dtype}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.dtype = dtype
        self.np_dtype = np.dtype(_DTYPES[dtype])
        self.max_shard_bytes = max_shard_bytes  # roll to a new shard past this, so no file grows unbounded
        self.stats = StoreStats()
        self._shards: list[str] = []  # shard names; entries refer to them by position
        self._known: set[str] = set()
        # key -> (shard position, offset, shape, dtype, crc32); a plain dict: ~200 B per entry
        self._index: dict[str, tuple[int, int, tuple[int, ...], str, int]] = {}
        self._maps: dict[int, np.memmap] = {}
        self.refresh()

    # ---- index -------------------------------------------------------------------------------------
    def refresh(self) -> int:
        """Load shard indexes not seen yet (e.g. written by another process); returns how many were added.
        Shards apply oldest first, so the newest copy of a key wins (that is how a rebuild supersedes)."""
        found = []
        for jp in self.root.glob("shard-*.json"):
            if jp.stem in self._known:
                continue
            try:
                meta = json.loads(jp.read_text())
                entries = meta["entries"]
            except (OSError, ValueError, KeyError) as e:
                log.warning("activation store: ignoring unreadable index %s (%s)", jp, e)
                continue
            found.append((meta.get("created_ns", 0), jp.stem, entries))
        for _, name, entries in sorted(found):
            self._add_shard(name, entries)
        return len(found)

    def _add_shard(self, name: str, entries: dict[str, list]) -> None:
        binp = self.root / f"{name}.bin"
        size = binp.stat().st_size if binp.is_file() else -1
        self._known.add(name)
        sid = len(self._shards)
        self._shards.append(name)
        dropped = 0
        for key, (off, shape, dt, crc) in entries.items():
            shape = tuple(shape)
            if off + math.prod(shape) * np.dtype(dt).itemsize > size:
                dropped += 1  # missing or truncated .bin: treat the entry as never stored
                continue
            self._index[key] = (sid, off, shape, dt, crc)
        if dropped:
            log.warning("activation store: %s is missing or truncated; %d of %d entries ignored",
                        binp, dropped, len(entries))

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: str) -> bool:
        return key in self._index

    def disk_bytes(self) -> int:
        """Bytes of the .bin files this store indexes (what the paper's 'storage' counts on disk)."""
        return sum((self.root / f"{n}.bin").stat().st_size for n in self._shards
                   if (self.root / f"{n}.bin").is_file())

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_maps"] = {}  # memmaps would pickle as full copies; a DataLoader worker reopens its own
        return state

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
                      device: Any = None, model_key: str | None = None) -> LayerStates:
        """Ensure every (example, layer) is stored, computing only what is missing; return a lazy view.

        `layers`: HF hidden_states indices (0 = embedding output, k = output of block k) or "all".
        `select`: "all" keeps every real token, (T_i, d); "last" keeps the last real token, (1, d).
        `device`: where to compute (default: where the model is; the model is moved there if needed).
        `model_key`: identifies the model instead of `model_fingerprint(model)` (skips hashing the weights).
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

        if any(k not in self._index for row in keys for k in row):
            self.refresh()  # another process may have computed them meanwhile
        need: dict[int, list[int]] = {}  # example -> positions in layer_list to compute
        pending: set[str] = set()
        for i, row in enumerate(keys):
            for j, key in enumerate(row):
                if key in self._index:
                    self.stats.hits += 1
                else:
                    self.stats.misses += 1
                    if key not in pending:  # duplicate examples are computed once
                        pending.add(key)
                        need.setdefault(i, []).append(j)

        view = LayerStates(self, model, examples, layer_list, keys, select, fp if model_key is None else None,
                           batch_size, device)
        if need:
            self._compute(view, need)
        return view

    def _compute(self, view: LayerStates, need: dict[int, list[int]]) -> dict[tuple[int, int], np.ndarray]:
        """Compute the (example, layer position) entries in `need`, write them to new shard(s), index them.
        Returns the arrays only for small requests (rebuilds), to avoid holding a big computation in RAM."""
        keep = sum(map(len, need.values())) <= 64
        kept: dict[tuple[int, int], np.ndarray] = {}
        idxs = sorted(need, key=lambda i: -len(view.examples[i]["input_ids"]))  # similar lengths pad less
        writer = _ShardWriter(self.root)
        try:
            batches = batched_hidden_states(view.model, view.examples, idxs, view.batch_size, view.device)
            for bidx, hs, lens in batches:
                for b, i in enumerate(bidx):
                    for j in need[i]:
                        h = hs[view.layers[j]][b]
                        h = h[: lens[b]] if view.select == "all" else h[lens[b] - 1: lens[b]]
                        arr = h.to(dtype=self.dtype, device="cpu").numpy()
                        writer.add(view.keys[i][j], arr)
                        self.stats.computed += 1
                        self.stats.bytes_written += arr.nbytes
                        if keep:
                            kept[i, j] = arr
                if writer.nbytes >= self.max_shard_bytes:
                    self._publish(writer)
                    writer = _ShardWriter(self.root)
        except BaseException:
            try:  # keep finished work (e.g. an interrupted 10k-example pass)
                self._publish(writer)
            except Exception:
                writer.abort()
            raise
        self._publish(writer)
        return kept

    def _publish(self, writer: _ShardWriter) -> None:
        path = writer.commit()
        if path is not None:
            self._add_shard(writer.name, writer.entries)

    # ---- reads -------------------------------------------------------------------------------------
    def _map(self, sid: int) -> np.memmap:
        mm = self._maps.get(sid)
        if mm is None:
            if len(self._maps) >= 256:  # each map holds a file descriptor; close the oldest
                del self._maps[next(iter(self._maps))]
            mm = np.memmap(self.root / f"{self._shards[sid]}.bin", dtype=np.uint8, mode="r")
            self._maps[sid] = mm
        return mm

    def _read(self, key: str) -> np.ndarray | str:
        """The entry as a read-only array view into its shard, or a string saying why it is unusable."""
        e = self._index.get(key)
        if e is None:
            return "not in the index"
        sid, off, shape, dt, crc = e
        n = math.prod(shape) * np.dtype(dt).itemsize
        try:
            mm = self._map(sid)
        except (OSError, ValueError) as err:
            return f"shard {self._shards[sid]}.bin cannot be opened ({err})"
        if off + n > mm.shape[0]:
            return f"shard {self._shards[sid]}.bin is truncated"
        raw = mm[off: off + n]
        if zlib.crc32(raw) != crc:
            return f"crc32 mismatch in shard {self._shards[sid]}.bin at offset {off}"
        self.stats.reads += 1
        self.stats.bytes_read += n
        return raw.view(dt).reshape(shape)


class LayerStates:
    """Lazy view over the stored states of one `hidden_states` call. Each read is crc-verified; a bad entry is
    recomputed with the model held here and rewritten, so corrupt data is never returned."""

    def __init__(self, store: ActivationStore, model: torch.nn.Module, examples: Sequence[dict],
                 layers: list[int], keys: list[list[str]], select: str, fingerprint: str | None,
                 batch_size: int, device: torch.device):
        self.store = store
        self.model = model
        self.examples = examples
        self.layers = layers
        self.keys = keys
        self.select = select
        self.batch_size = batch_size
        self.device = device
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
        """Entry (example i, layer position j); read-only numpy (a memmap view unless it was rebuilt)."""
        st = self.store
        got = st._read(self.keys[i][j])
        if isinstance(got, np.ndarray):
            st.stats.hits += 1
            return got
        st.stats.misses += 1
        if self.model is None:
            raise RuntimeError(f"stored entry (example {i}, layer {self.layers[j]}) is unusable ({got}) and "
                               "this unpickled view holds no model to rebuild it")
        log.warning("activation store: rebuilding entry (example %d, layer %d): %s", i, self.layers[j], got)
        if self._fingerprint is not None and model_fingerprint(self.model) != self._fingerprint:
            raise RuntimeError("the model changed since hidden_states(); cannot rebuild a stored entry with it")
        arr = st._compute(self, {i: [j]})[i, j]
        st.stats.rebuilt += 1
        return arr

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
