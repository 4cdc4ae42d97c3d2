"""Decoding on a long context: the adapter's in-place cache (adapters/kv_cache.py `BufferLayer`) against transformers'
concatenating DynamicCache, side by side in one run on the same model, context and prompt.

    python benchmarks/decode_copies.py [--arch 3b|7b] [--layers 2] [--tokens 2064 8256] [--new 32] [--device cpu]

For each context length: per-token decode time (median over the steps after the first, best of `--repeats`
interleaved runs) and the greedy tokens of both paths (they must be equal). The context is random K/V of the
architecture's shape at contiguous positions: decoding cost does not depend on the values. Speed does not depend
on the weights either, so `--arch` builds the architecture with random weights (`streamvid bench --arch`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from transformers import DynamicCache

from streamvid.types import Context
from streamvid.checkpoints.random_arch import random_adapter


def _context(adapter, n: int) -> Context:
    shape = adapter.kv_shape
    g = torch.Generator().manual_seed(0)
    kv = [torch.randn((1, shape.kv_heads, n, shape.head_dim), generator=g).to(adapter.device, adapter.dtype)
          for _ in range(2 * shape.layers)]
    return Context(tuple(kv[0::2]), tuple(kv[1::2]), n)


def _reference(adapter, ctx: Context, prompt: torch.Tensor, new: int) -> tuple[list[int], list[float]]:
    """The same greedy loop on transformers' DynamicCache: every update concatenates the whole cache again."""
    cache = DynamicCache(ddp_cache_data=list(zip(ctx.keys, ctx.values)), config=adapter.model.config)
    ids, pos, out, times = prompt, ctx.next_pos, [], []
    for _ in range(new):
        t0 = time.perf_counter()
        with torch.inference_mode():
            logits = adapter.model(input_ids=ids.to(adapter.device),
                                   position_ids=adapter.positions.text_ids(pos, ids.shape[1]).to(adapter.device),
                                   cache=cache, use_cache=True, logits_to_keep=1).logits
        token = int(logits[0, -1].argmax())
        _sync(adapter)
        times.append(time.perf_counter() - t0)
        pos += ids.shape[1]
        out.append(token)
        ids = torch.tensor([[token]])
    return out, times


def _engine(adapter, ctx: Context, prompt: torch.Tensor, new: int) -> tuple[list[int], list[float]]:
    """The adapter's own loop (HFAdapter.generate_ids without stop tokens)."""
    adapter.stop_ids = set()
    out, times = [], []
    t0 = time.perf_counter()
    for token in adapter.generate_ids(ctx, adapter.tokenizer.decode(prompt[0]), new):
        _sync(adapter)
        times.append(time.perf_counter() - t0)
        out.append(token)
        t0 = time.perf_counter()
    return out, times


def _sync(adapter) -> None:
    if adapter.device.type == "cuda":
        torch.cuda.synchronize(adapter.device)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="3b", choices=["3b", "7b"])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--tokens", type=int, nargs="+", default=[2064, 8256])
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    adapter = random_adapter(args.arch, args.layers, device=args.device)
    prompt = adapter.token_ids(adapter.prompt("What happened?"))
    rows = {}
    for n in args.tokens:
        ctx = _context(adapter, n)
        best = {"concatenating": float("inf"), "in_place": float("inf")}
        tokens = {}
        for _ in range(args.repeats):  # interleaved, so both see the same machine load
            for name, fn in (("concatenating", _reference), ("in_place", _engine)):
                toks, times = fn(adapter, ctx, prompt, args.new)
                tokens[name] = toks
                best[name] = min(best[name], statistics.median(times[1:]))
        rows[str(n)] = {"ms_per_token": {k: round(1000 * v, 2) for k, v in best.items()},
                        "speedup": round(best["concatenating"] / best["in_place"], 2),
                        "same_tokens": tokens["concatenating"] == tokens["in_place"]}
    report = {"arch": args.arch, "layers": args.layers, "device": str(adapter.device),
              "dtype": str(adapter.dtype).removeprefix("torch."), "new_tokens": args.new,
              "kv_mb_per_1k_tokens": round(adapter.kv_shape.bytes_per_token * 1000 / 2**20, 2),
              "contexts": rows}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
