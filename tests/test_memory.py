"""Long-term memory: FAISS search, spill to shard files on the spill thread, disk cap, time lookups."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from streamvid.kv.memory import LongTermMemory
from streamvid.kv.window import Block

DIM = 16


def block(i: int, vector: np.ndarray | None = None) -> Block:
    rng = np.random.default_rng(i)
    v = rng.standard_normal(DIM).astype(np.float32) if vector is None else vector
    shape = (1, 2, 8, 4)
    unit = v / np.linalg.norm(v, axis=-1, keepdims=True)  # each row
    return Block(i, float(i), float(i + 1), (torch.randn(shape), torch.randn(shape)),
                 (torch.randn(shape), torch.randn(shape)), 100 + 6 * i, 6, unit)


def test_search_finds_the_matching_block():
    mem = LongTermMemory(DIM)
    blocks = [block(i) for i in range(50)]
    for b in blocks:
        mem.add(b)
    hits = mem.search(blocks[17].vector, 3)
    assert hits[0][0] == 17 and abs(hits[0][1] - 1.0) < 1e-5 and len(hits) == 3
    assert mem.search(blocks[0].vector, 0) == []


def test_spill_to_disk_round_trips_exactly(tmp_path):
    one = block(0).nbytes
    mem = LongTermMemory(DIM, ram_mb=3.5 * one / 2**20, disk_dir=tmp_path, kv="float")
    blocks = [block(i) for i in range(10)]
    for b in blocks:
        mem.add(b)
    mem.flush()
    stats = mem.stats()
    assert stats.blocks == 10 and stats.blocks_in_ram == 3 and stats.blocks_on_disk == 7
    assert len(list(tmp_path.rglob("shard_*.bin"))) == 1, "spilled blocks share one shard file"
    for b in (blocks[0], blocks[9]):  # one spilled, one in RAM
        got = mem.load(b.id)
        assert (got.t_start_s, got.pos_start, got.pos_span) == (b.t_start_s, b.pos_start, b.pos_span)
        assert all(torch.equal(x, y) for x, y in zip(got.keys + got.values, b.keys + b.values))
    assert mem.search(blocks[2].vector, 1)[0][0] == 2
    mem.close()
    assert not any(t.name == "streamvid-spill" for t in threading.enumerate()), "close() ends the spill thread"


def test_disk_cap_drops_oldest_from_storage_and_index(tmp_path):
    one = block(0).nbytes
    mem = LongTermMemory(DIM, ram_mb=1.5 * one / 2**20, disk_mb=3.5 * one / 2**20, disk_dir=tmp_path, kv="float")
    blocks = [block(i) for i in range(10)]
    for b in blocks:
        mem.add(b)
    mem.flush()
    stats = mem.stats()
    assert stats.dropped > 0 and stats.disk_mb * 2**20 <= 3.5 * one + 4096 * stats.blocks_on_disk
    on_disk = sum(p.stat().st_size for p in tmp_path.rglob("shard_*.bin"))
    assert on_disk == stats.disk_mb * 2**20, "dropped shards are deleted; the count is the files' size"
    with pytest.raises(KeyError, match="block 0"):
        mem.load(0)
    assert all(i != 0 for i, _ in mem.search(blocks[0].vector, 10))
    assert mem.ids_at(0.5) == []
    mem.close()


def test_ids_at_time():
    mem = LongTermMemory(DIM)
    for i in range(20):
        mem.add(block(i))
    assert mem.ids_at(5.5) == [5]
    assert mem.ids_at(5.5, pad_s=1.0) == [4, 5, 6]
    assert mem.ids_at(100.0) == []


def test_wrong_vector_shape_is_refused():
    mem = LongTermMemory(DIM)
    with pytest.raises(ValueError, match=r"shape \(16,\)"):
        mem.add(block(0, np.ones(8, np.float32)))
    assert len(mem) == 0


def test_a_block_with_several_rows_scores_by_its_best_row(tmp_path):
    """Blocks of 1 to 5 rows: search gives the k blocks a brute-force max over each block's rows ranks first
    (with their best rows' scores), also after a snapshot is restored and once a block is dropped."""
    rng = np.random.default_rng(3)
    rows = {i: rng.standard_normal((1 + i % 5, DIM)).astype(np.float32) for i in range(40)}
    rows = {i: r / np.linalg.norm(r, axis=1, keepdims=True) for i, r in rows.items()}
    mem = LongTermMemory(DIM)
    for i, r in rows.items():
        mem.add(block(i, r[0] if len(r) == 1 else r))  # a single row may come as (dim,)
    query = rng.standard_normal(DIM).astype(np.float32)

    def reference(ids, k):
        best = {i: float((rows[i] @ query).max()) for i in ids}
        return sorted(best, key=best.get, reverse=True)[:k], best

    assert mem.stats().index_rows == sum(len(r) for r in rows.values()) == 120
    want, best = reference(rows, 6)
    got = mem.search(query, 6)
    assert [i for i, _ in got] == want
    assert all(abs(s - best[i]) < 1e-4 for i, s in got)
    with pytest.raises(ValueError, match=r"\(rows, 16\)"):
        mem.add(block(99, np.ones((2, DIM + 1), np.float32)))
    snap = tmp_path / "snap"
    snap.mkdir()
    mem.snapshot(snap)
    again = LongTermMemory.restore(snap)
    assert again.search(query, 6) == got
    assert again.search(query, 40) == mem.search(query, 40) and len(again.search(query, 40)) == 40
    mem.close()
    again.close()


def test_restores_an_index_of_one_vector_per_block(tmp_path):
    """A snapshot whose index.faiss is an IndexIDMap2 (one vector per block) comes back searchable, and takes
    blocks of several rows afterwards."""
    import faiss

    mem = LongTermMemory(DIM)
    blocks = [block(i) for i in range(8)]
    for b in blocks:
        mem.add(b)
    snap = tmp_path / "snap"
    snap.mkdir()
    mem.snapshot(snap)
    old = faiss.IndexIDMap2(faiss.IndexFlatIP(DIM))
    old.add_with_ids(np.stack([b.vector for b in blocks]), np.arange(8, dtype=np.int64))
    faiss.write_index(old, str(snap / "index.faiss"))
    again = LongTermMemory.restore(snap)
    assert [i for i, _ in again.search(blocks[5].vector, 3)] == [i for i, _ in mem.search(blocks[5].vector, 3)]
    again.add(block(8, np.stack([-blocks[5].vector, blocks[5].vector])))
    assert {i for i, _ in again.search(blocks[5].vector, 2)} == {5, 8}
    mem.close()
    again.close()
