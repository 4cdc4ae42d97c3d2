"""Session snapshots on disk: what a StreamingAssistant has seen survives a restart.

    sa.save("sessions/lab")          # StreamingAssistant.save: session_store.save(sa.stream_state, "sessions/lab")
    sa = StreamingAssistant.resume("sessions/lab")             # same model, same stream clock, same memories

A session directory holds one complete snapshot at a time:

    DIR/session.json           pointer: format, format_version, the current snapshot folder, sha256 of its meta
    DIR/snap-000042/meta.json  format version, model identity, embedder (name, dim), config, stream clock,
                               dialogue, window block list, size and sha256 of every other file in the folder
    DIR/snap-000042/window.safetensors   the sink tokens and the window's blocks, exact KV + retrieval vectors
    DIR/snap-000042/memory/    long-term memory (LongTermMemory.snapshot): one safetensors file per block,
                               index.faiss (faiss.write_index) and memory.json
    DIR/.lock                  held (flock) by the process using the session (session_lock.SessionLock)

Saving is atomic: a new snapshot is written into a temporary folder, every file and folder is made durable (one
syncfs of the filesystem on Linux, else fsync of each: durable.py), the folder is renamed to its final name, and
only then the pointer is replaced (temp file, fsync, rename, fsync of DIR). The window file's layout is
snapshot_window.py's.
A crash at any point leaves the pointer on the previous complete snapshot; folders it does not name are removed
by the next save. Nothing is pickled: tensors are safetensors, the index is FAISS's own format, the rest JSON.

Loading checks the pointer, the format version, the whole snapshot (snapshot_schema: every field, file name and
header; every file's size and sha256), the model identity (model_type, sha256 of config.json, and a fingerprint
of the weight files: name, size, first and last MiB) and the embedder of the retrieval vectors (check_embedder),
so a snapshot of another model or embedder, another format version, a damaged file or an edited meta.json is
refused with one line that says what to do, before any tensor is used.

Thread contract: `save` may run on any thread while the engine runs: the engine takes the stream's
state at one cut (`StreamingAssistant.stream_state`: no block moves from the window to memory while the window
is read and memory written); the assistant serialises saves. `session_lock.Autosaver` is one daemon thread
("streamvid-autosave") that saves every `every_s` seconds until `stop`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from safetensors import SafetensorError

from streamvid.assistant import snapshot_schema
from streamvid.assistant.durable import fsync_dir, sync_tree, write_synced
from streamvid.assistant.snapshot_schema import MEMORY, META, WINDOW, SchemaError, file_sha256
from streamvid.assistant.snapshot_window import read_window, write_window
from streamvid.config import EngineConfig
from streamvid.kv.recurrent_state import RecurrentState
from streamvid.kv.window import Block

log = logging.getLogger(__name__)

FORMAT = "streamvid-session"
FORMAT_VERSION = 1
POINTER = "session.json"
_FINGERPRINT_BYTES = 2**20  # of each weight file: the first and the last MiB


class SnapshotError(ValueError):
    """A session directory that cannot be resumed; the message says why and what to do."""


def model_identity(model: str) -> dict:
    """What makes two checkpoints the same model for a snapshot: model_type, sha256 of config.json and, for a
    local directory, a fingerprint of its weight files (name, size, first and last MiB of each)."""
    from streamvid.adapters.base import read_config

    config = read_config(model)
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    weights = None
    folder = Path(model)
    if folder.is_dir():
        h = hashlib.sha256()
        for path in sorted([*folder.glob("*.safetensors"), *folder.glob("*.bin")]):
            size = path.stat().st_size
            h.update(f"{path.name}:{size}:".encode())
            with path.open("rb") as f:
                h.update(f.read(_FINGERPRINT_BYTES))
                f.seek(max(size - _FINGERPRINT_BYTES, 0))
                h.update(f.read(_FINGERPRINT_BYTES))
        weights = h.hexdigest()
    return {"model": model, "model_type": config.get("model_type"), "config_sha256": digest,
            "weights_fingerprint": weights}


def has_session(directory: str | Path) -> bool:
    return (Path(directory) / POINTER).is_file()


# ---- saving ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StreamState:
    """What a snapshot keeps of one stream, taken by the engine at one cut (StreamingAssistant.stream_state),
    with its long-term memory already written into the folder the save gave it."""

    config: EngineConfig
    embedder: tuple[str, int]  # name and dimension of every stored retrieval vector
    sinks: Block
    blocks: tuple[Block, ...]  # the window's, oldest first
    stream_t_s: float
    next_block_id: int
    dialogue: tuple[tuple[str, str], ...]
    memory_blocks: int | None  # None: long-term memory is off (nothing was written)
    state: RecurrentState | None = None  # a hybrid model's recurrent state after the window's newest block


def save(state_at: Callable[[Path], StreamState], directory: str | Path) -> dict:
    """Write a new snapshot into `directory` (created if missing) and make it the current one: `state_at(folder)`
    is the stream's state, its long-term memory written into `folder`. Returns {"path", "bytes",
    "blocks_in_window", "blocks_in_memory", "stream_t_s", "seconds"}."""
    t0 = time.perf_counter()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    current = _read_pointer(directory, missing_ok=True)
    _remove_others(directory, current["snapshot"] if current else None)  # left by a save that never finished
    seq = int(current["snapshot"].removeprefix("snap-")) + 1 if current else 0
    tmp = directory / f".tmp-snap-{seq:06d}-{os.getpid()}"
    tmp.mkdir()
    state = state_at(tmp / MEMORY)
    write_window(state.sinks, state.blocks, tmp / WINDOW, state.state)
    files = {}
    paths = sorted(p for p in tmp.rglob("*") if p.is_file())
    for path in paths:
        files[str(path.relative_to(tmp))] = {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
    meta = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "model": model_identity(state.config.model),
        "embedder": {"name": state.embedder[0], "dim": state.embedder[1]},  # the space of every stored vector
        "kv": {"dtype": str(state.sinks.keys[0].dtype).removeprefix("torch."), "layers": len(state.sinks.keys),
               "kv_heads": int(state.sinks.keys[0].shape[1]), "head_dim": int(state.sinks.keys[0].shape[3])},
        "config": state.config.settings(),
        "stream_t_s": state.stream_t_s,
        "next_block_id": state.next_block_id,
        "dialogue": [list(turn) for turn in state.dialogue],
        "window_blocks": [b.id for b in state.blocks],
        "memory": state.memory_blocks is not None,
        "saved_unix_s": time.time(),
        "files": files,
    }
    write_synced(tmp / META, json.dumps(meta, indent=1, allow_nan=False).encode())  # NaN is not JSON
    sync_tree(tmp, paths)  # every file and folder durable before the folder gets its final name
    name = f"snap-{seq:06d}"
    os.rename(tmp, directory / name)
    fsync_dir(directory)
    pointer = {"format": FORMAT, "format_version": FORMAT_VERSION, "snapshot": name,
               "meta_sha256": file_sha256(directory / name / META)}
    write_synced(directory / (POINTER + ".tmp"), json.dumps(pointer, indent=1).encode())
    os.replace(directory / (POINTER + ".tmp"), directory / POINTER)
    fsync_dir(directory)
    _remove_others(directory, name)
    return {"path": str(directory), "bytes": sum(f["bytes"] for f in files.values()),
            "blocks_in_window": len(state.blocks), "blocks_in_memory": state.memory_blocks or 0,
            "stream_t_s": round(state.stream_t_s, 3), "seconds": round(time.perf_counter() - t0, 3)}


def _remove_others(directory: Path, keep: str | None) -> None:
    """Remove snapshot folders other than `keep`: earlier snapshots and folders of saves that never finished."""
    for old in directory.iterdir():
        if old.is_dir() and old.name != keep and (old.name.startswith("snap-") or old.name.startswith(".tmp-snap-")):
            shutil.rmtree(old)


# ---- loading ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    """A checked snapshot: its folder, meta.json, and the exact sink and window blocks (on the CPU)."""

    path: Path
    meta: dict
    sinks: Block
    blocks: tuple[Block, ...]

    @property
    def memory_dir(self) -> Path | None:
        return self.path / MEMORY if self.meta["memory"] else None


def read_meta(directory: str | Path) -> dict:
    """meta.json of the current snapshot, after checking its format version and the snapshot (snapshot_schema).
    A reader beside a live writer (an autosaving run) may see the snapshot it was pointed at removed under it by the
    next save: when the pointer has moved meanwhile, the new snapshot is read instead."""
    directory = Path(directory)
    for _ in range(_READ_TRIES - 1):
        pointer = _read_pointer(directory)
        try:
            return _read_meta_of(directory, pointer)
        except SnapshotError:
            if _read_pointer(directory, missing_ok=True) == pointer:
                raise
    return _read_meta_of(directory, _read_pointer(directory))


_READ_TRIES = 4


def _read_meta_of(directory: Path, pointer: dict) -> dict:
    folder = directory / pointer["snapshot"]
    meta_path = folder / META
    intact = not folder.is_symlink() and not meta_path.is_symlink() and meta_path.is_file()
    if not intact or file_sha256(meta_path) != pointer["meta_sha256"]:
        raise _damaged(directory, f"{pointer['snapshot']}/{META} is missing or does not match session.json")
    return _read_json(directory, meta_path, lambda meta: snapshot_schema.check_snapshot(folder, meta))


_IDENTITY = (("model type", "model_type", ""), ("config", "config_sha256", "config.json sha256 "),
             ("weights", "weights_fingerprint", "fingerprint "))


def check_model(directory: str | Path, meta: dict, model: str) -> None:
    """Refuse a snapshot taken with another model (by identity, not by path), saying what differs."""
    saved, now = meta["model"], model_identity(model)
    differs = [(what, f"{label}{_short(saved[k])} saved, {_short(now[k])} now") for what, k, label in _IDENTITY
               if saved[k] != now[k]]
    if not differs:
        return
    whose = " and ".join(w for w, _ in differs) + (" differs (" if len(differs) == 1 else " differ (") + \
        "; ".join(d for _, d in differs) + ")"
    if saved["model"] == model:  # the checkpoint at that path changed since the save
        raise SnapshotError(f"session {directory} was saved with model {model} whose {whose}: use the checkpoint "
                            f"it was saved with, or another --session folder")
    raise SnapshotError(f"session {directory} was saved with model {saved['model']}, not {model}, whose {whose}: "
                        f"pass --model {saved['model']} or use another --session folder")


def _short(value) -> str:
    return "none" if value is None else value if len(value) <= 12 else value[:12] + "..."


def check_embedder(directory: str | Path, meta: dict, name: str) -> None:
    """Refuse a snapshot whose retrieval vectors came from another embedder (embedders.embedder_name): its memory
    index would be searched with vectors of another space. Snapshots from before embedders were named used the
    model's own vectors."""
    saved = meta.get("embedder", {"name": "model"})["name"]
    if saved != name:
        raise SnapshotError(f"session {directory} was saved with retrieval vectors from embedder {saved}, not "
                            f"{name}: pass --embedder {saved} or use another --session folder")


