"""The web server's upload folders: what a session brought is removed when it is done with it, and the folders
stay under a quota.

    uploads = UploadFolders([gradio_upload_folder], quota_mb=2048)
    uploads.discard(path)          # a pushed frame once read, an uploaded video once its stream stopped
    uploads.trim(in_use={path})    # oldest files first until the folders fit the quota; never a file in use

Only files inside the folders are ever removed (a path elsewhere is left alone). Thread contract: any thread; a
lock serialises trims.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

log = logging.getLogger(__name__)


class UploadFolders:
    def __init__(self, roots, quota_mb: float = 2048.0):
        if not quota_mb > 0:
            raise ValueError(f"the upload quota must be positive, got {quota_mb} MB")
        self.roots = tuple(Path(r).resolve() for r in roots)
        self.quota_bytes = int(quota_mb * 2**20)
        self._lock = threading.Lock()

    def owns(self, path: str | Path) -> Path | None:
        """The resolved path when it lies inside one of the folders, else None."""
        try:
            p = Path(path).resolve()
        except (OSError, ValueError):
            return None
        return p if any(p != r and p.is_relative_to(r) for r in self.roots) else None

    def discard(self, path: str | Path | None) -> bool:
        """Remove an uploaded file (and the folder the server made for it, once empty); True if it was removed."""
        p = self.owns(path) if path else None
        if p is None:
            return False
        try:
            p.unlink()
        except OSError:
            return False
        if p.parent not in self.roots:
            try:
                p.parent.rmdir()
            except OSError:
                pass  # not empty: another upload lives there
        return True

    def files(self) -> list[tuple[float, int, Path]]:
        """(modified time, size, path) of every file in the folders."""
        out = []
        for root in self.roots:
            for p in root.rglob("*") if root.is_dir() else ():
                try:
                    st = p.stat()
                except OSError:
                    continue
                if p.is_file():
                    out.append((st.st_mtime, st.st_size, p))
        return out

    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self.files())

    def trim(self, in_use=()) -> list[Path]:
        """Remove the oldest files not in `in_use` until the folders hold at most the quota; what was removed."""
        keep = {Path(p).resolve() for p in in_use}
        with self._lock:
            files = sorted(self.files())
            total = sum(size for _, size, _ in files)
            removed = []
            for _, size, p in files:
                if total <= self.quota_bytes:
                    break
                if p in keep:
                    continue
                if self.discard(p):
                    total -= size
                    removed.append(p)
        if removed:
            log.info("upload folders over their %.0f MB quota: removed %d old files", self.quota_bytes / 2**20,
                     len(removed))
        return removed
