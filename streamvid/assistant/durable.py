"""Durable file writing for session snapshots: data on disk before a rename makes it visible.

    write_synced(folder / "meta.json", data)     # written, flushed and fsynced
    sync_tree(folder, files)                      # every file and folder under `folder` durable
    fsync_dir(parent)                             # a rename or a new entry in `parent` durable

`sync_tree` makes a whole tree durable with one syncfs(2) of its filesystem where the C library has it (Linux),
else with an fsync of each file and of each folder, deepest first.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path


def sync_tree(root: Path, files: list[Path]) -> None:
    """Make `files` and the folders under `root` durable: one syncfs(2) of their filesystem where the C library
    has it (Linux; thousands of block files would take one fsync each otherwise), else an fsync per file and
    folder."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _syncfs is not None and _syncfs(fd) == 0:
            return
    finally:
        os.close(fd)
    for path in files:
        with path.open("rb") as f:
            os.fsync(f.fileno())
    for folder in sorted({p.parent for p in files} | {root}, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(folder)


def _load_syncfs():
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    except OSError:
        return None


_syncfs = _load_syncfs()


def write_synced(path: Path, data: bytes) -> None:
    """Write `data` to `path` and fsync it before returning."""
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """fsync the folder `path`: its entries (a rename into it, a new file) are durable on return."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
