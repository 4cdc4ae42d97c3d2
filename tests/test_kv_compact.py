"""Compact long-term KV: int8 K (per channel) and V (per token) round-trip within half a quantisation step,
memory gives back blocks in their dtype and device, pruning keeps the same tokens in every layer, and the
bundled model answers its memory questions the same from int8 memory as from full-precision memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from streamvid.config import BUNDLED_MODEL, EngineConfig
from streamvid.kv_compact import keep_indices, prune, quantize_keys, quantize_values
from streamvid.kv_window import Block
from streamvid.memory import LongTermMemory, StoredBlock, _read_block, _write_block

DEMO = BUNDLED_MODEL.parent.parent / "demo_videos" / "shapes_7"


def kv_block(i: int = 0, n: int = 40, dtype=torch.float32, layers: int = 3) -> Block:
    g = torch.Generator().manual_seed(i)
    # channels of very different magnitude, as real keys have
    keys = tuple(torch.randn(1, 2, n, 16, generator=g) * torch.logspace(-2, 1, 16) for _ in range(layers))
    values = tuple(torch.randn(1, 2, n, 16, generator=g) for _ in range(layers))
    v = np.random.default_rng(i).standard_normal(8).astype(np.float32)
    return Block(i, float(i), i + 1.0, tuple(k.to(dtype) for k in keys), tuple(x.to(dtype) for x in values),
                 10 * i, n, v / np.linalg.norm(v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_round_trip_within_half_a_step(dtype):
    b = kv_block(dtype=dtype)
    for x, quant in ((b.keys[0], quantize_keys), (b.values[0], quantize_values)):
        q, scale = quant(x)
        assert q.dtype == torch.int8 and scale.dtype == torch.float16
        back = q.float() * scale.float()
        step = scale.float().expand_as(back)
        # rounding to the nearest step, plus float16 rounding of the scale at the clamped ends
        assert ((back - x.float()).abs() <= 0.5 * step + 2**-10 * x.float().abs() + 1e-7).all()
    k_scale = quantize_keys(b.keys[0])[1]
    assert k_scale.shape == (1, 2, 1, 16), "one scale per head and channel"
    assert quantize_values(b.values[0])[1].shape == (1, 2, 40, 1), "one scale per head and token"


@pytest.mark.parametrize("kind", ["int8", "float"])
def test_memory_gives_blocks_back_in_their_dtype_from_ram_and_disk(tmp_path, kind):
    blocks = [kv_block(i, dtype=torch.bfloat16) for i in range(6)]
    one = StoredBlock.of(blocks[0], kind).nbytes
    mem = LongTermMemory(8, ram_mb=2.5 * one / 2**20, disk_dir=tmp_path, kv=kind)
    for b in blocks:
        mem.add(b)
    mem.flush()
    assert mem.stats().blocks_on_disk == 4 and mem.stats().ram_mb * 2**20 == 2 * one
    for b in (blocks[0], blocks[5]):  # from a shard, from RAM
        got = mem.load(b.id)
        assert got.keys[0].dtype == torch.bfloat16 and (got.pos_start, got.pos_span) == (b.pos_start, b.pos_span)
        for x, y in zip(got.keys + got.values, b.keys + b.values):
            if kind == "float":
                assert torch.equal(x, y)
            else:
                assert (x.float() - y.float()).abs().max() <= 0.02 * y.float().abs().max()
    mem.close()


def test_block_file_round_trip_and_per_layer_devices(tmp_path):
    b = kv_block(3)
    stored = StoredBlock.of(b, "int8")
    _write_block(stored, tmp_path / "b.safetensors")
    again = _read_block(tmp_path / "b.safetensors")
    from safetensors.torch import load_file  # the record is a valid safetensors file

    loaded = load_file(tmp_path / "b.safetensors")
    assert set(loaded) == set(stored.tensors) | {"vector"}
    assert all(torch.equal(loaded[n], t) for n, t in stored.tensors.items())
    assert again.id == 3 and again.kind == "int8" and again.nbytes == stored.nbytes
    x, y = again.to_block(["cpu", "cpu", "cpu"]), stored.to_block("cpu")
    assert all(torch.equal(p, q) for p, q in zip(x.keys + x.values, y.keys + y.values))
    assert np.array_equal(x.vector, b.vector)


def test_pruning_keeps_the_same_low_norm_tokens_in_every_layer():
    b = kv_block(n=20)
    idx = keep_indices(b, 0.5)
    assert len(idx) == 10 and idx[0] == 0 and idx[-1] == 19, "start and end markers stay"
    norms = torch.stack([k[0].norm(dim=-1).mean(0) for k in b.keys]).mean(0)
    inner = [int(i) for i in idx[1:-1]]
    dropped = [i for i in range(1, 19) if i not in inner]
    assert max(norms[inner]) <= min(norms[dropped]), "the smallest key norms are kept"
    p = prune(b, 0.5)
    assert all(k.shape[2] == 10 for k in p.keys + p.values) and p.pos_span == b.pos_span
    assert torch.equal(p.keys[1], b.keys[1][:, :, idx])
    assert keep_indices(b, 1.0) is None


def memory_questions(task_prefix: str = "backward"):
    from streamvid.eval.score import load_episodes

    episode = load_episodes(DEMO / "episodes.jsonl")[0]
    qs = [(e["t"], e["text"]) for e in episode["events"]
          if e["kind"] == "user_query" and e.get("task", "").startswith(task_prefix)]
    return episode["video"]["path"], qs


@pytest.fixture(scope="module")
def bundled():
    from streamvid.adapters.base import load_adapter

    return load_adapter(str(BUNDLED_MODEL))


def test_bundled_model_answers_memory_questions_the_same_from_int8_memory(bundled):
    """All 18 memory questions of demo clip shapes_7 (backward colour / shape / at-time): the same retrieved blocks
    and the same answer text with int8 long-term KV as with full-precision long-term KV."""
    from streamvid.assistant import StreamingAssistant
    from streamvid.sources import FileSource

    video, qs = memory_questions()
    assert len(qs) == 18
    runs = {}
    for kind in ("float", "int8"):
        cfg = EngineConfig(max_new_tokens=12, memory_kv=kind)
        with StreamingAssistant(cfg, adapter=bundled) as sa:
            answers = sa.run_simulated(FileSource(video, fps=cfg.fps), qs)
            assert sa.memory.stats().blocks > 50
        runs[kind] = [(a.data["retrieved_blocks"], a.text) for a in answers if a.kind == "answer"]
    assert len(runs["int8"]) == 18 and any(r for r, _ in runs["int8"]), "memory questions retrieve blocks"
    assert runs["int8"] == runs["float"]
