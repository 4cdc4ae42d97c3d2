"""Encoding chunks on a full window: ingest's window buffer (kv/window.py, the chunk written in place after the
window) against concatenating sinks + window for every chunk (positions.concat, then a copy into the forward's
cache), side by side in one run on the same model, window and frames.

    python benchmarks/ingest_copies.py [--arch 3b|7b] [--layers 2] [--frame-px 224] [--window-chunks 16]
                                       [--chunks 24] [--device cpu]

Both paths run the same stream of chunks through a window of `--window-chunks` chunks (evicting one per chunk
once full), interleaved chunk by chunk so both see the same machine load. Reported: median ms per chunk (vision
encode + prefill + context handling) after the window is full, K/V bytes copied per chunk to build the forward's
context (concatenating: the window twice; buffer: the sinks on each eviction plus its occasional rebuilds), and
whether both paths gave the same K/V. Random weights (`streamvid bench --arch`): speed does not depend on them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from streamvid.checkpoints.random_arch import random_adapter
from streamvid.kv.positions import concat
from streamvid.kv.window import Block, KVWindow
from streamvid.kv.window import WindowBuffer


def _sync(adapter) -> None:
    if adapter.device.type == "cuda":
        torch.cuda.synchronize(adapter.device)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="7b", choices=["3b", "7b"])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--frame-px", type=int, default=224)
    p.add_argument("--window-chunks", type=int, default=16)
    p.add_argument("--chunks", type=int, default=24, help="chunks measured after the window is full")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    adapter = random_adapter(args.arch, args.layers, device=args.device)
    enc = adapter.encode_text(adapter.sink_text)
    sinks = Block(-1, 0.0, 0.0, enc.keys, enc.values, 0, enc.pos_span)
    n_chunk = adapter.tokens_per_chunk(args.frame_px, args.frame_px, 2)
    budget = args.window_chunks * n_chunk
    windows = {"concatenating": KVWindow(sinks, budget_tokens=budget), "buffer": KVWindow(sinks, budget_tokens=budget)}
    buffer = WindowBuffer()
    times = {name: [] for name in windows}
    copied = {name: 0 for name in windows}
    same, rng = True, np.random.default_rng(0)
    per_token = adapter.kv_shape.bytes_per_token
    total = args.window_chunks + args.chunks
    for c in range(total):
        frames = [rng.integers(0, 256, (args.frame_px, args.frame_px, 3), dtype=np.uint8) for _ in range(2)]
        out = {}
        for name, window in windows.items():
            snap = window.snapshot()
            before = buffer.copied_tokens
            _sync(adapter)
            t0 = time.perf_counter()
            if name == "buffer":
                ctx = buffer.context(snap, room=n_chunk)
            else:
                ctx = concat([snap.sinks, *snap.blocks], snap.next_pos)
            e = adapter.encode_chunk(frames, ctx, seconds_per_chunk=1.0)
            block = Block(c, float(c), c + 1.0, e.keys, e.values, snap.next_pos, e.pos_span, e.vector)
            if name == "buffer":
                buffer.append(block)
            _sync(adapter)
            dt = time.perf_counter() - t0
            window.append(block)
            if c >= args.window_chunks:
                times[name].append(dt)
                if name == "buffer":
                    copied[name] += (buffer.copied_tokens - before) * per_token
                else:  # concat, then BufferLayer copies the context into the forward's cache
                    copied[name] += 2 * ctx.n_tokens * per_token
            out[name] = e
        same &= all(torch.allclose(x.float(), y.float(), rtol=1e-3, atol=1e-3) for x, y in
                    zip(out["buffer"].keys + out["buffer"].values,
                        out["concatenating"].keys + out["concatenating"].values))
    ms = {k: round(1000 * statistics.median(v), 1) for k, v in times.items()}
    report = {"arch": args.arch, "layers": args.layers, "device": str(adapter.device),
              "dtype": str(adapter.dtype).removeprefix("torch."), "frame_px": args.frame_px,
              "tokens_per_chunk": n_chunk, "window_tokens": args.window_chunks * n_chunk,
              "ms_per_chunk": ms, "speedup": round(ms["concatenating"] / ms["buffer"], 3),
              "mb_copied_per_chunk": {k: round(v / args.chunks / 2**20, 2) for k, v in copied.items()},
              "buffer_rebuilds": buffer.rebuilds, "same_kv": same}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
