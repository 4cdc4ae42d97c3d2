"""The thread that closes idle streams: `Hub.reap_idle` every `every_s` seconds until stopped.

    reaper = IdleReaper(hub.reap_idle, every_s=30.0)
    ...
    reaper.stop()

What counts as idle, and what closing does (final stats logged, the session saved first), is the hub's
(`Hub.reap_idle`); this is only its clock. A failed round is logged; the next one tries again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


def reap_period_s(timeout_s: float) -> float:
    """How often to look for streams idle for `timeout_s`: a tenth of it, between 0.05 s and 30 s."""
    return min(30.0, max(0.05, timeout_s / 10))


class IdleReaper:
    def __init__(self, reap: Callable[[], object], every_s: float):
        self._reap = reap
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="streamvid-serve-reaper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self._reap()
            except Exception as e:  # noqa: BLE001 - the server goes on; the next round tries again
                log.warning("closing idle streams failed: %s: %s", type(e).__name__, e)

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout_s)
