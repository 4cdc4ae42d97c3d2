"""A stream's state into and out of a session snapshot (the files themselves are session_store's).

    state = state_at_cut(stream, clock, memory_folder)          # what session_store.save writes, taken at one cut
    restore(stream, "sessions/lab", session_store.load(...))    # a fresh stream continues the saved one

`state_at_cut` holds the stream's ingest lock while it reads the window and writes long-term memory, so no block
moves from the window to memory in between. `restore` checks that the snapshot's KV and system prompt are this
model's, loads long-term memory, lays the saved window blocks after this model's own sinks, and sets the stream
clock and the recent dialogue; anything that does not fit raises session_store.SnapshotError with one line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from streamvid.assistant import session_store
from streamvid.engine.stream import Stream
from streamvid.kv.memory import LongTermMemory

log = logging.getLogger(__name__)


def state_at_cut(stream: Stream, clock: Callable[[], float], memory_folder: Path) -> session_store.StreamState:
    """The stream at one cut: window, clock (`clock()`, the session's stream time, read at the cut), block ids and
    dialogue, with long-term memory written into `memory_folder` (created) at the same cut. Ingest waits
    meanwhile."""
    with stream.ingest.lock:
        snap = stream.window.snapshot()
        memory = stream.memory
        if memory is not None:
            memory_folder.mkdir()
            memory.snapshot(memory_folder)
        return session_store.StreamState(
            config=stream.config, embedder=(stream.embedder.name, stream.embedder.dim), sinks=snap.sinks,
            blocks=tuple(snap.blocks), stream_t_s=clock(), next_block_id=stream.ingest.next_block_id,
            dialogue=tuple(tuple(turn) for turn in stream.reasoning.dialogue.copy()),
            memory_blocks=len(memory) if memory is not None else None, state=snap.state)


def restore(stream: Stream, directory: str | Path, snap: session_store.Snapshot) -> None:
    """Lay the snapshot `snap` (read from `directory`) into `stream`, a fresh one of the same model."""
    now = stream.window.snapshot().sinks
    kv = snap.meta["kv"]
    mine = {"dtype": str(now.keys[0].dtype).removeprefix("torch."), "layers": len(now.keys),
            "kv_heads": int(now.keys[0].shape[1]), "head_dim": int(now.keys[0].shape[3])}
    if kv != mine:
        raise session_store.SnapshotError(
            f"session {directory} holds KV as {kv}, this model runs {mine}: resume with the same --dtype "
            f"and model, or use another --session folder")
    device = now.keys[0].device
    config = stream.config.memory
    if snap.memory_dir is not None:
        if stream.memory is None:
            log.warning("session %s has %d long-term memory blocks; memory is off (memory_top_k=0), so they "
                        "are not loaded", directory, len(json.loads((snap.memory_dir / "memory.json").read_text())
                                                      ["blocks"]))
        else:
            try:
                memory = LongTermMemory.restore(snap.memory_dir, config.ram_mb, config.disk_mb, config.dir,
                                                kv=config.kv, keep=config.keep)
            except (ValueError, KeyError, OSError, RuntimeError) as e:
                raise session_store.SnapshotError(
                    f"session {directory} is damaged: its long-term memory cannot be read ({e}); remove the "
                    f"folder to start a new session, or use another --session folder") from None
            stream.replace_memory(memory)
    if (snap.sinks.n_tokens, snap.sinks.pos_span) != (now.n_tokens, now.pos_span):
        raise session_store.SnapshotError(
            f"session {directory} was saved with a {snap.sinks.n_tokens}-token system prompt, this streamvid "
            f"uses {now.n_tokens} tokens: use the streamvid that wrote it, or another --session folder")
    # the sinks are this model's own encoding of the same prompt; the saved blocks follow them as before
    for block in snap.blocks:
        alone = block.memory_kv and tuple(tuple(t.to(device) for t in pair) for pair in block.memory_kv)
        block = block.replace(keys=tuple(k.to(device) for k in block.keys),
                              values=tuple(v.to(device) for v in block.values), memory_kv=alone)
        for old in stream.window.append(block):
            if stream.memory is not None:
                stream.memory.add(old.for_memory())
    stream.ingest.resume_at(snap.meta["stream_t_s"], snap.meta["next_block_id"])  # (the stream's one clock)
    stream.reasoning.dialogue.extend((q, a) for q, a in snap.meta["dialogue"])
