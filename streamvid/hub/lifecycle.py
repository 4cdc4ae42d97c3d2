"""A hub stream's life, from `Hub.open` to its close: the source policy's checks, the session folder claimed, the
assistant made or taken, the stream listed with its fan-out thread, a URL source opened off the caller's path (or
failed, with a one-line reason, when it does not open in time), and the stop that saves, joins and tells every
reader "closed".

    info = open_stream(hub, "push", fps=2.0)   # what Hub.open returns
    final = stop_stream(hub, s)               # what Hub.close returns

Thread contract: as Hub's (hub.py): every function from any thread; a stream's `lock` guards its opening state and
is never held while a source connects.
"""

from __future__ import annotations

import functools
import logging
import secrets
import threading
import time
from collections.abc import Callable

import streamvid.hub.alert_access as alert_access
import streamvid.hub.fanout as fanout
import streamvid.hub.validation as validation
from streamvid.assistant import session_store
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.errors import HubError, Refused, Timeout
from streamvid.hub.policy import Target
from streamvid.hub.session_folders import SESSION_MARK
from streamvid.hub.shown import finite, redact
from streamvid.hub.stream import FrameTap, HubStream
from streamvid.hub.subscriber import CLOSED

log = logging.getLogger(__name__)


def open_stream(hub, source: object, fps: float | None = None, session_dir: object = None, resume: bool = False,
                listed: Callable[[dict], None] | None = None, client: str = "",
                assistant: StreamingAssistant | None = None, listener: Callable[[dict], None] | None = None) -> dict:
    """`Hub.open` (see there): a new stream on `hub`; its info."""
    called_s = time.monotonic()
    fps = validation.fps(hub.config.fps if fps is None else fps, hub.options.max_fps)
    validation.path_text(source, "source")
    validation.path_text(session_dir, "session_dir")
    if not isinstance(resume, bool) or (resume and session_dir is None):
        raise Refused('"resume": true needs the "session_dir" the stream was saved in')
    try:
        target = source if isinstance(source, Target) else hub.policy.resolve(source)
        target.policy.check(target)  # a private or unresolvable host is refused before a slot is taken
    except HubError as e:
        raise type(e)(redact(e.message)) from None
    timeout = hub.options.source_open_timeout_s
    if target.kind == "url" and time.monotonic() - called_s >= timeout:
        raise Timeout(f"the source did not open within {timeout:g} s (--source-open-timeout-s): its host name "
                      f"did not resolve in time")
    hub.streams.room(client)
    folder = hub.folders.resolve(session_dir) if session_dir is not None else None
    session = hub.folders.claim(folder, resume) if folder is not None else None
    config = hub.config if fps == hub.config.fps else hub.config.replace(fps=fps)
    sa, src = assistant, None
    try:
        try:
            if sa is None:
                sa = session.assistant(config, hub.engine) if session else StreamingAssistant(config, engine=hub.engine)
        except session_store.SnapshotError as e:
            raise Refused(f"cannot resume: {e}") from None
        alert_access.keep(sa, session, hub.options.alert_media)
        s = _new(hub, sa, target, fps, session, client, listener)
        if target.kind == "url":
            s.opening, s.started, s.open_deadline = True, False, called_s + timeout
            if listed is None:
                info = _add(hub, s)
                try:
                    hub.opener.submit(open_source, hub, s, target)  # Unavailable: too many opening
                except BaseException:
                    hub.streams.pop(s.id, s)
                    s.done.set()
                    raise
                return info
        else:
            src = s.tap = FrameTap(target.open(fps))
            s.push = src.inner if target.kind == "push" else None
            sa.start(src)
            info = _add(hub, s)
    except BaseException:
        if sa is not None:
            sa.stop()
        if src is not None:
            src.close()
        if session is not None:
            session.release()
        raise
    if target.kind != "url":
        if session is not None:
            session.start_autosave(sa)
        return info
    try:  # opened on this thread once the caller has the listed stream's info
        listed(_add(hub, s))
    finally:
        open_source(hub, s, target)
    return s.info()


def _new(hub, sa, target: Target, fps: float, session, client: str, listener) -> HubStream:
    sid = f"{hub.prefix}{SESSION_MARK if session else ''}{secrets.token_hex(6)}"
    if hub.tag is not None:
        sid += hub.tag(sid)
    return HubStream(sid, sa, target.kind, redact(target.label), fps, int(time.time()), client=client,
                     session=session, listener=listener, links=hub.links)


