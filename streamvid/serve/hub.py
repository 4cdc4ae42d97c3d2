"""The streams of one server on one engine, and each stream's one fan-out of outputs to many subscribers.

    hub = Hub(engine, options)                    # engine: streamvid.engine.Engine, started
    info = hub.open("push", fps=2.0)              # {"id", "object": "stream", "source", "created", "fps", "state"}
    hub.open("rtsp://cam.example/s")["state"]     # "opening": the source connects on hub.opener's threads
    sub = hub.subscribe(info["id"], deltas=True)  # a bounded queue of this stream's outputs as JSON objects
    hub.push(info["id"], png_bytes, "image/png")  # frames into a push stream
    qid = hub.ask(info["id"], "What colour is the circle?")
    hub.close(info["id"])                         # stops it; returns its final stats
    hub.open("push", session_dir="/srv/s/cam1")   # saved there (periodically, at close); resume=True continues it
    hub.reap_idle()                               # closes streams idle for options.stream_idle_timeout_s

Each stream is a `StreamingAssistant` on the shared engine. One thread per stream ("streamvid-serve-fanout") is
the only consumer of `sa.outputs()`: it turns every output into the JSON object `streamvid run` prints (a token
piece becomes {"type": "answer.delta", "id", "text"}) and offers it to every subscriber (SSE clients, websockets,
chat completions waiting for their answer, the alert webhooks). A subscriber's queue is bounded: a slow one loses
its oldest items (counted in `dropped`) and never holds up the others or the engine. The fan-out adds
{"type": "status", "event": "ended"} when a clip or URL ends, "error" when the stream's work failed, and "closed"
when the stream is stopped, after which every subscriber's `get` returns CLOSED.

A URL source opens off the request path: `open` looks its host up (the policy's check) on the caller's thread, takes
the engine slot, lists the stream in state "opening" and returns; its connect and probe run on `opener`, a bounded
pool of threads of its own ("streamvid-serve-open", `options.max_opening_sources` at once; one more is refused with
Unavailable; HubService calls `open` itself there, so the host lookup waits there too, and gets the stream's info
through `listed`). The stream goes "live" when its source is open, or "failed" with a one-line `error` when the open
fails or has not finished `options.source_open_timeout_s` after `open` was called (its fan-out thread watches that
deadline; the connect itself gives up by PyAV's timeouts, and a source that opens too late is closed unused). Clips,
files and "push" open on the caller's thread, before `open` returns ("live"). Frames, status reads and deletes never
wait on an open: they take no lock that an open holds while it waits on the network.

Every request about a stream (a frame, a question, a status read, a watch) and every open subscriber (an events
stream, a realtime socket, a chat completion waiting for its answer) counts as activity: a stream without any for
`options.stream_idle_timeout_s` is closed by `reap_idle` (a Periodic thread calls it), its final stats logged.
A URL's password and secret query values (`redact`) never appear in a stream's info, status, errors, events or
the log; its source opens with the URL as given.
A stream opened with a `session_dir` (stream_sessions.py) is saved there every `options.session_save_s` and when
it closes, however it closes; `open(..., resume=True)` continues a saved one.

Thread contract: every public method of `Hub` from any thread; `_lock` guards the streams table only; a stream's
`lock` its subscribers, its push clock and its opening state (never held across network waits). Subscribers:
subscriber.py. `clock` (monotonic seconds, the idle clock) may be replaced, for tests; open deadlines are on
`time.monotonic`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from streamvid.assistant import BusyError, StreamingAssistant
from streamvid.engine import EngineFull
from streamvid.periodic import Periodic
import streamvid.serve.images as images
from streamvid.serve.errors import (BadRequest, Busy, Conflict, NotFound, ServeError, Timeout, Unavailable, finite,
                                    wire_error)
from streamvid.serve.options import ServeOptions, model_id
from streamvid.serve.policy import SourcePolicy
from streamvid.serve.stream_sessions import SESSION_MARK, SessionFolders, StreamSession
from streamvid.serve.subscriber import CLOSED, Subscriber
from streamvid.user_text import clean

log = logging.getLogger(__name__)

MAX_STREAM_S = 10 * 365 * 24 * 3600.0  # stream times beyond ten years are refused
FANOUT_WAIT_S = 0.25
MIN_FPS = 0.01  # a frame per 100 s: slower is not a video stream (and 5e-324 would never sample a frame)
HIDDEN = "***"  # what a URL's password and secret query values are shown as
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"<>]*")
# query parameters whose values are secrets: tokens, keys, passwords, signatures (AWS X-Amz-Signature, Azure sig)
_SECRET_PARAM = re.compile(r"(?i)token|secret|passw|pwd|apikey|api[-_]key|signature|credential|auth|^(key|sig|pass)$")


def redact(text: str) -> str:
    """`text` with the password of every URL in it (`rtsp://user:***@host/...`) and the values of its secret query
    parameters (token, key, password, secret, sig, ...) shown as ***: how a source appears in replies, errors and
    logs. The source itself is opened with the URL as given."""
    return _URL.sub(lambda m: _redact_url(m.group(0)), text) if isinstance(text, str) and "://" in text else text


def _redact_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    netloc_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:netloc_end], rest[netloc_end:]
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:{HIDDEN}@{host}"
    path, q, query = tail.partition("?")
    if q:
        query, hash_, fragment = query.partition("#")
        pairs = []
        for pair in query.split("&"):
            name, eq, value = pair.partition("=")
            pairs.append(f"{name}={HIDDEN}" if eq and value and _SECRET_PARAM.search(name) else pair)
        tail = f"{path}?{'&'.join(pairs)}{hash_}{fragment}"
    return f"{scheme}://{netloc}{tail}"


@dataclass
class ServedStream:
    id: str
    sa: object  # its StreamingAssistant
    kind: str
    source: str
    fps: float
    created: int
    push: object | None = None  # the PushSource of a push stream
    last_t_s: float | None = None  # stream time of the last pushed frame
    last_push_s: float | None = None  # monotonic time of that push
    error: str | None = None
    subscribers: set = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)  # subscribers, push clock
    done: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    ended_sent: bool = False
    session: StreamSession | None = None  # its session folder
    last_active: float = 0.0  # hub clock of the last request about it
    opening: bool = False  # its source is still opening (on the hub's open pool)
    started: bool = True  # its assistant reads its source (False until a URL source has opened)
    open_deadline: float | None = None  # time.monotonic() by which its source must have opened
    opened: threading.Event = field(default_factory=threading.Event)  # the open ended (either way), or it closed

    def state(self) -> str:
        """Its state: "opening", "live", "ended" (a clip or URL that ended), "failed" (see `error`) or "closed"."""
        if self.opening:
            return "opening"
        if self.error is not None:
            return "failed"
        if self.done.is_set():
            return "closed"
        return "ended" if self.sa.ended else "live"

    def info(self) -> dict:
        info = {"id": self.id, "object": "stream", "source": self.source, "created": self.created, "fps": self.fps,
                "state": self.state()}
        if self.session is not None:
            info.update(session_dir=str(self.session.folder), resumed=self.session.resume)
        return info


class OpenPool:
    """Threads ("streamvid-serve-open") for the work of opening sources that may wait on the network: a URL's host
    lookup, connect and probe. At most `size` jobs at once, each on a daemon thread of its own (none waits in a
    queue, and none holds up the process's exit); `submit` refuses one more with Unavailable (503). Separate from the
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
            threading.Thread(target=self._run, args=(future, fn, args), name="streamvid-serve-open",
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


class Hub:
    """The streams of one engine by id; ids start with `prefix` (a replica's, under Ray) and end with `tag(id)` when
    a `tag` is given (under Ray a MAC, so that the ingress can tell an id no replica issued)."""

    def __init__(self, engine, options: ServeOptions | None = None, prefix: str = "vs-", webhooks=None,
                 clock: Callable[[], float] = time.monotonic, tag: Callable[[str], str] | None = None):
        self.engine = engine
        self.clock = clock
        self.tag = tag
        self.config = engine.config
        self.options = options or ServeOptions(model_id=model_id(engine.config.model))
        self.prefix = prefix
        self.webhooks = webhooks  # a webhooks.WebhookSender, or None
        self.policy = SourcePolicy(allow_dirs=tuple(self.options.allow_dirs),
                                   max_frame_pixels=self.options.max_frame_pixels,
                                   allow_private_urls=self.options.allow_private_urls,
                                   max_outage_s=self.options.max_outage_s, frame_px=self.config.frame_px,
                                   open_timeout_s=self.options.source_open_timeout_s)
        self.opener = OpenPool(self.options.max_opening_sources)  # URL sources' connects and probes
        self.folders = SessionFolders(self.policy.allow_dirs, self.options.session_save_s)
        self._streams: dict[str, ServedStream] = {}
        self._lock = threading.Lock()
        engine.start()  # warmed up and scheduling before the first (live) source opens
        timeout = self.options.stream_idle_timeout_s
        # idle streams are looked for every tenth of the timeout, between 0.05 s and 30 s
        self._reaper = Periodic(self.reap_idle, min(30.0, max(0.05, timeout / 10)), name="streamvid-serve-reaper",
                                what="closing idle streams") if timeout else None

    # ---- streams ----------------------------------------------------------------------------------------
    def open(self, source: object, fps: float | None = None, session_dir: object = None,
             resume: bool = False, listed: Callable[[dict], None] | None = None) -> dict:
        """A new stream on `source` (see policy.SourcePolicy); Busy when the engine is full. With `session_dir` (a
        folder inside an --allow-dir) it is saved there; `resume` continues the session saved there instead of
        starting one (the stream clock, window, memory and dialogue go on). A clip, a file or "push" opens before
        this returns (state "live"). A URL's host is looked up here (which may wait on the network), then the
        stream is listed in state "opening" and its source connects and is probed: on `opener` after this returns
        (Unavailable when too many sources are opening), or, with `listed`, on this thread after `listed(info)`
        was called (this returns when the open has ended; the service calls it so, on an `opener` thread)."""
        called_s = time.monotonic()
        fps = self.config.fps if fps is None else fps
        if isinstance(fps, bool) or not isinstance(fps, int | float) or not math.isfinite(fps) \
                or not MIN_FPS <= fps <= self.options.max_fps:
            raise BadRequest(f"fps must be a number in [{MIN_FPS:g}, {self.options.max_fps:g}], got {fps!r}"[:200])
        if not isinstance(resume, bool) or (resume and session_dir is None):
            raise BadRequest('"resume": true needs the "session_dir" the stream was saved in')
        try:
            kind, label, open_source = self.policy.resolve(source)  # refused before a slot is taken
        except ServeError as e:
            raise type(e)(redact(e.message), e.status, e.type, e.code) from None
        timeout = self.options.source_open_timeout_s
        if kind == "url" and time.monotonic() - called_s >= timeout:
            raise Timeout(f"the source did not open within {timeout:g} s (--source-open-timeout-s): its host name "
                          f"did not resolve in time")
        folder = self.folders.resolve(session_dir) if session_dir is not None else None
        config = self.config if fps == self.config.fps else self.config.replace(fps=float(fps))
        session = self.folders.claim(folder, resume) if folder is not None else None
        sa = None
        try:
            try:
                sa = (session.assistant(config, self.engine) if session
                      else StreamingAssistant(config, engine=self.engine))
            except EngineFull as e:
                raise Busy(str(e)) from None
            if kind == "url":
                s = self._new(sa, kind, label, fps, session, None)
                s.opening, s.started, s.open_deadline = True, False, called_s + timeout
                if listed is None:
                    self.opener.submit(self._open_source, s, open_source)  # Unavailable: too many opening
                    return self._add(s)
            else:
                src = open_source(float(fps))
                sa.start(src)
        except BaseException:
            if sa is not None:
                sa.stop()
            if session is not None:
                session.release()
            raise
        if kind == "url":  # opened on this thread once the caller has the listed stream's info
            try:
                listed(self._add(s))
            finally:
                self._open_source(s, open_source)
            return s.info()
        s = self._new(sa, kind, label, fps, session, src if kind == "push" else None)
        if session is not None:
            session.start_autosave(sa)
        return self._add(s)

    def _new(self, sa, kind: str, label: str, fps: float, session: StreamSession | None, push) -> ServedStream:
        sid = f"{self.prefix}{SESSION_MARK if session else ''}{secrets.token_hex(6)}"
        if self.tag is not None:
            sid += self.tag(sid)
        return ServedStream(sid, sa, kind, redact(label), float(fps), int(time.time()), push=push, session=session,
                            last_active=self.clock())

    def _add(self, s: ServedStream) -> dict:
        """List the stream and start its fan-out thread; its info."""
        s.thread = threading.Thread(target=self._fanout, args=(s,), name="streamvid-serve-fanout", daemon=True)
        with self._lock:
            self._streams[s.id] = s
        s.thread.start()
        return s.info()

    def _open_source(self, s: ServedStream, open_source: Callable[[float], object]) -> None:
        """On an `opener` thread: open the stream's URL source (connect, probe) and start the stream on it, unless
        the stream failed (its deadline) or closed meanwhile: then the source is closed unused."""
        try:
            src = open_source(s.fps)
        except Exception as e:  # noqa: BLE001 - a refused or unreachable source (or anything else) fails the stream
            late = time.monotonic() >= s.open_deadline  # (ffmpeg's own timeout, at about the same time)
            self._fail_open(s, self._too_late() if late else wire_error(e).message)
            return
        reason = "the stream closed while its source opened"
        with s.lock:  # (not held while the source opened)
            start = s.opening and not s.done.is_set()
            if start:
                try:
                    s.sa.start(src)
                except Exception as e:  # noqa: BLE001
                    start, reason = False, wire_error(e).message
                else:
                    s.started, s.opening = True, False
                    if s.session is not None:
                        s.session.start_autosave(s.sa)
        if not start:
            src.close()
            if s.opening:
                self._fail_open(s, reason)
        s.opened.set()

    def _fail_open(self, s: ServedStream, reason: str) -> None:
        """The stream's source did not open: it is "failed" with `reason` (kept listed, for GET, until it is deleted
        or closed as idle), its engine slot and session folder are given back, its subscribers get an error event."""
        reason = redact(reason)
        with s.lock:
            if not s.opening:
                return
            s.opening, s.error = False, reason
        s.opened.set()
        log.warning("stream %s failed to open its source: %s", s.id, reason)
        self._publish(s, {"type": "status", "event": "error", "t_s": round(s.sa.latest_t_s, 3), "message": reason})
        try:
            s.sa.stop()
        except RuntimeError:
            pass
        if s.session is not None:
            s.session.release()

    def _too_late(self) -> str:
        return (f"the source did not open within {self.options.source_open_timeout_s:g} s "
                f"(--source-open-timeout-s)")

    def _await_open(self, s: ServedStream) -> bool:
        """On the stream's fan-out thread: wait until its source has opened (True), failed, passed its deadline
        (then the stream fails) or the stream closed (False)."""
        while s.opening and not s.done.is_set():
            left = s.open_deadline - time.monotonic()
            if left <= 0:
                self._fail_open(s, self._too_late())
                break
            s.opened.wait(min(FANOUT_WAIT_S, left))
        with s.lock:
            return s.started and not s.done.is_set()

    def get(self, sid: str) -> ServedStream:
        """The stream (a request about it: its idle clock starts again); NotFound."""
        with self._lock:
            s = self._streams.get(sid)
        if s is None:
            raise NotFound(f"no stream {sid[:100]!r} on this server (it was never opened, or was deleted)")
        s.last_active = self.clock()
        return s

    def list(self) -> list[dict]:
        with self._lock:
            streams = list(self._streams.values())
        return [s.info() for s in streams]

    def __len__(self) -> int:
        with self._lock:
            return len(self._streams)

    def status(self, sid: str) -> dict:
        s = self.get(sid)
        return self._status(s)

    def _status(self, s: ServedStream) -> dict:
        stats = s.sa.stats()
        running = s.state() == "live"
        extra = {"session": s.session.info()} if s.session is not None else {}
        return finite({**s.info(), **stats, "t_s": round(s.sa.latest_t_s, 3), "running": running,
                       "ended": s.sa.ended, "error": s.error, "triggers": len(s.sa.triggers()),
                       "limits": s.sa.limits(), **extra})

    def close(self, sid: str) -> dict:
        """Stop the stream (source, reader and fan-out joined with bounds); its final stats."""
        with self._lock:
            s = self._streams.pop(sid, None)
        if s is None:
            raise NotFound(f"no stream {sid[:100]!r} on this server (it was never opened, or was deleted)")
        return self._stop(s)

    def reap_idle(self, now: float | None = None) -> list[dict]:
        """Close every stream that has had no request and no subscriber for options.stream_idle_timeout_s (as of
        `now`, by default the hub's clock); log and return their final stats."""
        timeout = self.options.stream_idle_timeout_s
        if not timeout:
            return []
        now = self.clock() if now is None else now
        idle = []
        with self._lock:
            for sid, s in list(self._streams.items()):
                with s.lock:
                    watched = bool(s.subscribers)
                if watched:
                    s.last_active = now
                elif now - s.last_active >= timeout:
                    idle.append(self._streams.pop(sid))
        finals = []
        for s in idle:
            final = self._stop(s, reason="idle")
            log.warning("closed stream %s after %.0f s without frames, questions or reads; final stats: %s", s.id,
                        now - s.last_active, json.dumps(final, allow_nan=False))
            finals.append(final)
        return finals

    def _stop(self, s: ServedStream, reason: str = "deleted") -> dict:
        with s.lock:  # a source still opening is closed unused when it opens (see _open_source)
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
            s.thread.join(timeout=self.config.join_timeout_s + 2 * FANOUT_WAIT_S)
        try:
            for out in s.sa.outputs(timeout_s=0.0):  # what came after the fan-out stopped
                self._deliver(s, out)
        except RuntimeError as e:
            s.error = s.error or redact(str(e))
        final = {**self._status(s), "running": False, "deleted": True, "reason": reason}
        why = {"reason": reason} if reason != "deleted" else {}  # (a client's own delete needs no reason)
        self._publish(s, {"type": "status", "event": "closed", "t_s": final["t_s"], **why})
        with s.lock:
            subscribers = list(s.subscribers)
            s.subscribers.clear()
        for sub in subscribers:
            sub.offer(CLOSED)
        return final

    def shutdown(self) -> None:
        if self._reaper is not None:
            self._reaper.stop()
        self.opener.shutdown()
        with self._lock:
            streams, self._streams = list(self._streams.values()), {}
        for s in streams:
            try:
                self._stop(s)
            except Exception:  # noqa: BLE001 - one stream's failure must not keep the others running
                pass
        if self.webhooks is not None:
            self.webhooks.close()

    # ---- frames, questions, watches -----------------------------------------------------------------------
    def push(self, sid: str, data: bytes, content_type: str | None, t_s: float | None = None) -> dict:
        """One PNG/JPEG frame into a push stream at stream time `t_s` (None: the last frame's time plus the wall
        time since it). {"frames_in", "frames_dropped", "t_s"}."""
        s = self.get(sid)
        if s.push is None:
            raise Conflict(f"stream {sid} plays {s.source!r}: frames can only be pushed to a \"push\" stream")
        image = images.decode(data, content_type, self.options.max_frame_pixels, self.config.frame_px)
        return self.push_image(s, image, t_s)

    def push_image(self, s: ServedStream, image, t_s: float | None = None) -> dict:
        if t_s is not None and (isinstance(t_s, bool) or not isinstance(t_s, int | float) or not math.isfinite(t_s)
                                or not 0 <= t_s <= MAX_STREAM_S):
            raise BadRequest(f"t_s must be a finite number of seconds in [0, {MAX_STREAM_S:g}], got {t_s!r}"[:200])
        if s.done.is_set() or s.error is not None:
            raise Unavailable(f"stream {s.id} has stopped{': ' + s.error if s.error else ''}")
        with s.lock:
            now = time.monotonic()
            if t_s is None:
                t_s = 0.0 if s.last_t_s is None else s.last_t_s + (now - s.last_push_s)
            elif s.last_t_s is not None and t_s < s.last_t_s:
                raise BadRequest(f"t_s {t_s:g} is earlier than the last frame's {s.last_t_s:g}: stream times only "
                                 f"go forward")
            s.last_t_s, s.last_push_s = float(t_s), now
            s.push.push(image, float(t_s))
        st = s.sa.ingest_stats()
        return {"frames_in": st["frames_in"], "frames_dropped": st["frames_dropped"], "t_s": round(float(t_s), 3)}

    def ask(self, sid: str, text: object, dialogue: list[tuple[str, str]] | None = None) -> str:
        """Queue a question about the stream at its current time; its id. Busy when the queue is full, Conflict
        while its source is still opening."""
        s = self.get(sid)
        self._check_running(s)
        if s.opening:
            raise Conflict(f"stream {sid} is still opening its source: ask once its state is \"live\" "
                           f"(GET /v1/streams/{sid})")
        try:
            return s.sa.ask(text, dialogue=dialogue)
        except BusyError as e:
            raise Busy(str(e)) from None
        except ValueError as e:
            raise BadRequest(str(e)) from None
        except RuntimeError as e:  # the stream's work failed
            raise Unavailable(f"stream {sid} stopped with an error: {redact(str(e))}") from None

    def watch(self, sid: str, condition: object, **thresholds) -> dict:
        s = self.get(sid)
        self._check_running(s)
        for name, value in thresholds.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or not math.isfinite(value) or not 0 <= value <= 1):
                raise BadRequest(f"{name} must be a number in [0, 1], got {value!r}"[:200])
        try:
            condition = clean(condition, "condition")
            wid = s.sa.watch(condition, **{k: v for k, v in thresholds.items() if v is not None})
        except ValueError as e:
            raise BadRequest(str(e)) from None
        except RuntimeError as e:
            raise Unavailable(f"stream {sid} stopped with an error: {redact(str(e))}") from None
        return {"id": wid, "object": "watch", "condition": condition}

    def watches(self, sid: str) -> list[dict]:
        s = self.get(sid)
        return [finite({"id": t["trigger_id"], "object": "watch", **t}) for t in s.sa.triggers()]

    def unwatch(self, sid: str, wid: str) -> dict:
        s = self.get(sid)
        if not s.sa.unwatch(wid):
            raise NotFound(f"no watch {wid[:100]!r} on stream {sid}")
        return {"id": wid, "object": "watch", "deleted": True}

    def _check_running(self, s: ServedStream) -> None:
        if s.error is not None:
            raise Unavailable(f"stream {s.id} stopped with an error: {s.error}; delete it and open another")
        if s.done.is_set():
            raise NotFound(f"stream {s.id} was deleted")

    # ---- fan-out ------------------------------------------------------------------------------------------
    def subscribe(self, sid: str, deltas: bool = False, loop: asyncio.AbstractEventLoop | None = None,
                  maxlen: int | None = None) -> Subscriber:
        """A subscriber to the stream's outputs from now on (answer.delta items too with `deltas`); `loop`: the
        asyncio loop of a consumer that awaits `get` (None: `get_sync`)."""
        s = self.get(sid)
        sub = Subscriber(maxlen or self.options.subscriber_queue, deltas, loop)
        with s.lock:
            if s.done.is_set():
                sub.offer(CLOSED)
            else:
                s.subscribers.add(sub)
        return sub

    def unsubscribe(self, sid: str, sub: Subscriber) -> None:
        with self._lock:
            s = self._streams.get(sid)
        if s is not None:
            with s.lock:
                s.subscribers.discard(sub)
            s.last_active = self.clock()  # a reader leaving: the idle clock starts now

    def _fanout(self, s: ServedStream) -> None:
        """The stream's one consumer of sa.outputs(): each output to every subscriber, until the stream stops (after
        its source has opened)."""
        if not self._await_open(s):
            return
        try:
            while not s.done.is_set():
                for out in s.sa.outputs(timeout_s=FANOUT_WAIT_S):
                    self._deliver(s, out)
                if s.sa.ended and not s.ended_sent and not s.done.is_set():
                    s.ended_sent = True
                    self._publish(s, {"type": "status", "event": "ended", "t_s": round(s.sa.latest_t_s, 3)})
        except RuntimeError as e:  # the stream's work failed: it is over, the server is not
            s.error = redact(str(e))
            self._publish(s, {"type": "status", "event": "error", "t_s": round(s.sa.latest_t_s, 3),
                              "message": s.error})

    def _deliver(self, s: ServedStream, out) -> None:
        if out.kind == "token":
            self._publish(s, {"type": "answer.delta", "id": out.id, "text": out.text}, delta=True)
            return
        obj = finite(out.to_json())
        if out.kind == "status":  # a live source's loss and return: its reason may name the URL
            obj = {k: redact(v) for k, v in obj.items()}
        self._publish(s, obj)
        if out.kind == "alert" and self.webhooks is not None:
            self.webhooks.offer({**obj, "stream_id": s.id})

    def _publish(self, s: ServedStream, obj: dict, delta: bool = False) -> None:
        with s.lock:
            subscribers = list(s.subscribers)
        for sub in subscribers:
            if sub.deltas or not delta:
                sub.offer(obj)

