"""The streams of one server on one engine, and each stream's one fan-out of outputs to many subscribers.

    hub = Hub(engine, options)                    # engine: streamvid.engine.Engine, started
    info = hub.open("push", fps=2.0)              # {"id", "object": "stream", "source", "created", "fps"}
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

Every request about a stream (a frame, a question, a status read, a watch) and every open subscriber (an events
stream, a realtime socket, a chat completion waiting for its answer) counts as activity: a stream without any for
`options.stream_idle_timeout_s` is closed by `reap_idle` (a Periodic thread calls it), its final stats logged.
A stream opened with a `session_dir` (stream_sessions.py) is saved there every `options.session_save_s` and when
it closes, however it closes; `open(..., resume=True)` continues a saved one.

Thread contract: every public method of `Hub` from any thread; `_lock` guards the streams table only. Subscribers:
subscriber.py. `clock` (monotonic seconds) may be replaced, for tests.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from streamvid.assistant import BusyError, StreamingAssistant
from streamvid.engine import EngineFull
from streamvid.periodic import Periodic
import streamvid.serve.images as images
from streamvid.serve.errors import BadRequest, Busy, Conflict, NotFound, Unavailable, finite
from streamvid.serve.options import ServeOptions, model_id
from streamvid.serve.policy import SourcePolicy
from streamvid.serve.stream_sessions import SESSION_MARK, SessionFolders, StreamSession
from streamvid.serve.subscriber import CLOSED, Subscriber
from streamvid.user_text import clean

log = logging.getLogger(__name__)

MAX_STREAM_S = 10 * 365 * 24 * 3600.0  # stream times beyond ten years are refused
FANOUT_WAIT_S = 0.25


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

    def info(self) -> dict:
        info = {"id": self.id, "object": "stream", "source": self.source, "created": self.created, "fps": self.fps}
        if self.session is not None:
            info.update(session_dir=str(self.session.folder), resumed=self.session.resume)
        return info


class Hub:
    """The streams of one engine by id; ids start with `prefix` (a replica's, under Ray)."""

    def __init__(self, engine, options: ServeOptions | None = None, prefix: str = "vs-", webhooks=None,
                 clock: Callable[[], float] = time.monotonic):
        self.engine = engine
        self.clock = clock
        self.config = engine.config
        self.options = options or ServeOptions(model_id=model_id(engine.config.model))
        self.prefix = prefix
        self.webhooks = webhooks  # a webhooks.WebhookSender, or None
        self.policy = SourcePolicy(allow_dirs=tuple(self.options.allow_dirs),
                                   max_frame_pixels=self.options.max_frame_pixels,
                                   allow_private_urls=self.options.allow_private_urls,
                                   max_outage_s=self.options.max_outage_s, frame_px=self.config.frame_px)
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
             resume: bool = False) -> dict:
        """A new stream on `source` (see policy.SourcePolicy); Busy when the engine is full. With `session_dir` (a
        folder inside an --allow-dir) it is saved there; `resume` continues the session saved there instead of
        starting one (the stream clock, window, memory and dialogue go on)."""
        fps = self.config.fps if fps is None else fps
        if isinstance(fps, bool) or not isinstance(fps, int | float) or not math.isfinite(fps) \
                or not 0 < fps <= self.options.max_fps:
            raise BadRequest(f"fps must be a number in (0, {self.options.max_fps:g}], got {fps!r}"[:200])
        if not isinstance(resume, bool) or (resume and session_dir is None):
            raise BadRequest('"resume": true needs the "session_dir" the stream was saved in')
        kind, label, open_source = self.policy.resolve(source)  # refused before a slot is taken
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
            src = open_source(float(fps))
            sa.start(src)
        except BaseException:
            if sa is not None:
                sa.stop()
            if session is not None:
                session.release()
            raise
        sid = f"{self.prefix}{SESSION_MARK if session else ''}{secrets.token_hex(6)}"
        s = ServedStream(sid, sa, kind, label, float(fps), int(time.time()), push=src if kind == "push" else None,
                         session=session, last_active=self.clock())
        if session is not None:
            session.start_autosave(sa)
        s.thread = threading.Thread(target=self._fanout, args=(s,), name="streamvid-serve-fanout", daemon=True)
        with self._lock:
            self._streams[sid] = s
        s.thread.start()
        return s.info()

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
        running = s.error is None and not s.sa.ended and not s.done.is_set()
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
        s.done.set()
        if s.session is not None:
            s.session.save_final(s.sa)  # before the stream's state is released; never raises
        try:
            s.sa.stop()
        except RuntimeError as e:  # the stream's work had failed and nobody had read it yet
            s.error = s.error or str(e)
        if s.session is not None:
            s.session.release()
        if s.thread is not None:
            s.thread.join(timeout=self.config.join_timeout_s + 2 * FANOUT_WAIT_S)
        try:
            for out in s.sa.outputs(timeout_s=0.0):  # what came after the fan-out stopped
                self._deliver(s, out)
        except RuntimeError as e:
            s.error = s.error or str(e)
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
        """Queue a question about the stream at its current time; its id. Busy when the queue is full."""
        s = self.get(sid)
        self._check_running(s)
        try:
            return s.sa.ask(text, dialogue=dialogue)
        except BusyError as e:
            raise Busy(str(e)) from None
        except ValueError as e:
            raise BadRequest(str(e)) from None
        except RuntimeError as e:  # the stream's work failed
            raise Unavailable(f"stream {sid} stopped with an error: {e}") from None

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
            raise Unavailable(f"stream {sid} stopped with an error: {e}") from None
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
        """The stream's one consumer of sa.outputs(): each output to every subscriber, until the stream stops."""
        try:
            while not s.done.is_set():
                for out in s.sa.outputs(timeout_s=FANOUT_WAIT_S):
                    self._deliver(s, out)
                if s.sa.ended and not s.ended_sent and not s.done.is_set():
                    s.ended_sent = True
                    self._publish(s, {"type": "status", "event": "ended", "t_s": round(s.sa.latest_t_s, 3)})
        except RuntimeError as e:  # the stream's work failed: it is over, the server is not
            s.error = str(e)
            self._publish(s, {"type": "status", "event": "error", "t_s": round(s.sa.latest_t_s, 3),
                              "message": str(e)})

    def _deliver(self, s: ServedStream, out) -> None:
        if out.kind == "token":
            self._publish(s, {"type": "answer.delta", "id": out.id, "text": out.text}, delta=True)
            return
        obj = finite(out.to_json())
        self._publish(s, obj)
        if out.kind == "alert" and self.webhooks is not None:
            self.webhooks.offer({**obj, "stream_id": s.id})

    def _publish(self, s: ServedStream, obj: dict, delta: bool = False) -> None:
        with s.lock:
            subscribers = list(s.subscribers)
        for sub in subscribers:
            if sub.deltas or not delta:
                sub.offer(obj)

