"""Compact KV for long-term memory: int8 or int4 quantisation of a block's K and V, and optional token pruning.

int8 (the default): keys are quantised per channel (one float16 scale per layer, KV head and channel, over the
block's tokens: key channels differ in magnitude by orders, tokens of one channel much less), values per token (one
scale per layer, KV head and token, over its channels), symmetric, round to nearest, in [-127, 127]. That is 1 byte
per element plus about 1% of scales, against 2 (bfloat16) or 4 (float32); `budget.stored_block_bytes` counts it.
Keys are stored after RoPE: a rotation mixes the two channels of a pair, so a pair's scales may differ; the error
this adds is what `benchmarks/compact_kv.py` measures (logits of answers on dequantised against full-precision
memory).

int4 halves that again, with the same split finer grained, asymmetric (a float16 scale and minimum per group,
values in [0, 15]): keys per channel over groups of `INT4_GROUP` tokens, values per token over groups of
`INT4_GROUP` channels; two values share a byte (channel 2j in the low nibble, 2j + 1 in the high one), so a packed
tensor is (1, kv_heads, n, head_dim / 2). With head_dim 128 that is half a byte per element plus 12.5% of it in
scales and minima (0.5625 bytes per element), against 1.02 for int8.

Pruning keeps a share of a block's tokens, the same tokens in every layer (so every layer's cache has the same
length), chosen by key norm: the tokens whose keys have the smallest L2 norm (mean over layers and heads) are
kept, since those are the ones that draw attention (a key's norm does not change under RoPE, so the choice
does not depend on where the block sits). The first and last token (the chunk's vision start / end markers)
always stay. Positions are untouched: kept keys keep their rotation, the block keeps its pos_span.

Functions only; tensors in, tensors out, on the device they come from.
"""

from __future__ import annotations

import torch

from streamvid.kv.budget import INT4_GROUP, MEMORY_KINDS as KINDS
from streamvid.kv.window import Block

QMAX = 127
Q4MAX = 15
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


def quantize4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (..., m) -> (uint8 codes in [0, 15], float16 scales (..., g), float16 minima (..., g)) over groups of
    min(INT4_GROUP, m) along the last dim (the last group padded with its last element): x ≈ q * scale + minimum."""
    *lead, m = x.shape
    size = min(INT4_GROUP, m)
    groups = -(-m // size)
    xf = x.float()
    if groups * size > m:
        xf = torch.cat([xf, xf[..., -1:].expand(*lead, groups * size - m)], dim=-1)
    xg = xf.reshape(*lead, groups, size)
    low = xg.amin(-1, keepdim=True).half()
    scale = ((xg.amax(-1, keepdim=True) - low.float()) / Q4MAX).clamp_min(MIN_SCALE).half()
    q = torch.round((xg - low.float()) / scale.float()).clamp_(0, Q4MAX).to(torch.uint8)
    return q.reshape(*lead, groups * size)[..., :m], scale.squeeze(-1), low.squeeze(-1)


def dequantize4(q: torch.Tensor, scale: torch.Tensor, low: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Inverse of `quantize4` (q (..., m) codes, unpacked)."""
    m = q.shape[-1]
    size = min(INT4_GROUP, m)
    s = scale.float().repeat_interleave(size, dim=-1)[..., :m]
    z = low.float().repeat_interleave(size, dim=-1)[..., :m]
    return (q.float() * s + z).to(dtype)


def pack4(q: torch.Tensor) -> torch.Tensor:
    """(..., 2m) codes in [0, 15] -> (..., m) bytes: element 2j in the low nibble, 2j + 1 in the high one."""
    return q[..., 0::2] | (q[..., 1::2] << 4)


def unpack4(packed: torch.Tensor) -> torch.Tensor:
    return torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2)


def quantize_keys4(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """keys (1, kv_heads, n, head_dim) -> packed (1, kv_heads, n, head_dim / 2), per-channel scales and minima
    over token groups (1, kv_heads, head_dim, ceil(n / INT4_GROUP))."""
    q, scale, low = quantize4(keys.transpose(2, 3))
    return pack4(q.transpose(2, 3)), scale, low


def dequantize_keys4(packed: torch.Tensor, scale: torch.Tensor, low: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return dequantize4(unpack4(packed).transpose(2, 3), scale, low, dtype).transpose(2, 3).contiguous()


def quantize_values4(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """values (1, kv_heads, n, head_dim) -> packed (1, kv_heads, n, head_dim / 2), per-token scales and minima
    over channel groups (1, kv_heads, n, ceil(head_dim / INT4_GROUP))."""
    q, scale, low = quantize4(values)
    return pack4(q), scale, low


def dequantize_values4(packed: torch.Tensor, scale: torch.Tensor, low: torch.Tensor,
                       dtype: torch.dtype) -> torch.Tensor:
    return dequantize4(unpack4(packed), scale, low, dtype)


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
    (float16 per-channel scales), v0 (int8), vs0 (float16 per-token scales), ... per layer; "int4" gives k0 and v0
    packed (uint8, two codes a byte) with their scales ks0, vs0 and minima kz0, vz0."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    out: dict[str, torch.Tensor] = {}
    for i, (k, v) in enumerate(zip(block.keys, block.values)):
        if kind == "float":
            out[f"k{i}"], out[f"v{i}"] = k, v
        elif kind == "int8":
            out[f"k{i}"], out[f"ks{i}"] = quantize_keys(k)
            out[f"v{i}"], out[f"vs{i}"] = quantize_values(v)
        else:
            out[f"k{i}"], out[f"ks{i}"], out[f"kz{i}"] = quantize_keys4(k)
            out[f"v{i}"], out[f"vs{i}"], out[f"vz{i}"] = quantize_values4(v)
    return out


def restore(tensors: dict[str, torch.Tensor], layer: int, kind: str,
            dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer `layer`'s K and V in `dtype` from the named tensors `compact_tensors` made."""
    t, i = tensors, layer
    if kind == "int8":
        return dequantize(t[f"k{i}"], t[f"ks{i}"], dtype), dequantize(t[f"v{i}"], t[f"vs{i}"], dtype)
    if kind == "int4":
        return (dequantize_keys4(t[f"k{i}"], t[f"ks{i}"], t[f"kz{i}"], dtype),
                dequantize_values4(t[f"v{i}"], t[f"vs{i}"], t[f"vz{i}"], dtype))
    return t[f"k{i}"].to(dtype), t[f"v{i}"].to(dtype)

