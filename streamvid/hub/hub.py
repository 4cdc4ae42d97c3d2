"""The streams of one engine, for every client at once (the HTTP API, the web page), and each stream's one fan-out
of outputs to many readers.

    hub = Hub(engine, HubOptions())               # engine: streamvid.engine.engine.Engine (started here)
    info = hub.open("push", fps=2.0)              # {"id", "object": "stream", "source", "created", "fps", "state"}
    hub.open("rtsp://cam.example/s")["state"]     # "opening": the source connects on hub.opener's threads
    sub = hub.subscribe(info["id"], deltas=True)  # a bounded queue of this stream's outputs as JSON objects
    hub.push(info["id"], png_bytes, "image/png")  # a frame (bytes, a file path or an array) into a push stream
    qid = hub.ask(info["id"], "What colour is the circle?")
    hub.close(info["id"])                         # stops it; returns its final stats
    hub.open("push", session_dir="/srv/s/cam1")   # saved there (periodically, at close); resume=True continues it

Each stream is a `StreamingAssistant` on the shared engine (whose scheduler thread, "streamvid-engine", does the
model's work for every stream; each stream's reader thread, "streamvid-ingest", reads its source). One thread per
stream ("streamvid-hub-fanout") is the only consumer of `sa.outputs()`: it turns every output into the JSON object
`streamvid run` prints (a token piece becomes {"type": "answer.delta", "id", "text"}) and offers it to every
subscriber (SSE clients, websockets, chat completions waiting for their answer, the alert webhooks) and to the
stream's `listener` (the web page's transcript). A subscriber's queue is bounded: a slow one loses its oldest items
and never holds up the others or the engine. The fan-out adds {"type": "status", "event": "ended"} when a clip or
URL ends, "error" when the stream's work failed, and "closed" when the stream is stopped, after which every
subscriber's `get` returns CLOSED.

A URL source opens off the caller's path: `open` looks its host up (the policy's check) on the caller's thread,
lists the stream in state "opening" and returns; its connect and probe run on `opener` (opening.py; the open and
the close themselves are lifecycle.py's). The stream goes
"live" when its source is open, or "failed" with a one-line `error` when the open fails or has not finished
`options.source_open_timeout_s` after `open` was called. Clips, files and "push" open before `open` returns.

Every request about a stream (a frame, a question, a status read, a watch) and every reader counts as activity: a
stream without any for `options.stream_idle_timeout_s` is closed by `reap_idle` (a Periodic thread,
"streamvid-hub-reaper"), its final stats logged. A URL's password and secret query values never appear in a
stream's info, status, errors, events or the log (shown.redact). Every refusal is a `streamvid.errors` error;
a stream whose work failed raises `StreamFailed` on what is asked of it next.

Thread contract: every public method from any thread; `streams` (registry.py) guards the table; a stream's `lock`
its subscribers, its push clock and its opening state (never held across network waits). `clock` (monotonic
seconds, the idle clock) may be replaced, for tests; open deadlines are on `time.monotonic`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

import streamvid.hub.lifecycle as lifecycle
import streamvid.hub.pushed_frames as pushed_frames
import streamvid.hub.sound as sound
import streamvid.hub.validation as validation
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.hub.alert_access import AlertAccess
from streamvid.errors import Conflict, NotFound
from streamvid.hub.opening import OpenPool
from streamvid.hub.options import HubOptions
from streamvid.hub.policy import SourcePolicy
from streamvid.hub.registry import Registry
from streamvid.hub.session_folders import SessionFolders
from streamvid.hub.shown import finite
from streamvid.hub.stream import HubStream
from streamvid.hub.subscriber import CLOSED, Subscriber
from streamvid.language.user_text import clean
from streamvid.periodic import Periodic

log = logging.getLogger(__name__)


class Hub(AlertAccess):
    """The streams of one engine by id; ids start with `prefix` (a replica's, under Ray) and end with `tag(id)` when
    a `tag` is given (under Ray a MAC, so that the ingress can tell an id no replica issued). `links(sid, obj)`:
    the transport's URLs for an alert's media or an answer's evidence frame (alert_access.py), or None."""

    def __init__(self, engine, options: HubOptions | None = None, prefix: str = "vs-", webhooks=None,
                 clock: Callable[[], float] = time.monotonic, tag: Callable[[str], str] | None = None,
                 links: Callable[[str, dict], dict] | None = None):
        self.engine, self.clock, self.tag, self.prefix, self.links = engine, clock, tag, prefix, links
        self.config = engine.config
        self.options = options or HubOptions()
        self.webhooks = webhooks  # a webhooks sender with offer(alert) and close(), or None
        self.policy: SourcePolicy = self.options.policy(frame_px=self.config.frame_px)
        self.opener = OpenPool(self.options.max_opening_sources)  # URL sources' connects and probes
        self.folders = SessionFolders(self.policy.allow_dirs, self.options.session_save_s)
        self.streams: Registry[HubStream] = Registry("stream", per_client=self.options.max_streams_per_client,
                                                     clock=lambda: self.clock())
        engine.start()  # warmed up and scheduling before the first (live) source opens
        timeout = self.options.stream_idle_timeout_s
        # idle streams are looked for every tenth of the timeout, between 0.05 s and 30 s
        self._reaper = Periodic(self.reap_idle, min(30.0, max(0.05, timeout / 10)), name="streamvid-hub-reaper",
                                what="closing idle streams") if timeout else None

    # ---- streams ----------------------------------------------------------------------------------------
    def open(self, source: object, fps: float | None = None, session_dir: object = None, resume: bool = False,
             listed: Callable[[dict], None] | None = None, client: str = "",
             assistant: StreamingAssistant | None = None, listener: Callable[[dict], None] | None = None) -> dict:
        """A new stream on `source` (a spec for `policy`, or a Target a caller's policy resolved); Busy when the
        engine, or `client`'s share of it, is full. With `session_dir` (a folder inside an --allow-dir) it is saved
        there; `resume` continues the session saved there. `assistant`: one of the caller's, not started, on this
        hub's engine (else a fresh one); `listener`: called with every output on the fan-out thread. A clip, a file
        or "push" opens before this returns (state "live"). A URL's host is looked up here, then the stream is
        listed in state "opening" and its source connects and is probed: on `opener` after this returns, or, with
        `listed`, on this thread after `listed(info)` was called (lifecycle.py)."""
        return lifecycle.open_stream(self, source, fps, session_dir, resume, listed, client, assistant, listener)

    def get(self, sid: str, touch: bool = True) -> HubStream:
        """The stream (with `touch`, a request about it: its idle clock starts again); NotFound."""
        s = self.streams.get(sid, touch) if isinstance(sid, str) else None
        if s is None:
            raise NotFound(f"no stream {str(sid)[:100]!r} on this server (it was never opened, or was deleted)")
        return s

    def list(self) -> list[dict]:
        return [s.info() for s in self.streams.values()]

    def __len__(self) -> int:
        return len(self.streams)

    def status(self, sid: str, touch: bool = True) -> dict:
        """Its info and stats (the keys of `streamvid run`'s stats line); `touch=False`: a look that is not a
        request (a page's refresh)."""
        return lifecycle.status(self.get(sid, touch))

    def latest_frame(self, sid: str):
        """The last frame the stream's assistant read (None before the first); not a request."""
        tap = self.get(sid, touch=False).tap
        return tap.last if tap is not None else None

    def close(self, sid: str) -> dict:
        """Stop the stream (source, reader and fan-out joined with bounds); its final stats."""
        s = self.streams.pop(sid) if isinstance(sid, str) else None
        if s is None:
            raise NotFound(f"no stream {str(sid)[:100]!r} on this server (it was never opened, or was deleted)")
        return lifecycle.stop_stream(self, s)

    def reap_idle(self, now: float | None = None) -> list[dict]:
        """Close every stream that has had no request and no reader for options.stream_idle_timeout_s (as of `now`,
        by default the hub's clock); log and return their final stats."""
        timeout = self.options.stream_idle_timeout_s
        if not timeout:
            return []
        now = self.clock() if now is None else now
        finals = []
        for s in self.streams.take_idle(now, timeout, busy=HubStream.watched):
            final = lifecycle.stop_stream(self, s, reason="idle")
            log.warning("closed stream %s after %.0f s without frames, questions or reads; final stats: %s", s.id,
                        now - s.last_active_s, json.dumps(final, allow_nan=False))
            finals.append(final)
        return finals

    def shutdown(self) -> None:
        if self._reaper is not None:
            self._reaper.stop()
        self.opener.shutdown()
        for s in self.streams.take_all():
            try:
                lifecycle.stop_stream(self, s)
            except Exception:  # noqa: BLE001 - one stream's failure must not keep the others running
                pass
        if self.webhooks is not None:
            self.webhooks.close()

    # ---- frames, questions, watches -----------------------------------------------------------------------
    def push(self, sid: str, image, content_type: str | None = None, t_s: float | None = None) -> dict:
        """One frame into a push stream at stream time `t_s` (None: the last frame's time plus the wall time since
        it): PNG/JPEG bytes (of `content_type` when given), an image file's path, or an RGB array; refused above
        the pixel cap before it is decoded. {"frames_in", "frames_dropped", "t_s"} (pushed_frames.py)."""
        return pushed_frames.push_frame(self.get(sid), image, content_type, t_s, self.options.max_frame_pixels,
                                        self.config.frame_px)

    def spoken_question(self, sid: str, data: bytes, fmt: object) -> str:
        """The words of a recorded question about stream `sid` (an `input_audio` part), for its chat completion."""
        self.get(sid)
        return sound.spoken_question(self.config, data, fmt, sid)

    def push_audio(self, sid: str, body: bytes, content_type: str | None, rate: int | None = None,
                   t_s: float | None = None) -> dict:
        """Sound into a push stream (sound.py): a WAV, or raw PCM16 at `rate`; {"t_s", "t_end_s", "utterances"}."""
        s = self.get(sid)
        s.check_running()
        return sound.push_sound(s, body, content_type, self.config, rate, t_s)

    def set_silence(self, sid: str, silence_s: float) -> None:
        """How long a pause ends an utterance in the sound pushed to `sid` (sound.py)."""
        s = self.get(sid)
        s.check_running()
        sound.set_silence(s, self.config, silence_s)

    def ask(self, sid: str, text: object, dialogue: list[tuple[str, str]] | None = None,
            t_s: float | None = None) -> str:
        """Queue a question about the stream at its current time (or `t_s`); its id. Busy when the queue is full,
        Conflict while its source is still opening."""
        s = self.get(sid)
        s.check_running()
        if s.opening:
            raise Conflict(f"stream {sid} is still opening its source: ask once its state is \"live\"")
        return s.guarded(lambda: s.sa.ask(text, t_s=t_s, dialogue=dialogue))

    def watch(self, sid: str, condition: object, **thresholds) -> dict:
        """A standing "tell me when ..." condition; `thresholds` (fire, reset: p(yes) in [0, 1]; None: the
        engine's) override its firing rule."""
        s = self.get(sid)
        s.check_running()
        given = {k: validation.number(v, k, 0.0, 1.0) for k, v in thresholds.items() if v is not None}
        condition = s.guarded(lambda: clean(condition, "condition"))
        return {"id": s.guarded(lambda: s.sa.watch(condition, **given)), "object": "watch", "condition": condition}

    def watches(self, sid: str) -> list[dict]:
        s = self.get(sid)
        return [finite({"id": t["trigger_id"], "object": "watch", **t}) for t in s.sa.triggers()]

    def unwatch(self, sid: str, wid: str) -> dict:
        s = self.get(sid)
        if not s.sa.unwatch(wid):
            raise NotFound(f"no watch {str(wid)[:100]!r} on stream {sid}")
        return {"id": wid, "object": "watch", "deleted": True}

    # ---- readers ------------------------------------------------------------------------------------------
    def subscribe(self, sid: str, deltas: bool = False, loop=None, maxlen: int | None = None) -> Subscriber:
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
        s = self.streams.get(sid, touch=True)  # a reader leaving: the idle clock starts now
        if s is not None:
            with s.lock:
                s.subscribers.discard(sub)

