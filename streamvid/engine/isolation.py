"""Error isolation between the streams of one engine: a stream whose own work raises is closed with the error (its
caller gets it) and the others go on; a batched forward of several streams that raises is retried stream by
stream, so the error reaches only the stream whose work raised it.

    guard(stream, stream.take_frames)                 # the result, or None when it raised and closed the stream
    fell_back = batched(group, "encode", encode)      # encode(streams) is one forward over them
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from streamvid.engine.stream import Stream

log = logging.getLogger(__name__)


def batched(group: list[Stream], kind: str, run: Callable[[list[Stream]], None]) -> bool:
    """`run` the group's batched forward (a `kind` forward: decode, prefill, encode or probe); when it raises, each
    stream alone. True if a forward of several streams raised and was retried stream by stream."""
    try:
        run(group)
    except Exception:  # noqa: BLE001 - retried per stream below; a stream's own error closes it
        if len(group) == 1:
            fail(group[0])
            return False
        log.warning("a batched %s forward of %d streams failed (%r): retried stream by stream", kind, len(group),
                    sys.exc_info()[1])
        for s in group:
            guard(s, run, [s])
        return True
    return False


def guard(s: Stream, fn, *args):
    """`fn(*args)`, or None when it raises: then `s` is closed with the error."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - this stream's error goes to its caller; the others go on
        fail(s)
        return None


def fail(s: Stream) -> None:
    """Close `s` with the exception being handled."""
    error = sys.exc_info()[1]
    log.warning("stream %s failed: %r", s.id, error)
    s.close(error)
