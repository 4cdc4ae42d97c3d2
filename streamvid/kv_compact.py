"""Compact KV for long-term memory: int8 quantisation of a block's K and V, and optional token pruning.

Keys are quantised per channel (one float16 scale per layer, KV head and channel, over the block's tokens: key
channels differ in magnitude by orders, tokens of one channel much less), values per token (one scale per layer,
KV head and token, over its channels), symmetric, round to nearest, in [-127, 127]. That is 1 byte per element
plus about 1% of scales, against 2 (bfloat16) or 4 (float32); `budget.stored_block_bytes` counts it. Keys are
stored after RoPE: a rotation mixes the two channels of a pair, so a pair's scales may differ; the error this
adds is what `benchmarks/compact_kv.py` measures (logits of answers on dequantised against full-precision
memory).

Pruning keeps a share of a block's tokens, the same tokens in every layer (so every layer's cache has the same
length), chosen by key norm: the tokens whose keys have the smallest L2 norm (mean over layers and heads) are
kept, since those are the ones that draw attention (a key's norm does not change under RoPE, so the choice
does not depend on where the block sits). The first and last token (the chunk's vision start / end markers)
always stay. Positions are untouched: kept keys keep their rotation, the block keeps its pos_span.

Functions only; tensors in, tensors out, on the device they come from.
"""

from __future__ import annotations

import torch

from streamvid.kv_window import Block

QMAX = 127
MIN_SCALE = 2.0**-14  # smallest normal float16: a channel of zeros quantises to zeros, not to NaN


def quantize(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., float) -> (int8 values, float16 scales reduced over `dim`, keepdim): x ≈ q * scale."""
    xf = x.float()
    scale = (xf.abs().amax(dim=dim, keepdim=True) / QMAX).clamp_min(MIN_SCALE).half()
    q = torch.round(xf / scale.float()).clamp_(-QMAX, QMAX).to(torch.int8)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (q.float() * scale.float()).to(dtype)


def quantize_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """keys (1, kv_heads, n, head_dim): per-channel scales (1, kv_heads, 1, head_dim)."""
    return quantize(keys, dim=2)


def quantize_values(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """values (1, kv_heads, n, head_dim): per-token scales (1, kv_heads, n, 1)."""
    return quantize(values, dim=3)


def keep_indices(block: Block, keep: float) -> torch.Tensor | None:
    """Token indices (sorted) that pruning to `keep` of the tokens keeps; None when every token stays."""
    n = block.n_tokens
    n_keep = max(min(n, 2), round(n * keep))
    if n_keep >= n:
        return None
    norms = torch.stack([k[0].float().norm(dim=-1).mean(0) for k in block.keys]).mean(0)  # (n,)
    norms[0] = norms[-1] = -1.0  # the chunk's start and end markers always stay
    return norms.topk(n_keep, largest=False).indices.sort().values


def prune(block: Block, keep: float) -> Block:
    """The block with only the `keep` share of its tokens (see the module docstring); same positions."""
    idx = keep_indices(block, keep)
    if idx is None:
        return block
    idx = idx.to(block.keys[0].device)
    return block.replace(keys=tuple(k.index_select(2, idx) for k in block.keys),
                         values=tuple(v.index_select(2, idx) for v in block.values))


def compact_tensors(block: Block, kind: str) -> dict[str, torch.Tensor]:
    """The block's K and V as named tensors: "float" keeps them (k0, v0, ...); "int8" gives k0 (int8), ks0
    (float16 per-channel scales), v0 (int8), vs0 (float16 per-token scales), ... per layer."""
    out: dict[str, torch.Tensor] = {}
    for i, (k, v) in enumerate(zip(block.keys, block.values)):
        if kind == "float":
            out[f"k{i}"], out[f"v{i}"] = k, v
        elif kind == "int8":
            out[f"k{i}"], out[f"ks{i}"] = quantize_keys(k)
            out[f"v{i}"], out[f"vs{i}"] = quantize_values(v)
        else:
            raise ValueError(f"kind must be 'int8' or 'float', got {kind!r}")
    return out

