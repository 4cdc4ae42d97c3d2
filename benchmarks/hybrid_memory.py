"""Memory-block bytes per stream hour of a hybrid model (Qwen3.5: K/V in its attention layers only) against a plain
model of the same width (the same Qwen3.5 config with every layer full attention), measured on make-tiny's
checkpoints by running a stream whose window holds one block (every other block goes to long-term memory), and
computed for Qwen3.5-0.8B's published config with `budget.stored_block_bytes`.

    python benchmarks/hybrid_memory.py [--chunks 20] [--layers 8]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from streamvid.adapters.base import load_adapter
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.checkpoints.hybrid import qwen3_5
from streamvid.config import EngineConfig
from streamvid.kv.budget import KVShape, stored_block_bytes
from streamvid.types import Frame

FPS, FRAMES = 2.0, 2  # one chunk per stream second
GIB = 2**30
# Qwen/Qwen3.5-0.8B config.json: 24 layers (every 4th full attention), 2 KV heads of 256, bfloat16
REAL_0_8B = {"layers": 24, "attention_layers": 6, "kv_heads": 2, "head_dim": 256}


def measure(folder: Path, chunks: int, kind: str) -> dict:
    adapter = load_adapter(str(folder), dtype="float32")
    cfg = EngineConfig.from_settings(model=str(folder), fps=FPS, frames_per_chunk=FRAMES, window_tokens=1,
                                     memory_top_k=1, memory_kv=kind)
    sa = StreamingAssistant(cfg, adapter=adapter)
    rng = np.random.default_rng(0)
    sa.feed(Frame(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), i / FPS, i) for i in range(chunks * FRAMES))
    stats, blocks = sa.memory.stats(), len(sa.memory)
    sa.stop()
    per_block = (stats.ram_mb + stats.disk_mb) * 2**20 / blocks
    per_hour = per_block * 3600 * FPS / FRAMES
    return {"attention_layers": adapter.kv_shape.layers, "blocks": blocks, "block_bytes": round(per_block),
            "bytes_per_hour": round(per_hour), "hours_per_gib": round(GIB / per_hour, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, every in (("hybrid", 4), ("plain", 1)):
            torch.manual_seed(0)
            model, processor = qwen3_5(64, args.layers, full_every=every)
            model.save_pretrained(Path(tmp) / name)
            processor.save_pretrained(Path(tmp) / name)
        for kind in ("int8", "float"):
            rows = {name: measure(Path(tmp) / name, args.chunks, kind) for name in ("hybrid", "plain")}
            for name, row in rows.items():
                print(f"tiny {name:6s} memory_kv={kind:5s} {row}")
            print(f"  plain / hybrid bytes: {rows['plain']['bytes_per_hour'] / rows['hybrid']['bytes_per_hour']:.2f}")
    tokens = (448 // 32) ** 2  # a 2-frame chunk at 448 px: one temporal patch of 14 x 14 merged tokens (the
    r = REAL_0_8B  # timestamp and wrapper tokens around it, ~8, not counted)
    for kind in ("int8", "float"):
        out = {}
        for name, layers in (("hybrid", r["attention_layers"]), ("plain", r["layers"])):
            block = stored_block_bytes(KVShape(layers, r["kv_heads"], r["head_dim"], 2), tokens, kind)
            out[name] = block * 3600 * FPS / FRAMES
        print(f"Qwen3.5-0.8B shape, 448 px, {tokens} video tokens/chunk, memory_kv={kind}: hybrid "
              f"{out['hybrid'] / 2**20:.0f} MiB/h ({GIB / out['hybrid']:.2f} h/GiB), plain twin "
              f"{out['plain'] / 2**20:.0f} MiB/h ({GIB / out['plain']:.2f} h/GiB), ratio {out['plain'] / out['hybrid']:.2f}")


if __name__ == "__main__":
    main()
