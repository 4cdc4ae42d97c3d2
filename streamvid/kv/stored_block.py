"""A block as long-term memory keeps it (`StoredBlock`): its compact tensors (compact.py) and vector packed into one
host buffer in safetensors layout, its record (a .safetensors file: memory's shard records, snapshot block files),
and back to a `Block` on the devices asked for.

    stored = StoredBlock.of(block, "int8")        # compact on the block's device, one copy to the host
    data = stored.record()                        # bytes of a .safetensors file
    again = StoredBlock.from_record(data).to_block("cuda:0")
    write_block(block, path, "int4"); read_block(path)
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from streamvid.kv.compact import compact_tensors, prune, restore
from streamvid.kv.window import Block

_ST_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int8: "I8",
              torch.uint8: "U8", torch.float64: "F64"}
_TORCH_DTYPES = {v: k for k, v in _ST_DTYPES.items()}


@dataclass(frozen=True, eq=False)
class StoredBlock:
    """A block as memory keeps it: its compact tensors (compact.compact_tensors) and vector packed into one
    byte buffer in safetensors layout (one host allocation per block, one host-to-device copy per load; the
    buffer after `header` is a valid .safetensors file's data), and what places it in time."""

    id: int
    t_start_s: float
    t_end_s: float
    pos_start: int
    pos_span: int
    vector: np.ndarray  # (dim,) or (rows, dim) float32
    kind: str  # "int8", "int4" or "float" (compact.KINDS)
    dtype: str  # the dtype the block's K and V had (and get back): "float32", "bfloat16", ...
    n_layers: int
    buf: torch.Tensor = field(repr=False)  # (bytes,) uint8 on the host, pinned when it came from CUDA
    layout: dict = field(repr=False)  # name -> (safetensors dtype, shape, [start, end)) within buf
    speech: str | None = None  # a speech block's words (window.Block.speech)

    @property
    def nbytes(self) -> int:
        """Bytes of its K/V tensors and scales (budget.stored_block_bytes; the vector is not counted)."""
        return sum(end - start for name, (_, _, (start, end)) in self.layout.items() if name != "vector")

    @property
    def n_tokens(self) -> int:
        return int(self.layout["v0"][1][2])

    @property
    def tensors(self) -> dict[str, torch.Tensor]:
        """The compact tensors (views into the host buffer)."""
        return _views(self.buf, self.layout)

    @classmethod
    def of(cls, block: Block, kind: str = "int8", keep: float = 1.0) -> StoredBlock:
        """Compact `block` on its own device, pack it, copy it to the host once (pinned, from CUDA)."""
        dtype = str(block.keys[0].dtype).removeprefix("torch.")
        tensors = compact_tensors(prune(block, keep) if keep < 1 else block, kind)
        device = block.keys[0].device
        vector = np.asarray(block.vector, np.float32)
        tensors = {"vector": torch.from_numpy(vector.copy()).to(device), **tensors}
        # widest elements first: every tensor starts at a multiple of its element size
        order = sorted(tensors, key=lambda n: -tensors[n].element_size())
        layout, parts, offset = {}, [], 0
        for name in order:
            t = tensors[name].detach().contiguous()
            raw = t.view(-1).view(torch.uint8)
            layout[name] = (_ST_DTYPES[t.dtype], tuple(t.shape), (offset, offset + raw.numel()))
            parts.append(raw)
            offset += raw.numel()
        packed = torch.cat(parts)
        if device.type == "cuda":
            buf = torch.empty(packed.shape, dtype=torch.uint8, pin_memory=True).copy_(packed, non_blocking=True)
            torch.cuda.current_stream(device).synchronize()
        else:
            buf = packed
        return cls(block.id, block.t_start_s, block.t_end_s, block.pos_start, block.pos_span, vector, kind, dtype,
                   len(block.keys), buf, layout, block.speech)

    def to_block(self, device: torch.device | str | Sequence[torch.device | str] = "cpu") -> Block:
        """The block in its original dtype; `device` one for all layers, or one per layer (a device_map)."""
        devices = [device] * self.n_layers if isinstance(device, (str, torch.device)) else list(device)
        dtype = getattr(torch, self.dtype)
        on = {}  # device -> the buffer's tensors there (one copy of the whole buffer per device)
        keys, values = [], []
        for i, dev in enumerate(devices):
            dev = torch.device(dev)
            if dev not in on:
                on[dev] = _views(self.buf.to(dev, non_blocking=self.buf.is_pinned()), self.layout)
            k, v = restore(on[dev], i, self.kind, dtype)
            keys.append(k)
            values.append(v)
        return Block(self.id, self.t_start_s, self.t_end_s, tuple(keys), tuple(values), self.pos_start,
                     self.pos_span, self.vector, speech=self.speech)

    def record(self) -> bytes:
        """The block as a .safetensors file: header (tensors, and metadata under "block"), then the buffer."""
        meta = {"id": self.id, "t_start_s": self.t_start_s, "t_end_s": self.t_end_s, "pos_start": self.pos_start,
                "pos_span": self.pos_span, "n_layers": self.n_layers, "kind": self.kind, "dtype": self.dtype}
        if self.speech is not None:
            meta["speech"] = self.speech
        header = {name: {"dtype": d, "shape": list(shape), "data_offsets": list(span)}
                  for name, (d, shape, span) in self.layout.items()}
        header["__metadata__"] = {"block": json.dumps(meta)}
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
        return struct.pack("<Q", len(text)) + text + self.buf.cpu().numpy().tobytes()

    @classmethod
    def from_record(cls, data: bytes) -> StoredBlock:
        """A record written by `record` (or any safetensors file of a block: k0, v0, ..., vector, metadata)."""
        (header_len,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + header_len])
        meta = json.loads(header.pop("__metadata__")["block"])
        layout = {name: (h["dtype"], tuple(h["shape"]), tuple(h["data_offsets"])) for name, h in header.items()}
        buf = torch.frombuffer(bytearray(data[8 + header_len:]), dtype=torch.uint8)
        vector = _views(buf, {"vector": layout["vector"]})["vector"].numpy().copy()
        kind = meta.get("kind", "float")  # records without a kind hold the block as it was
        dtype = meta.get("dtype") or str(_TORCH_DTYPES[layout["k0"][0]]).removeprefix("torch.")
        return cls(meta["id"], meta["t_start_s"], meta["t_end_s"], meta["pos_start"], meta["pos_span"], vector,
                   kind, dtype, meta["n_layers"], buf, layout, meta.get("speech"))


def _views(buf: torch.Tensor, layout: dict) -> dict[str, torch.Tensor]:
    out = {}
    for name, (d, shape, (start, end)) in layout.items():
        out[name] = buf[start:end].view(_TORCH_DTYPES[d]).view(shape)
    return out


def write_block(block: Block | StoredBlock, path: Path, kind: str = "float") -> None:
    """One block as a .safetensors file (a Block is stored as `kind`; a StoredBlock as it is)."""
    stored = block if isinstance(block, StoredBlock) else StoredBlock.of(block, kind)
    Path(path).write_bytes(stored.record())


def read_block(path: Path) -> StoredBlock:
    """A block file written by `write_block` (or a record copied out of a shard); `.to_block()` expands it."""
    return StoredBlock.from_record(Path(path).read_bytes())
