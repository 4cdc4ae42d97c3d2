"""A call repeated on a clock: `fn()` every `every_s` seconds on one daemon thread until `stop()`.

    saver = Periodic(lambda: sa.save(folder), 60.0, name="streamvid-autosave", what="autosave")
    ...
    saver.stop()          # saver.runs: calls that returned; saver.error: the last call that raised

A call that raises is logged (with `what`) and kept in `error`; the next period calls again. Used for session
autosaves (session_lock.Autosaver), the hub's idle-stream closing (streamvid.hub) and the web app's session
reaper (app/manager.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    def __init__(self, fn: Callable[[], object], every_s: float, name: str, what: str):
        if not every_s > 0:
            raise ValueError(f"{what}: period must be > 0 seconds, got {every_s}")
        self.fn, self.every_s, self.what = fn, every_s, what
        self.runs = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.fn()
                self.runs += 1
            except Exception as e:  # noqa: BLE001 - kept in .error; a later period tries again
                log.warning("%s failed: %s: %s", self.what, type(e).__name__, e)
                self.error = e

    def stop(self, timeout_s: float = 60.0) -> None:
        """No call after this returns (unless one is running on the calling thread itself)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout_s)
