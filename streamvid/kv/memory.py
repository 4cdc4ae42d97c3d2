"""Long-term memory: blocks evicted from the KV window keep their KV tensors, compact, and their FAISS vectors.

A block enters compact (compact.py): int8 K (per-channel scales) and V (per-token scales) by default, int4
(grouped scales, half the bytes), or as it was ("float"), optionally with only a share of its tokens. Compact
blocks live in host RAM up to `ram_mb`; beyond it the oldest are written by the spill thread ("streamvid-spill")
into a few large append-only shard files (`shard_<n>.bin`, each a run of records; a record is one block in
safetensors layout) in `disk_dir`; beyond `disk_mb` of shards the oldest blocks are dropped (from storage and from
the index) and a shard file is deleted once none of its blocks is left. Search is FAISS inner product; a block
has one vector or several (rows of a (rows, dim) array, e.g. one per region of the frame: embedders.py), each an
index entry under the block's id, and scores by its best row. This is the only module that imports faiss.

Thread contract: the engine's scheduler calls `add`, `search`, `ids_at` and `load` (a direct caller of
Reasoning may call the last three from its own thread); any thread may call `stats`, `flush`, `snapshot` and
`close`. Every method takes `_lock` (a leaf lock: nothing else is acquired while holding it; FAISS writes need
mutual exclusion) for bookkeeping only: the spill thread encodes
and writes a block outside the lock and then moves it from RAM to disk under it, and `load` reads a spilled
block outside the lock. `add` quantises outside the lock, and waits (backpressure) only when the spill thread is
more than a RAM cap behind. Blocks come back from `load` in their original dtype, on the device(s) asked for
(host tensors are pinned when CUDA is in use, so the copy to the GPU is asynchronous).
"""

from __future__ import annotations

import bisect
import json
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import torch

from streamvid.kv.compact import KINDS
from streamvid.kv.speech_index import SpeechIndex
from streamvid.kv.stored_block import StoredBlock, read_block, write_block
from streamvid.kv.window import Block

SHARD_MB = 256.0  # a shard file is closed once it holds this much (at most a quarter of the disk cap)


@dataclass(frozen=True)
class MemoryStats:
    blocks: int
    blocks_in_ram: int
    blocks_on_disk: int
    dropped: int
    ram_mb: float
    disk_mb: float
    index_rows: int = 0  # FAISS entries (the blocks' rows), searched in full by every question


@dataclass
class _Shard:
    path: Path
    size: int = 0  # bytes written
    live: int = 0  # blocks in it not dropped yet


