"""A bounded queue of one stream's outputs for one consumer: what the hub's fan-out offers every output to.

    sub = Subscriber(maxlen=1024, deltas=True, loop=asyncio.get_running_loop())
    item = await sub.get(timeout_s=15.0)     # the next output (a JSON object); None after the timeout; CLOSED at the end

A slow consumer loses its oldest items (counted in `dropped`) and never holds up the others or the engine.

Thread contract: `offer` from the fan-out thread (any thread); one consumer reads, with `get` from an asyncio task
(the loop given at construction) or `get_sync` from a thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque

CLOSED = object()  # what Subscriber.get returns once the stream is gone


class Subscriber:
    """A bounded queue of one stream's outputs (JSON objects) for one consumer; see the module docstring."""

    def __init__(self, maxlen: int, deltas: bool, loop: asyncio.AbstractEventLoop | None = None):
        self.deltas = deltas  # answer.delta items too
        self.dropped = 0
        self._items: deque = deque()
        self._maxlen = maxlen
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop = loop
        self._event = asyncio.Event() if loop is not None else None
        self.closed = False

    def offer(self, item) -> None:
        with self._lock:
            if self.closed:
                return
            if item is CLOSED:
                self.closed = True
            elif len(self._items) >= self._maxlen:
                self._items.popleft()
                self.dropped += 1
            self._items.append(item)
        self._ready.set()
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._event.set)
            except RuntimeError:  # the consumer's loop has closed: nobody is listening
                pass

    def _take(self):
        with self._lock:
            if self._items:
                return self._items.popleft()
            self._ready.clear()
            if self._event is not None:
                self._event.clear()
            return None

    async def get(self, timeout_s: float | None = None):
        """The next item; None after `timeout_s` without one; CLOSED once the stream is gone."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            item = self._take()
            if item is not None:
                return item
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            try:
                async with asyncio.timeout(left):  # (no task of its own: a cancelled consumer leaves nothing behind)
                    await self._event.wait()
            except TimeoutError:
                return None

    def get_sync(self, timeout_s: float):
        item = self._take()
        if item is None and self._ready.wait(timeout_s):
            item = self._take()
        return item
