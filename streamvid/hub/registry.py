"""Entries by key, each held by a client, with caps and idle reaping: the hub's streams, and the web page's tabs.

    streams = Registry("stream", max_entries=16, per_client=4)
    streams.add("vs-1a2b", stream)            # Busy when 16 are held, or 4 by stream.client
    streams.get("vs-1a2b")                    # the entry, its idle clock started again (None when there is none)
    streams.take_idle(now, timeout_s=600.0)   # entries not touched for 600 s, taken out

An entry has a `client` (who holds it: "" for nobody in particular, who is never capped) and a `last_active_s`
(the registry's clock at its last use). Thread contract: every method from any thread; one lock guards the table
and is never held while an entry is closed (the caller closes what `pop`, `take_idle` and `take_all` give back).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from streamvid.errors import Busy

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str, max_entries: int | None = None, per_client: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        for name, value in (("max_entries", max_entries), ("per_client", per_client)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        self.what, self.max_entries, self.per_client, self.clock = what, max_entries, per_client, clock
        self._entries: dict[str, T] = {}
        self._lock = threading.Lock()

    def room(self, client: str = "") -> None:
        """Busy when every slot, or every one of `client`'s, is taken (a check before an entry is made)."""
        with self._lock:
            self._room(client)

    def add(self, key: str, entry: T) -> T:
        """List `entry` under `key` (its idle clock starting now); Busy when every slot, or every one of its
        client's, is taken."""
        with self._lock:
            self._room(getattr(entry, "client", ""))
            entry.last_active_s = self.clock()
            self._entries[key] = entry
        return entry

    def _room(self, client: str) -> None:
        if self.max_entries is not None and len(self._entries) >= self.max_entries:
            raise Busy(f"streamvid is serving its maximum of {self.max_entries} {self.what}s; close another or "
                       f"try again in a few minutes")
        if client and self.per_client is not None \
                and sum(getattr(e, "client", "") == client for e in self._entries.values()) >= self.per_client:
            raise Busy(f"this client already has {self.per_client} {self.what}s, the most one client may hold; "
                       f"close one first")

    def get(self, key: str, touch: bool = True) -> T | None:
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and touch:
            entry.last_active_s = self.clock()
        return entry

    def pop(self, key: str, entry: T | None = None) -> T | None:
        """Take the entry out (only if it is `entry`, when given)."""
        with self._lock:
            if entry is not None and self._entries.get(key) is not entry:
                return None
            return self._entries.pop(key, None)

    def values(self) -> list[T]:
        with self._lock:
            return list(self._entries.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def take_idle(self, now: float | None, timeout_s: float, busy: Callable[[T], bool] = lambda e: False) -> list[T]:
        """Take out the entries unused for `timeout_s` as of `now` (the registry's clock when None); an entry that
        is `busy` (a stream with a reader) counts as used now."""
        now = self.clock() if now is None else now
        with self._lock:
            for entry in self._entries.values():
                if busy(entry):
                    entry.last_active_s = now
            idle = [k for k, e in self._entries.items() if now - e.last_active_s >= timeout_s]
            return [self._entries.pop(k) for k in idle]

    def take_all(self) -> list[T]:
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
        return entries