class LongTermMemory:
    def __init__(self, dim: int, ram_mb: float = 8192.0, disk_mb: float = 65536.0,
                 disk_dir: str | Path | None = None, kv: str = "int8", keep: float = 1.0,
                 shard_mb: float = SHARD_MB):
        if kv not in KINDS:
            raise ValueError(f"kv must be one of {', '.join(KINDS)}, got {kv!r}")
        if not 0 < keep <= 1:
            raise ValueError(f"keep must be in (0, 1], got {keep}")
        self.dim = dim
        self.kv = kv
        self.keep = keep
        self.ram_bytes = int(ram_mb * 2**20)
        self.disk_bytes = int(disk_mb * 2**20)
        self.shard_bytes = max(1, min(int(shard_mb * 2**20), self.disk_bytes // 4))
        if disk_dir is not None:
            Path(disk_dir).mkdir(parents=True, exist_ok=True)
        # one private folder per session, so sessions sharing `disk_dir` never see each other's files
        self._tmp = tempfile.TemporaryDirectory(prefix="streamvid-memory-", dir=disk_dir)
        self.disk_dir = Path(self._tmp.name)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # RAM over the cap, a spill done, or closing
        self._index = faiss.IndexIDMap(faiss.IndexFlatIP(dim))  # one entry per row, under its block's id
        self.speech = SpeechIndex(dim)  # the speech blocks: searched by their words and vectors, apart
        self._rows = 1  # the most rows any block has (search asks FAISS for k x this many entries)
        self._ram: dict[int, StoredBlock] = {}  # id -> block (insertion order = time order)
        self._disk: dict[int, tuple[int, int, int]] = {}  # id -> (shard number, offset, length), time order
        self._shards: dict[int, _Shard] = {}
        self._next_shard = 0
        self._open_shard: int | None = None  # the shard the spill thread appends to
        self._meta: dict[int, tuple[float, float]] = {}  # id -> (t_start_s, t_end_s)
        self._starts: list[tuple[float, int]] = []  # sorted (t_start_s, id) for time lookups
        self._ram_used = 0
        self._disk_used = 0
        self._dropped = 0
        self._spilling = False
        self._closing = False
        self._spill_error: BaseException | None = None
        self._spiller: threading.Thread | None = None

    def add(self, block: Block) -> None:
        shape = None if block.vector is None else block.vector.shape
        if shape is None or shape[-1:] != (self.dim,) or len(shape) > 2 or 0 in shape:
            raise ValueError(f"memory expects a block vector of shape ({self.dim},) or (rows, {self.dim}), got {shape}")
        stored = StoredBlock.of(block, self.kv, self.keep)
        rows = stored.vector.reshape(-1, self.dim)
        with self._lock:
            self._raise_spill_error()
            self._insert(stored)
            if block.speech is not None:
                self.speech.add(stored.id, block.speech, rows)
            else:
                self._index.add_with_ids(rows, np.full(len(rows), stored.id, dtype=np.int64))
            if self._ram_used > self.ram_bytes:
                self._start_spiller()
                self._changed.notify_all()
                while self._ram_used > 2 * self.ram_bytes and not self._closing and self._spill_error is None:
                    self._changed.wait(1.0)  # the spill thread is a whole RAM cap behind: let it catch up

    def reindex(self, block_id: int, vectors: np.ndarray) -> None:
        """Index block `block_id` by `vectors` ((dim,) or (rows, dim)) instead of its own rows; the stored block is
        unchanged (what an external embedder, or a test that plants a match, replaces)."""
        rows = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        with self._lock:
            self._index.remove_ids(np.array([block_id], dtype=np.int64))
            self._index.add_with_ids(rows, np.full(len(rows), block_id, dtype=np.int64))
            self._rows = max(self._rows, len(rows))

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k stored video blocks whose best row best matches `vector`: [(id, score of that row)], best first.
        Exact: the k x rows best entries hold the best row of at least k blocks. (Speech blocks: `speech`.)"""
        with self._lock:
            if k <= 0 or self._index.ntotal == 0:
                return []
            scores, ids = self._index.search(vector[None].astype(np.float32), min(k * self._rows, self._index.ntotal))
        best: dict[int, float] = {}
        for i, s in zip(ids[0].tolist(), scores[0].tolist()):
            if i >= 0 and i not in best:  # entries come best first: a block's first entry is its best row
                best[i] = s
                if len(best) == k:
                    break
        return list(best.items())

    def ids_at(self, t_s: float, pad_s: float = 0.0) -> list[int]:
        """Ids of stored blocks whose time span overlaps [t_s - pad_s, t_s + pad_s], in time order."""
        with self._lock:
            hi = bisect.bisect_right(self._starts, (t_s + pad_s, float("inf")))
            return [i for _, i in self._starts[:hi] if self._meta[i][1] >= t_s - pad_s]

    def load(self, block_id: int, device: torch.device | str | Sequence[torch.device | str] = "cpu") -> Block:
        """The block, in its original dtype, on `device` (one for all layers, or one per layer)."""
        return self._stored(block_id).to_block(device)

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until the spill thread has brought RAM within its cap (and re-raise its error, if any)."""
        with self._lock:
            self._changed.wait_for(lambda: self._spill_error is not None or self._closing or
                                   (not self._spilling and self._ram_used <= self.ram_bytes), timeout_s)
            self._raise_spill_error()

    def stats(self) -> MemoryStats:
        with self._lock:
            return MemoryStats(len(self._meta), len(self._ram), len(self._disk), self._dropped,
                               self._ram_used / 2**20, self._disk_used / 2**20, int(self._index.ntotal))

    def __len__(self) -> int:
        return len(self._meta)

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._changed.notify_all()
        if self._spiller is not None:
            self._spiller.join(timeout=10.0)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # -- session snapshots (streamvid.assistant.session_store) ------------------------------------------------------
    def snapshot(self, out_dir: str | Path) -> None:
        """Write every stored block into the existing folder `out_dir` as block_<id>.safetensors (its record:
        compact tensors as stored, vector, metadata), the FAISS index as index.faiss (faiss.write_index, never
        pickle) and memory.json (dim, dropped count, block ids and times in time order).
        Holds the lock throughout, so the files are one consistent cut; fsync is the caller's."""
        out_dir = Path(out_dir)
        with self._lock:
            entries = []
            for _, block_id in self._starts:
                name = f"block_{block_id:09d}.safetensors"
                if block_id in self._ram:
                    write_block(self._ram[block_id], out_dir / name)
                else:
                    (out_dir / name).write_bytes(self._read_record(*self._disk[block_id]))
                start, end = self._meta[block_id]
                entries.append({"id": block_id, "file": name, "t_start_s": start, "t_end_s": end}
                               | ({"speech": True} if block_id in self.speech else {}))
            faiss.write_index(self._index, str(out_dir / "index.faiss"))
            meta = {"dim": self.dim, "dropped": self._dropped, "blocks": entries}
        (out_dir / "memory.json").write_text(json.dumps(meta))

    @classmethod
    def restore(cls, in_dir: str | Path, ram_mb: float = 8192.0, disk_mb: float = 65536.0,
                disk_dir: str | Path | None = None, **options) -> LongTermMemory:
        """A memory holding the blocks and the index `snapshot` wrote into `in_dir`, under this memory's caps
        (the oldest blocks spill, and beyond `disk_mb` are dropped, as if added in time order). Blocks come back
        in the form they were stored in; `options` (kv, keep) apply to blocks added later. Raises ValueError
        when the files do not agree with each other."""
        in_dir = Path(in_dir)
        meta = json.loads((in_dir / "memory.json").read_text())
        index = faiss.read_index(str(in_dir / "index.faiss"))
        ids = [e["id"] for e in meta["blocks"]]
        flat = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap) else None
        if not isinstance(flat, faiss.IndexFlatIP):
            raise ValueError(f"index.faiss holds a {type(index).__name__}, expected an IndexIDMap of an IndexFlatIP")
        row_ids = faiss.vector_to_array(index.id_map)
        speech_ids = {e["id"] for e in meta["blocks"] if e.get("speech")}
        if index.d != meta["dim"] or set(row_ids.tolist()) != set(ids) - speech_ids:
            raise ValueError(f"memory index ({index.ntotal} vectors of dim {index.d}) does not match its "
                             f"{len(ids)} blocks of dim {meta['dim']}")
        mem = cls(meta["dim"], ram_mb, disk_mb, disk_dir, **options)
        if isinstance(index, faiss.IndexIDMap2):  # written when each block had one vector: keep no reverse map
            rows = faiss.rev_swig_ptr(flat.get_xb(), flat.ntotal * flat.d).reshape(-1, flat.d).copy()
            index = faiss.IndexIDMap(faiss.IndexFlatIP(flat.d))
            index.add_with_ids(rows, row_ids)
        with mem._lock:
            mem._index = index
            mem._dropped = meta["dropped"]
            for e in meta["blocks"]:
                block = read_block(in_dir / e["file"])
                if block.id != e["id"]:
                    raise ValueError(f"{e['file']} holds block {block.id}, expected {e['id']}")
                mem._insert(block, (e["t_start_s"], e["t_end_s"]))
                if block.speech is not None:
                    mem.speech.add(block.id, block.speech, block.vector)
            if mem._ram_used > mem.ram_bytes:
                mem._start_spiller()
                mem._changed.notify_all()
        mem.flush()
        return mem

    # -- internals ----------------------------------------------------------------------------------------
    def _stored(self, block_id: int) -> StoredBlock:
        with self._lock:
            stored = self._ram.get(block_id)
            spilled = self._disk.get(block_id)
        if stored is None and spilled is None:
            raise KeyError(f"block {block_id} is not in memory (dropped or never stored)")
        if stored is None:
            try:
                stored = StoredBlock.from_record(self._read_record(*spilled))
            except FileNotFoundError:  # its shard was deleted under the disk cap since the lookup
                raise KeyError(f"block {block_id} was dropped from memory") from None
        return stored

    def _read_record(self, shard: int, offset: int, length: int) -> bytes:
        with open(self.disk_dir / f"shard_{shard:06d}.bin", "rb") as f:
            f.seek(offset)
            data = f.read(length)
        if len(data) != length:
            raise FileNotFoundError(f"shard {shard} ends before the record at {offset}")
        return data

    def _insert(self, stored: StoredBlock, span: tuple[float, float] | None = None) -> None:  # _lock held
        self._ram[stored.id] = stored
        self._meta[stored.id] = span or (stored.t_start_s, stored.t_end_s)
        bisect.insort(self._starts, (self._meta[stored.id][0], stored.id))
        self._ram_used += stored.nbytes
        self._rows = max(self._rows, len(stored.vector.reshape(-1, self.dim)))

    def _start_spiller(self) -> None:  # _lock held
        if self._spiller is None:
            self._spiller = threading.Thread(target=self._spill_loop, name="streamvid-spill", daemon=True)
            self._spiller.start()

    def _raise_spill_error(self) -> None:
        if self._spill_error is not None:
            raise RuntimeError(f"spilling memory blocks to {self.disk_dir} failed: {self._spill_error!r}") \
                from self._spill_error

    def _spill_loop(self) -> None:
        """The spill thread: the oldest RAM block -> a record appended to the open shard (outside the lock) ->
        moved from RAM to disk (under the lock); then the disk cap."""
        try:
            while True:
                with self._lock:
                    self._changed.wait_for(lambda: self._closing or (self._ram_used > self.ram_bytes and self._ram))
                    if self._closing:
                        return
                    stored = next(iter(self._ram.values()))
                    if self._open_shard is None:
                        self._open_shard = self._next_shard
                        self._next_shard += 1
                        self._shards[self._open_shard] = _Shard(self.disk_dir / f"shard_{self._open_shard:06d}.bin")
                    shard_no, shard = self._open_shard, self._shards[self._open_shard]
                    offset = shard.size
                    self._spilling = True
                # IO outside the lock; only this thread appends to a shard
                data = stored.record()
                with open(shard.path, "ab") as f:
                    f.write(data)
                with self._lock:
                    shard.size += len(data)
                    shard.live += 1
                    self._disk_used += len(data)
                    del self._ram[stored.id]
                    self._ram_used -= stored.nbytes
                    self._disk[stored.id] = (shard_no, offset, len(data))
                    if shard.size >= self.shard_bytes:
                        self._open_shard = None
                    dead = self._drop_over_cap()
                for path in dead:  # files of dropped blocks only: nothing refers to them any more
                    path.unlink(missing_ok=True)
                with self._lock:
                    self._spilling = False
                    self._changed.notify_all()
        except BaseException as e:  # noqa: BLE001 - re-raised to the caller by add / flush
            with self._lock:
                self._spill_error = e
                self._spilling = False
                self._changed.notify_all()

    def _drop_over_cap(self) -> list[Path]:  # _lock held
        """Drop the oldest spilled blocks until the shards fit `disk_bytes`; returns shard files to delete."""
        dead = []
        while self._disk_used > self.disk_bytes and self._disk:
            block_id = next(iter(self._disk))
            shard_no, _, _ = self._disk.pop(block_id)
            self._index.remove_ids(np.array([block_id], dtype=np.int64))
            self.speech.remove(block_id)
            start, _ = self._meta.pop(block_id)
            self._starts.remove((start, block_id))
            self._dropped += 1
            shard = self._shards[shard_no]
            shard.live -= 1
            if shard.live == 0:
                del self._shards[shard_no]
                self._disk_used -= shard.size
                if self._open_shard == shard_no:
                    self._open_shard = None
                dead.append(shard.path)
        return dead
