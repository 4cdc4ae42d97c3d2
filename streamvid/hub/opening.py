"""Threads for opening sources that may wait on the network (a URL's host lookup, connect and probe).

    opener = OpenPool(size=16)
    future = opener.submit(open_source, stream)    # Unavailable when 16 are opening already
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

from streamvid.errors import Unavailable


class OpenPool:
    """Threads ("streamvid-hub-open") for the work of opening sources that may wait on the network: a URL's host
    lookup, connect and probe. At most `size` jobs at once, each on a daemon thread of its own (none waits in a
    queue, and none holds up the process's exit); `submit` refuses one more with Unavailable. Separate from the
    threads that serve frames, status reads and deletes (asyncio's default executor), so a source that never
    answers holds up only its own stream.

    Thread contract: `submit`, `busy` and `shutdown` from any thread."""

    def __init__(self, size: int):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"max_opening_sources must be an integer >= 1, got {size!r}")
        self.size = size
        self._lock = threading.Lock()
        self._busy = 0
        self._closed = False

    def submit(self, fn: Callable, *args) -> Future:
        """`fn(*args)` on a thread of its own; its Future. Unavailable when `size` jobs are running, or after
        `shutdown`."""
        with self._lock:
            if self._closed:
                raise Unavailable("the server is shutting down")
            if self._busy >= self.size:
                raise Unavailable(f"too many sources opening: {self.size} at most at once; try again shortly")
            self._busy += 1
        future: Future = Future()
        try:
            threading.Thread(target=self._run, args=(future, fn, args), name="streamvid-hub-open",
                             daemon=True).start()
        except BaseException:
            self._release()
            raise
        return future

    def _run(self, future: Future, fn: Callable, args: tuple) -> None:
        future.set_running_or_notify_cancel()
        try:
            result = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the future
            self._release()
            future.set_exception(e)
        else:
            self._release()
            future.set_result(result)

    def _release(self) -> None:
        with self._lock:
            self._busy -= 1

    @property
    def busy(self) -> int:
        """Jobs running now."""
        with self._lock:
            return self._busy

    def shutdown(self) -> None:
        """No more jobs; running ones end by their own timeouts."""
        with self._lock:
            self._closed = True
