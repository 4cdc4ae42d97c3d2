"""A snapshot's window file (window.safetensors): the sink tokens and the window's blocks, exact.

    write_window(sinks, blocks, folder / "window.safetensors", state)   # state: a hybrid model's, or None
    blocks = read_window(folder / "window.safetensors")                 # [sinks, *window blocks], on the CPU

Block j's tensors are `b{j}.k{i}` and `b{j}.v{i}` (its K/V per layer), `b{j}.vector` (its retrieval vector) and
`b{j}.mk{i}` / `b{j}.mv{i}` (the K/V memory will store, when they differ); a hybrid model's recurrent state after
the newest block is stored under `state.` (RecurrentState.tensors). The file's metadata "blocks" is a JSON list of
each block's id, times, positions, layer count and speech.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from streamvid.kv.recurrent_state import RecurrentState
from streamvid.kv.window import Block


def write_window(sinks: Block, blocks: tuple[Block, ...], path: Path, state: RecurrentState | None = None) -> None:
    """The sinks and window blocks; a hybrid model's recurrent state after the newest (RecurrentState.tensors)."""
    tensors, entries = ({} if state is None else state.tensors()), []
    for j, b in enumerate((sinks, *blocks)):
        for i, (k, v) in enumerate(zip(b.keys, b.values, strict=True)):
            tensors[f"b{j}.k{i}"] = k.detach().cpu().contiguous()
            tensors[f"b{j}.v{i}"] = v.detach().cpu().contiguous()
        if b.vector is not None:
            tensors[f"b{j}.vector"] = torch.from_numpy(b.vector.copy())
        for i, (k, v) in enumerate(zip(*(b.memory_kv or ((), ())), strict=True)):  # what memory will store
            tensors[f"b{j}.mk{i}"] = k.detach().cpu().contiguous()
            tensors[f"b{j}.mv{i}"] = v.detach().cpu().contiguous()
        entries.append({"id": b.id, "t_start_s": b.t_start_s, "t_end_s": b.t_end_s, "pos_start": b.pos_start,
                        "pos_span": b.pos_span, "layers": len(b.keys)} | ({"speech": b.speech} if b.speech else {}))
    save_file(tensors, str(path), metadata={"blocks": json.dumps(entries)})


def read_window(path: Path) -> list[Block]:
    """The sinks and the window's blocks as written by `write_window`, the newest carrying the saved recurrent
    state. Raises what safetensors raises for a file it cannot read (SafetensorError, OSError), KeyError for a
    missing tensor or metadata and ValueError for metadata that is not JSON."""
    with safe_open(str(path), framework="pt") as f:
        entries = json.loads(f.metadata()["blocks"])
        names = set(f.keys())
        blocks = []
        for j, e in enumerate(entries):
            n = e["layers"]
            keys = tuple(f.get_tensor(f"b{j}.k{i}") for i in range(n))
            values = tuple(f.get_tensor(f"b{j}.v{i}") for i in range(n))
            vector = f.get_tensor(f"b{j}.vector").numpy() if f"b{j}.vector" in names else None
            alone = None
            if f"b{j}.mk0" in names:
                alone = (tuple(f.get_tensor(f"b{j}.mk{i}") for i in range(n)),
                         tuple(f.get_tensor(f"b{j}.mv{i}") for i in range(n)))
            blocks.append(Block(id=e["id"], t_start_s=e["t_start_s"], t_end_s=e["t_end_s"], keys=keys,
                                values=values, pos_start=e["pos_start"], pos_span=e["pos_span"], vector=vector,
                                memory_kv=alone, speech=e.get("speech")))
        # the newest block carries a saved recurrent state (Block.state: the window takes it over on append)
        blocks[-1] = blocks[-1].replace(state=RecurrentState.of_tensors({n: f.get_tensor(n) for n in names
                                                                         if n.startswith("state.")}))
    return blocks
