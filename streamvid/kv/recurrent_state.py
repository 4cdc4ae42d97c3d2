"""The recurrent state of a hybrid model's linear-attention layers (Qwen3.5's Gated DeltaNet): per such layer, the
short convolution's history (the last `kernel` inputs of its q/k/v projection) and the delta rule's state matrix.

A hybrid model keeps per-token K/V only in its full-attention layers (those are what blocks, the window and long-term
memory hold); each of its linear layers folds every token it has seen into this fixed-size state instead. A stream's
state after its newest block is the stream up to now: it advances chunk by chunk as the chunks are encoded, and an
answer or a trigger probe runs on a copy (the adapter copies it into the forward's cache), never on the stream's own.
A state is never modified in place once made, so the window, its snapshots and a session snapshot can share it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, eq=False)
class RecurrentState:
    """`conv[i]` (1, conv_dim, kernel) and `recurrent[i]` (1, v_heads, k_dim, v_dim) of the i-th linear-attention
    layer, in decoder order (`layers[i]` its index in the decoder)."""

    layers: tuple[int, ...]
    conv: tuple[torch.Tensor, ...]
    recurrent: tuple[torch.Tensor, ...]

    def __post_init__(self):
        if not len(self.layers) == len(self.conv) == len(self.recurrent):
            raise ValueError(f"a recurrent state needs one conv and one recurrent tensor per layer: {len(self.layers)} "
                             f"layers, {len(self.conv)} conv, {len(self.recurrent)} recurrent")

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.conv, *self.recurrent))

    def to(self, device: torch.device | str) -> RecurrentState:
        """A copy on `device` (a copy even where it is there already)."""
        return RecurrentState(self.layers, tuple(t.to(device, copy=True) for t in self.conv),
                              tuple(t.to(device, copy=True) for t in self.recurrent))

    @staticmethod
    def stack(states: list[RecurrentState]) -> RecurrentState:
        """The states of several rows as one batch (dim 0, in order); all of the same layers."""
        if any(s is None or s.layers != states[0].layers for s in states):
            raise ValueError("rows of a batch need recurrent states of the same layers")
        return RecurrentState(states[0].layers, tuple(torch.cat(ts) for ts in zip(*[s.conv for s in states])),
                              tuple(torch.cat(ts) for ts in zip(*[s.recurrent for s in states])))

    def tensors(self) -> dict[str, torch.Tensor]:
        """Named tensors for a safetensors file (`of_tensors` reads them back)."""
        out = {}
        for layer, conv, rec in zip(self.layers, self.conv, self.recurrent, strict=True):
            out[f"state.conv{layer}"] = conv.detach().contiguous().cpu()
            out[f"state.rec{layer}"] = rec.detach().contiguous().cpu()
        return out

    @staticmethod
    def of_tensors(tensors: dict[str, torch.Tensor]) -> RecurrentState | None:
        """The state `tensors()` wrote, from a dict that may hold other tensors too; None when it holds none."""
        layers = sorted(int(name.removeprefix("state.conv")) for name in tensors if name.startswith("state.conv"))
        if not layers:
            return None
        return RecurrentState(tuple(layers), tuple(tensors[f"state.conv{i}"] for i in layers),
                              tuple(tensors[f"state.rec{i}"] for i in layers))


def check_state_header(tensors: dict[str, tuple[str, list[int]]], name: str, error: type = ValueError) -> None:
    """A saved state's tensors in a safetensors header ({tensor: (dtype, shape)}): each linear layer's conv
    (1, channels, kernel) with its recurrent (1, heads, k_dim, v_dim), floating point; `error` (one line)
    otherwise."""
    conv = {n.removeprefix("state.conv") for n in tensors if n.startswith("state.conv")}
    rec = {n.removeprefix("state.rec") for n in tensors if n.startswith("state.rec")}
    if conv != rec or not all(i.isdigit() for i in conv):
        raise error(f"{name} holds an incomplete recurrent state (conv layers {sorted(conv)}, recurrent layers "
                         f"{sorted(rec)})")
    for i in conv:
        for key, dims in ((f"state.conv{i}", 3), (f"state.rec{i}", 4)):
            dtype, shape = tensors[key]
            if dtype not in ("F32", "F16", "BF16") or len(shape) != dims or shape[0] != 1:
                raise error(f"{name} tensor {key} is {dtype} {list(shape)}, not a floating-point (1, ...) "
                                 f"tensor of {dims} dimensions")
