"""Long-term memory: blocks evicted from the KV window keep their real KV tensors and one FAISS vector each.

Tensors live in host RAM up to `ram_mb`, then spill to `disk_dir` as safetensors files; beyond `disk_mb` the
oldest blocks are dropped (from storage and from the index). Search is FAISS inner product over L2-normalised
vectors (cosine). This is the only module that imports faiss.

Thread contract: the ingest thread calls `add`; the reasoning thread calls `search`, `ids_at` and `load`.
Every method takes `_lock` (a leaf lock: nothing else is acquired while holding it, FAISS writes need mutual
exclusion). Loading a spilled block reads its file outside the lock.
"""

from __future__ import annotations

import bisect
import json
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from streamvid.kv_window import Block


@dataclass(frozen=True)
class MemoryStats:
    blocks: int
    blocks_in_ram: int
    blocks_on_disk: int
    dropped: int
    ram_mb: float
    disk_mb: float


class LongTermMemory:
    def __init__(self, dim: int, ram_mb: float = 512.0, disk_mb: float = 4096.0, disk_dir: str | Path | None = None):
        self.dim = dim
        self.ram_bytes = int(ram_mb * 2**20)
        self.disk_bytes = int(disk_mb * 2**20)
        if disk_dir is not None:
            Path(disk_dir).mkdir(parents=True, exist_ok=True)
        # one private folder per session, so sessions sharing `disk_dir` never see each other's files
        self._tmp = tempfile.TemporaryDirectory(prefix="streamvid-memory-", dir=disk_dir)
        self.disk_dir = Path(self._tmp.name)
        self._lock = threading.Lock()
        self._index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self._ram: dict[int, Block] = {}  # id -> block (insertion order = time order)
        self._disk: dict[int, tuple[Path, int]] = {}  # id -> (file, bytes)
        self._meta: dict[int, tuple[float, float]] = {}  # id -> (t_start_s, t_end_s)
        self._starts: list[tuple[float, int]] = []  # sorted (t_start_s, id) for time lookups
        self._ram_used = 0
        self._disk_used = 0
        self._dropped = 0

    def add(self, block: Block) -> None:
        if block.vector is None or block.vector.shape != (self.dim,):
            got = None if block.vector is None else block.vector.shape
            raise ValueError(f"memory expects a block vector of shape ({self.dim},), got {got}")
        with self._lock:
            self._index.add_with_ids(block.vector[None].astype(np.float32), np.array([block.id], dtype=np.int64))
            self._ram[block.id] = block
            self._meta[block.id] = (block.t_start_s, block.t_end_s)
            bisect.insort(self._starts, (block.t_start_s, block.id))
            self._ram_used += block.nbytes
            while self._ram_used > self.ram_bytes and self._ram:
                self._spill(next(iter(self._ram)))
            while self._disk_used > self.disk_bytes and self._disk:
                self._drop(next(iter(self._disk)))

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k stored blocks whose vectors best match `vector`: [(id, score)], best first."""
        with self._lock:
            if k <= 0 or self._index.ntotal == 0:
                return []
            scores, ids = self._index.search(vector[None].astype(np.float32), min(k, self._index.ntotal))
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i >= 0]

    def ids_at(self, t_s: float, pad_s: float = 0.0) -> list[int]:
        """Ids of stored blocks whose time span overlaps [t_s - pad_s, t_s + pad_s], in time order."""
        with self._lock:
            hi = bisect.bisect_right(self._starts, (t_s + pad_s, float("inf")))
            return [i for _, i in self._starts[:hi] if self._meta[i][1] >= t_s - pad_s]

    def load(self, block_id: int, device: torch.device | str = "cpu") -> Block:
        with self._lock:
            block = self._ram.get(block_id)
            spilled = self._disk.get(block_id)
        if block is None and spilled is None:
            raise KeyError(f"block {block_id} is not in memory (dropped or never stored)")
        if block is None:
            try:
                block = _read_block(spilled[0])
            except FileNotFoundError:  # dropped under the disk cap since the lookup
                raise KeyError(f"block {block_id} was dropped from memory") from None
        return block.replace(keys=tuple(k.to(device) for k in block.keys),
                             values=tuple(v.to(device) for v in block.values))

    def stats(self) -> MemoryStats:
        with self._lock:
            return MemoryStats(len(self._meta), len(self._ram), len(self._disk), self._dropped,
                               self._ram_used / 2**20, self._disk_used / 2**20)

    def __len__(self) -> int:
        return len(self._meta)

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # -- session snapshots (streamvid.session_store) ------------------------------------------------------
    def snapshot(self, out_dir: str | Path) -> None:
        """Write every stored block into the existing folder `out_dir` as block_<id>.safetensors (blocks in RAM
        through the block writer, spilled blocks copied as they are), the FAISS index as index.faiss
        (faiss.write_index, never pickle) and memory.json (dim, dropped count, block ids and times in time order).
        Holds the lock throughout, so the files are one consistent cut; fsync is the caller's."""
        out_dir = Path(out_dir)
        with self._lock:
            entries = []
            for _, block_id in self._starts:
                name = f"block_{block_id:09d}.safetensors"
                if block_id in self._ram:
                    _write_block(self._ram[block_id], out_dir / name)
                else:
                    shutil.copyfile(self._disk[block_id][0], out_dir / name)
                start, end = self._meta[block_id]
                entries.append({"id": block_id, "file": name, "t_start_s": start, "t_end_s": end})
            faiss.write_index(self._index, str(out_dir / "index.faiss"))
            meta = {"dim": self.dim, "dropped": self._dropped, "blocks": entries}
        (out_dir / "memory.json").write_text(json.dumps(meta))

    @classmethod
    def restore(cls, in_dir: str | Path, ram_mb: float = 512.0, disk_mb: float = 4096.0,
                disk_dir: str | Path | None = None) -> LongTermMemory:
        """A memory holding the blocks and the index `snapshot` wrote into `in_dir`, under this memory's caps
        (the oldest blocks spill, and beyond `disk_mb` are dropped, as if added in time order). Raises
        ValueError when the files do not agree with each other."""
        in_dir = Path(in_dir)
        meta = json.loads((in_dir / "memory.json").read_text())
        index = faiss.read_index(str(in_dir / "index.faiss"))
        ids = [e["id"] for e in meta["blocks"]]
        if not isinstance(index, faiss.IndexIDMap2):
            raise ValueError(f"index.faiss holds a {type(index).__name__}, expected an IndexIDMap2")
        if index.d != meta["dim"] or sorted(faiss.vector_to_array(index.id_map).tolist()) != sorted(ids):
            raise ValueError(f"memory index ({index.ntotal} vectors of dim {index.d}) does not match its "
                             f"{len(ids)} blocks of dim {meta['dim']}")
        mem = cls(meta["dim"], ram_mb, disk_mb, disk_dir)
        with mem._lock:
            mem._index = index
            mem._dropped = meta["dropped"]
            for e in meta["blocks"]:
                block = _read_block(in_dir / e["file"])
                if block.id != e["id"]:
                    raise ValueError(f"{e['file']} holds block {block.id}, expected {e['id']}")
                mem._ram[block.id] = block
                mem._meta[block.id] = (e["t_start_s"], e["t_end_s"])
                bisect.insort(mem._starts, (e["t_start_s"], block.id))
                mem._ram_used += block.nbytes
                while mem._ram_used > mem.ram_bytes and mem._ram:
                    mem._spill(next(iter(mem._ram)))
                while mem._disk_used > mem.disk_bytes and mem._disk:
                    mem._drop(next(iter(mem._disk)))
        return mem

    # -- with _lock held ---------------------------------------------------------------------------------
    def _spill(self, block_id: int) -> None:
        block = self._ram[block_id]
        path = self.disk_dir / f"block_{block_id:09d}.safetensors"
        _write_block(block, path)  # first: if writing fails, the block stays in RAM and nothing is lost
        size = path.stat().st_size
        del self._ram[block_id]
        self._ram_used -= block.nbytes
        self._disk[block_id] = (path, size)
        self._disk_used += size

    def _drop(self, block_id: int) -> None:
        path, size = self._disk.pop(block_id)
        path.unlink(missing_ok=True)
        self._disk_used -= size
        self._index.remove_ids(np.array([block_id], dtype=np.int64))
        start, _ = self._meta.pop(block_id)
        self._starts.remove((start, block_id))
        self._dropped += 1


def _write_block(block: Block, path: Path) -> None:
    tensors = {f"k{i}": k.detach().cpu().contiguous() for i, k in enumerate(block.keys)}
    tensors |= {f"v{i}": v.detach().cpu().contiguous() for i, v in enumerate(block.values)}
    tensors["vector"] = torch.from_numpy(block.vector.copy())
    meta = {"id": block.id, "t_start_s": block.t_start_s, "t_end_s": block.t_end_s,
            "pos_start": block.pos_start, "pos_span": block.pos_span, "n_layers": len(block.keys)}
    save_file(tensors, str(path), metadata={"block": json.dumps(meta)})


def _read_block(path: Path) -> Block:
    with safe_open(str(path), framework="pt") as f:
        meta = json.loads(f.metadata()["block"])
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    n = meta["n_layers"]
    return Block(id=meta["id"], t_start_s=meta["t_start_s"], t_end_s=meta["t_end_s"],
                 keys=tuple(tensors[f"k{i}"] for i in range(n)), values=tuple(tensors[f"v{i}"] for i in range(n)),
                 pos_start=meta["pos_start"], pos_span=meta["pos_span"], vector=tensors["vector"].numpy())
