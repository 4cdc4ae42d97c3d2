"""The adapter's batched operations across streams against one call per stream, on the bundled model:

    python benchmarks/batched_ops.py [--streams 8] [--blocks 4] [--px 112] [--repeats 5] [--threads 1]

B streams, each with its own context (sinks and a different number of blocks, at different positions). Per op, the
best of `--repeats` of one batched call against B single-row calls: `encode_chunks` / `encode_chunk`, `probe_rows` /
`probe`, the first `decode` of B decodings (each prompt prefilled: time to first token) / of each alone, and one
later decode step of the B together (the cache kept) / of each alone. Prints JSON lines.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from streamvid.adapters.base import load_adapter
from streamvid.config import BUNDLED_MODEL
from streamvid.types import ChunkJob, Context


def frames(n: int, px: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.integers(0, 256, (px, px, 3), dtype=np.uint8) for _ in range(n))


def context(a, blocks: int, offset: int, px: int, seed: int) -> Context:
    s = a.encode_text(a.sink_text, Context((), (), offset))
    ctx = Context(s.keys, s.values, offset + s.pos_span)
    for i in range(blocks):
        e = a.encode_chunk(frames(2, px, seed + i), ctx, 1.0)
        ctx = Context(tuple(torch.cat(p, 2) for p in zip(ctx.keys, e.keys)),
                      tuple(torch.cat(p, 2) for p in zip(ctx.values, e.values)), ctx.next_pos + e.pos_span)
    return ctx


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--px", type=int, default=112)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    a = load_adapter(str(BUNDLED_MODEL), dtype="float32")
    b = args.streams
    ctxs = [context(a, 1 + i % args.blocks, 100 * i, args.px, 10 * i) for i in range(b)]
    jobs = [ChunkJob(frames(2, args.px, 1000 + i), c, 1.0) for i, c in enumerate(ctxs)]
    rows = [(c, "Is there a red circle?") for c in ctxs]
    prompt = a.prompt("What do you see?")
    a.stop_ids = set()  # every decoding runs its max_new_tokens

    results = {
        "encode": (lambda: a.encode_chunks(jobs), lambda: [a.encode_chunk(list(j.frames), j.past, 1.0) for j in jobs]),
        "probe": (lambda: a.probe_rows(rows), lambda: [a.probe(c, q) for c, q in rows]),
    }
    for op, (batched, single) in results.items():
        tb, ts = best(batched, args.repeats), best(single, args.repeats)
        print(json.dumps({"op": op, "streams": b, "batched_ms": round(1e3 * tb, 2), "single_ms": round(1e3 * ts, 2),
                          "single_over_batched": round(ts / tb, 2)}))
    # the first decode step: each prompt prefilled on its context, its first token out (time to first token)
    tb = best(lambda: a.decode([a.start_decoding(c, prompt, 8) for c in ctxs]), args.repeats)
    ts = best(lambda: [a.decode([a.start_decoding(c, prompt, 8)]) for c in ctxs], args.repeats)
    print(json.dumps({"op": "decode_prefill", "streams": b, "batched_ms": round(1e3 * tb, 2),
                      "single_ms": round(1e3 * ts, 2), "single_over_batched": round(ts / tb, 2)}))
    # one decode step: B decodings advanced together (same set: the cache is kept) vs each alone
    together = [a.start_decoding(c, prompt, 10 ** 6) for c in ctxs]
    alone = [a.start_decoding(c, prompt, 10 ** 6) for c in ctxs]
    a.decode(together)
    for d in alone:
        a.decode([d])
    tb = best(lambda: a.decode(together), args.repeats)
    ts = best(lambda: [a.decode([d]) for d in alone], args.repeats)
    print(json.dumps({"op": "decode_step", "streams": b, "batched_ms": round(1e3 * tb, 2),
                      "single_ms": round(1e3 * ts, 2), "single_over_batched": round(ts / tb, 2)}))


if __name__ == "__main__":
    main()
