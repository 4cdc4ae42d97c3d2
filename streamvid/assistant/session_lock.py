"""A session directory held by one process at a time, and the thread that saves it periodically.

    lock = SessionLock("sessions/lab")          # session_store.SnapshotError while another process holds it
    saver = Autosaver(lambda: sa.save("sessions/lab"), every_s=60.0)    # saving from now on
    ...
    saver.stop(); lock.release()                # saver.saves: saves that returned; saver.error: the last failure

`SessionLock` is an flock on DIR/.lock, released by the kernel when the process dies. `Autosaver` is one daemon
thread ("streamvid-autosave") that calls its save function every `every_s` seconds until `stop`.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from streamvid.assistant.session_store import SnapshotError
from streamvid.periodic import Periodic


class SessionLock:
    """An exclusive lock on a session directory for as long as one process uses it (flock on DIR/.lock; the
    kernel releases it when the process dies, so a killed run never leaves it stuck)."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise SnapshotError(f"session {self.directory} is in use by another streamvid process: wait for it to "
                                f"end or use another --session folder") from None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Autosaver(Periodic):
    """Calls `save()` every `every_s` seconds on a daemon thread "streamvid-autosave" until `stop()`. A failed
    save is logged and kept in `error` (the previous snapshot stays); the next period tries again."""

    def __init__(self, save_fn: Callable[[], dict], every_s: float):
        super().__init__(save_fn, every_s, name="streamvid-autosave", what="autosave")

    @property
    def saves(self) -> int:
        return self.runs
