"""Loaded once per process, even when many threads ask at once.

    @once(maxsize=4)
    def recognizer(spec: str, device: str): ...     # the first caller loads; callers racing it wait for that load

`functools.lru_cache` alone lets callers that arrive while the first one is still loading each load a copy of their
own (eight streams hearing their first sound at the same moment loaded eight speech recognisers, a gigabyte, each
served by a queue of its own). Here the calls of one function take turns at a lock, so every caller gets the one
loaded object. `cache_clear()` forgets what was loaded, as lru_cache's does.
"""

from __future__ import annotations

import functools
import threading


def once(maxsize: int = 1):
    def wrap(fn):
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        lock = threading.RLock()

        @functools.wraps(fn)
        def call(*args, **kwargs):
            with lock:
                return cached(*args, **kwargs)

        call.cache_clear = cached.cache_clear
        call.cache_info = cached.cache_info
        return call

    return wrap