def load(directory: str | Path, model: str | None = None, meta: dict | None = None) -> Snapshot:
    """The current snapshot of `directory`, checked (format, checksums, and the model when given). `meta`: what
    `read_meta` returned just before (its checks are not repeated)."""
    directory = Path(directory)
    meta = meta or read_meta(directory)
    if model is not None:
        check_model(directory, meta, model)
    folder = directory / _read_pointer(directory)["snapshot"]
    try:
        blocks = read_window(folder / WINDOW)
    except (SafetensorError, KeyError, ValueError, OSError) as e:
        raise _damaged(directory, f"{WINDOW} cannot be read ({e})") from None
    return Snapshot(folder, meta, blocks[0], tuple(blocks[1:]))


def config_from(meta: dict, **changes) -> EngineConfig:
    """The EngineConfig a snapshot was saved with (fields this version does not know are ignored)."""
    return snapshot_schema.engine_config(meta["config"], **changes)


def _check_version(directory: Path, doc: dict) -> None:
    if doc.get("format") != FORMAT:
        raise _damaged(directory, f"not a {FORMAT} file")
    if type(doc.get("format_version")) is not int:
        raise _damaged(directory, f"format_version is not an integer ({_short(repr(doc.get('format_version')))})")
    if doc["format_version"] != FORMAT_VERSION:
        raise SnapshotError(f"session {directory} has format version {doc['format_version']}; this streamvid "
                            f"reads version {FORMAT_VERSION}: use the streamvid that wrote it, or another "
                            f"--session folder")


def _read_pointer(directory: Path, missing_ok: bool = False) -> dict | None:
    path = directory / POINTER
    if not path.is_file():
        if missing_ok:
            return None
        raise SnapshotError(f"no session in {directory} ({POINTER} not found)")
    return _read_json(directory, path, lambda doc: snapshot_schema.check(doc, snapshot_schema.POINTER_JSON, POINTER))


def _read_json(directory: Path, path: Path, check: Callable[[dict], None]) -> dict:
    """session.json or meta.json: a JSON object of this format and version, then `check`ed (snapshot_schema)."""
    try:
        doc = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise _damaged(directory, f"{path.name} is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise _damaged(directory, f"{path.name} is not a JSON object")
    _check_version(directory, doc)
    try:
        check(doc)
    except SchemaError as e:
        raise _damaged(directory, str(e)) from None
    return doc


def _damaged(directory: Path, why: str) -> SnapshotError:
    return SnapshotError(f"session {directory} is damaged: {why}; remove the folder to start a new session, or "
                         f"use another --session folder")
