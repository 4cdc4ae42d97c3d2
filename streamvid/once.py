"""Loaded once per process, even when many threads ask at once.

    @once(maxsize=4)
    def recognizer(spec: str, device: str): ...     # the first caller loads; callers racing it wait for that load

`functools.lru_cache` alone lets callers that arrive while the first one is still loading each load a copy of their
own (eight streams hearing their first sound at the same moment loaded eight speech recognisers, a gigabyte, each
served by a queue of its own). Here the calls with the same arguments take turns at a lock of their own, so every
caller gets the one loaded object, and a slow load of one thing never holds up the callers of another.
`cache_clear()` forgets what was loaded, as lru_cache's does.
"""

from __future__ import annotations

import functools
import threading


def once(maxsize: int = 1):
    def wrap(fn):
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        guard = threading.Lock()
        locks: dict = {}  # one lock per argument tuple: a slow load of one never holds up another's

        @functools.wraps(fn)
        def call(*args, **kwargs):
            key = (args, tuple(sorted(kwargs.items())))
            with guard:
                lock = locks.setdefault(key, threading.Lock())
            with lock:
                return cached(*args, **kwargs)

        call.cache_clear = cached.cache_clear
        call.cache_info = cached.cache_info
        return call

    return wrap
