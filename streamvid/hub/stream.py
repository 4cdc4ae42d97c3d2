"""One stream of the hub: its assistant, its source, its subscribers and push clock, and where it stands.

    s.state()     # "opening", "live", "ended", "failed" or "closed"
    s.info()      # {"id", "object": "stream", "source", "created", "fps", "state"} (+ session_dir, resumed)
    s.tap.last    # the last frame its assistant read (a page's preview)
    s.check_running()                    # StreamFailed / NotFound once its work failed or it was deleted
    s.guarded(lambda: s.sa.ask(text))    # a call on its assistant, the refusals as the hub's errors

Thread contract: the hub's threads and its callers read and write the fields below `lock` under `lock`; `error`,
`last_active_s` and `tap.last` are single assignments read from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from streamvid.errors import HubError, NotFound, Refused, StreamFailed
from streamvid.hub.session_folders import StreamSession
from streamvid.hub.shown import redact
from streamvid.types import Frame


class FrameTap:
    """A FrameSource that forwards another and keeps the last frame read (`last`: a page's preview).

    Thread contract: `read` from the stream's reader thread only; `last` from any thread; everything else as the
    wrapped source allows (a camera's `on_status`, `outages` and `lost_s`, and `on_full_frame`, through which a
    source hands alert media its frames at their own size, pass through)."""

    def __init__(self, inner):
        self.inner = inner
        self.live = inner.live
        self.last: Frame | None = None

    def read(self, timeout_s: float = 1.0) -> Frame | None:
        frame = self.inner.read(timeout_s)
        if frame is not None:
            self.last = frame
        return frame

    @property
    def dropped(self) -> int:
        return self.inner.dropped

    def __getattr__(self, name: str):
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value) -> None:
        if name in ("on_status", "on_full_frame"):  # the source calls them: set on the source itself
            setattr(self.inner, name, value)
        else:
            super().__setattr__(name, value)

    def close(self) -> None:
        self.inner.close()


@dataclass
class HubStream:
    id: str
    sa: object  # its StreamingAssistant
    kind: str  # the policy's Target.kind
    source: str  # how it is shown (redacted)
    fps: float
    created: int
    client: str = ""  # who opened it (the per-client cap counts these)
    push: object | None = None  # the PushSource of a push stream
    tap: FrameTap | None = None  # its source, as its assistant reads it
    listener: Callable[[dict], None] | None = None  # called with every output, on the fan-out thread
    links: Callable[[str, dict], dict] | None = None  # the transport's URLs for an alert or answer (alert_access.py)
    error: str | None = None
    session: StreamSession | None = None  # its session folder
    last_active_s: float = 0.0  # hub clock of the last request about it
    open_deadline: float | None = None  # time.monotonic() by which its source must have opened
    thread: threading.Thread | None = None
    done: threading.Event = field(default_factory=threading.Event)
    opened: threading.Event = field(default_factory=threading.Event)  # the open ended (either way), or it closed
    lock: threading.Lock = field(default_factory=threading.Lock)
    # guarded by lock
    subscribers: set = field(default_factory=set)
    last_t_s: float | None = None  # stream time of the last pushed frame
    last_push_s: float | None = None  # monotonic time of that push
    opening: bool = False  # its source is still opening (on the hub's open pool)
    started: bool = True  # its assistant reads its source (False until a URL source has opened)
    ended_sent: bool = False

    def state(self) -> str:
        """Its state: "opening", "live", "ended" (a clip or URL that ended), "failed" (see `error`) or "closed"."""
        if self.opening:
            return "opening"
        if self.error is not None:
            return "failed"
        if self.done.is_set():
            return "closed"
        return "ended" if self.sa.ended else "live"

    def check_running(self) -> None:
        """StreamFailed once its work failed, NotFound once it was deleted."""
        if self.error is not None:
            raise StreamFailed(f"stream {self.id} stopped with an error: {self.error}; close it and open another")
        if self.done.is_set():
            raise NotFound(f"stream {self.id} was deleted")

    def guarded(self, fn: Callable):
        """fn() on its assistant, the refusals as the hub's errors: the one place a worker's failure (RuntimeError)
        becomes StreamFailed."""
        try:
            return fn()
        except HubError:  # the family's own (the engine's Busy ones among them) as they are
            raise
        except ValueError as e:
            raise Refused(str(e)) from None
        except RuntimeError as e:
            raise StreamFailed(f"stream {self.id} stopped with an error: {redact(str(e))}") from None

    def watched(self) -> bool:
        """Whether anyone reads its outputs now (a subscriber, or a listener): it counts as in use."""
        with self.lock:
            return bool(self.subscribers) or self.listener is not None

    def info(self) -> dict:
        info = {"id": self.id, "object": "stream", "source": self.source, "created": self.created, "fps": self.fps,
                "state": self.state()}
        if self.session is not None:
            info.update(session_dir=str(self.session.folder), resumed=self.session.resume)
        return info
