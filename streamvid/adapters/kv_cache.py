"""A transformers cache on preallocated buffers: a context is copied once and every later forward writes its new
tokens' K/V in place (`BufferLayer`), where DynamicLayer concatenates the whole cache again on every forward. Used by
the single-row forwards (hf.py) and the batched ones (batching.py)."""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, LinearAttentionCacheLayerMixin

from streamvid.kv.recurrent_state import RecurrentState
from streamvid.types import Context


def buffered_cache(config, past: Context | None, spare: int) -> DynamicCache:
    """A DynamicCache holding `past`, its full-attention layers on BufferLayer with room for `spare` more tokens:
    in the caller's buffer when `past.room` has it, else in a copy (other layer kinds, and an empty past, as
    DynamicCache makes them). A hybrid model's context holds K/V for its attention layers only (`kv_layers`, in
    order) and its linear layers' recurrent state (`past.state`), copied into the cache: a forward advances the
    copy, never the context's own."""
    cache = DynamicCache(config=config)
    if past is None:
        return cache
    kv = kv_layers(cache)
    if past.state is not None:
        install_state(cache, past.state, past.keys[0].device if past.keys else None)
    elif len(kv) < len(cache.layers) and past.n_tokens:
        raise ValueError("a context of a model with recurrent (linear-attention) layers needs their state: "
                         "Context.state is None")
    if not past.n_tokens:
        return cache
    for i, k, v in zip(kv, past.keys, past.values, strict=True):
        if type(cache.layers[i]) is DynamicLayer:
            cache.layers[i] = BufferLayer(k, v, spare, past.room)
        else:
            cache.layers[i].update(k, v)
    return cache


def kv_layers(cache: DynamicCache) -> list[int]:
    """The decoder layers whose cache holds per-token K/V (all but a hybrid model's linear-attention layers)."""
    return [i for i, layer in enumerate(cache.layers) if not isinstance(layer, LinearAttentionCacheLayerMixin)]


def kv_of(cache: DynamicCache) -> list:
    """The cache layers that hold per-token K/V, in decoder order (what a block's keys/values tuples index)."""
    return [cache.layers[i] for i in kv_layers(cache)]


def install_state(cache: DynamicCache, state: RecurrentState, device=None) -> None:
    """Copy `state` into the cache's linear-attention layers, as if the cache had run the tokens it folds in: each
    layer's first conv/recurrent update copies into buffers of its own (the state is read, never written)."""
    for i, conv, rec in zip(state.layers, state.conv, state.recurrent, strict=True):
        layer = cache.layers[i]
        if not isinstance(layer, LinearAttentionCacheLayerMixin):
            raise ValueError(f"recurrent state for decoder layer {i}, which is not a linear-attention layer")
        layer.update_conv_state(conv if device is None else conv.to(device))
        layer.update_recurrent_state(rec if device is None else rec.to(device))


def state_of(cache: DynamicCache, row: int = 0) -> RecurrentState | None:
    """Row `row`'s recurrent state in the cache after its forwards (copies), or None for a model without
    linear-attention layers."""
    linear = [i for i, layer in enumerate(cache.layers) if isinstance(layer, LinearAttentionCacheLayerMixin)]
    if not linear:
        return None
    layers = [cache.layers[i] for i in linear]
    return RecurrentState(tuple(linear), tuple(la.conv_states[0][row:row + 1].clone() for la in layers),
                          tuple(la.recurrent_states[0][row:row + 1].clone() for la in layers))


class BufferLayer(DynamicLayer):
    """A full-attention cache layer on preallocated buffers: `update` writes the new tokens' K/V after the cached
    ones, in place, and returns views of the filled part (a full buffer grows to twice its size). So a context is
    copied once, where DynamicLayer concatenates the whole cache again on every forward (every decoded token).

    The returned K/V are views of buffers this layer writes on later updates: a caller that keeps them beyond the
    next update copies them (adapters clone a new block's K/V).

    With `room` >= `spare` (Context.room: `keys` and `values` are views into a caller's buffer with that many free
    tokens after them) the layer works in that buffer and copies nothing."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, spare: int, room: int = 0):
        super().__init__()
        n = keys.shape[-2]
        # (batch, kv_heads, capacity, head_dim): the caller's buffer, or a copy of the context with room after it
        if room >= spare:
            self._k, self._v = (extended(t, n + room) for t in (keys, values))
        else:
            self._k, self._v = (grown(t, n, n + spare) for t in (keys, values))
        self._n = n  # tokens filled
        self.device = keys.device
        self.is_initialized = True
        self._expose()

    def _expose(self) -> None:
        self.keys, self.values = self._k[..., :self._n, :], self._v[..., :self._n, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self._n + key_states.shape[-2]
        if end > self._k.shape[-2]:
            self._k, self._v = (grown(b, self._n, max(end, 2 * b.shape[-2])) for b in (self._k, self._v))
        self._k[..., self._n:end, :].copy_(key_states)
        self._v[..., self._n:end, :].copy_(value_states)
        self._n = end
        self._expose()
        return self.keys, self.values

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last -`tokens_to_remove` tokens (a negative count), as DynamicLayer.crop; their room is reused."""
        super().crop(tokens_to_remove)  # checks the argument as DynamicLayer does
        self._n = self.keys.shape[-2]
        self._expose()


def extended(view: torch.Tensor, tokens: int) -> torch.Tensor:
    """The view (batch, kv_heads, n, head_dim) of a buffer, extended to `tokens` along dim 2 into the free room that
    follows it in the same buffer (same strides: each head's row of the buffer goes on there)."""
    if view.stride(-1) != 1 or view.stride(-2) != view.shape[-1]:
        raise ValueError("a context with room must be a token-range view of a (batch, kv_heads, capacity, head_dim) "
                         "buffer")
    return view.as_strided((*view.shape[:-2], tokens, view.shape[-1]), view.stride(), view.storage_offset())


def grown(buf: torch.Tensor, filled: int, capacity: int) -> torch.Tensor:
    out = buf.new_empty((*buf.shape[:-2], capacity, buf.shape[-1]))
    out[..., :filled, :].copy_(buf[..., :filled, :])
    return out