def _add(hub, s: HubStream) -> dict:
    """List the stream (Busy past the caps) and start its fan-out thread; its info."""
    hub.streams.add(s.id, s)
    s.thread = threading.Thread(target=fanout.run, args=(s, hub.webhooks, functools.partial(fail_open_late, hub)),
                                name="streamvid-hub-fanout", daemon=True)
    s.thread.start()
    return s.info()


def open_source(hub, s: HubStream, target: Target) -> None:
    """On an `opener` thread: open the stream's URL source (connect, probe) and start the stream on it, unless
    the stream failed (its deadline) or closed meanwhile: then the source is closed unused."""
    try:
        src = FrameTap(target.open(s.fps))
    except Exception as e:  # noqa: BLE001 - a refused or unreachable source (or anything else) fails the stream
        late = time.monotonic() >= s.open_deadline  # (ffmpeg's own timeout, at about the same time)
        fail_open(hub, s, too_late(hub) if late else _message(e))
        return
    reason = "the stream closed while its source opened"
    with s.lock:  # (not held while the source opened)
        start = s.opening and not s.done.is_set()
        if start:
            try:
                s.sa.start(src)
            except Exception as e:  # noqa: BLE001
                start, reason = False, _message(e)
            else:
                s.tap, s.started, s.opening = src, True, False
                if s.session is not None:
                    s.session.start_autosave(s.sa)
    if not start:
        src.close()
        if s.opening:
            fail_open(hub, s, reason)
    s.opened.set()


def fail_open(hub, s: HubStream, reason: str) -> None:
    """The stream's source did not open: it is "failed" with `reason` (kept listed until it is closed), its
    engine slot and session folder are given back, its readers get an error event."""
    reason = redact(reason)
    with s.lock:
        if not s.opening:
            return
        s.opening, s.error = False, reason
    s.opened.set()
    log.warning("stream %s failed to open its source: %s", s.id, reason)
    fanout.publish(s, {"type": "status", "event": "error", "t_s": round(s.sa.latest_t_s, 3), "message": reason})
    try:
        s.sa.stop()
    except RuntimeError:
        pass
    if s.session is not None:
        s.session.release()


def fail_open_late(hub, s: HubStream) -> None:
    fail_open(hub, s, too_late(hub))


def too_late(hub) -> str:
    return f"the source did not open within {hub.options.source_open_timeout_s:g} s (--source-open-timeout-s)"


def status(s: HubStream) -> dict:
    """The stream's info and stats (the keys of `streamvid run`'s stats line)."""
    extra = {"session": s.session.info()} if s.session is not None else {}
    return finite({**s.info(), **s.sa.stats(), "t_s": round(s.sa.latest_t_s, 3), "running": s.state() == "live",
                   "ended": s.sa.ended, "error": s.error, "triggers": len(s.sa.triggers()),
                   "limits": s.sa.limits(), **extra})


def stop_stream(hub, s: HubStream, reason: str = "deleted") -> dict:
    """Stop a stream taken off the hub's table: its session saved once more, source, reader and fan-out joined with
    bounds, every reader told "closed"; its final stats."""
    with s.lock:  # a source still opening is closed unused when it opens (see open_source)
        s.done.set()
        s.opening = False
        started = s.started
    s.opened.set()
    if s.session is not None and started:
        s.session.save_final(s.sa)  # before the stream's state is released; never raises
    try:
        s.sa.stop()
    except RuntimeError as e:  # the stream's work had failed and nobody had read it yet
        s.error = s.error or redact(str(e))
    if s.session is not None:
        s.session.release()
    if s.thread is not None:
        s.thread.join(timeout=hub.config.join_timeout_s + 2 * fanout.WAIT_S)
    try:
        for out in s.sa.outputs(timeout_s=0.0):  # what came after the fan-out stopped
            fanout.deliver(s, out, hub.webhooks)
    except RuntimeError as e:
        s.error = s.error or redact(str(e))
    final = {**status(s), "running": False, "deleted": True, "reason": reason}
    why = {"reason": reason} if reason != "deleted" else {}  # (a client's own delete needs no reason)
    fanout.publish(s, {"type": "status", "event": "closed", "t_s": final["t_s"], **why})
    with s.lock:
        subscribers = list(s.subscribers)
        s.subscribers.clear()
        s.listener = None
    for sub in subscribers:
        sub.offer(CLOSED)
    return final


def _message(e: BaseException) -> str:
    """One line for a source that did not open."""
    return e.message if isinstance(e, HubError) else f"internal error: {type(e).__name__}: {e}"
