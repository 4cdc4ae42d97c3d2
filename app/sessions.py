"""A session of the web page: one browser tab or API client, its stream on the hub, chat, alerts and conditions.

    s = manager.session("tab-or-client-key")    # SessionManager (manager.py): made on first use, one hub
    s.start("shapes_7")                         # a fresh hub stream (and a fresh assistant) per start
    qid = s.ask("How many shapes are on screen?")
    s.wait_answer(qid)                          # the answer object `streamvid run` prints
    s.poll(0)                                   # {"cursor": n, "outputs": [answers, alerts, ...]}
    s.stop()                                    # its source closed, the final stats; questions still work

The gradio layer (`streamvid_app.ui`, `streamvid_app.api`) only maps callbacks onto these methods. A session's
stream is a stream of the hub (streamvid.hub), opened with the page's source policy (the hub's, plus its upload
folders): its frames, questions and watches go through the hub, which checks them as it checks an HTTP client's,
and its outputs reach the transcript through the hub's fan-out. Errors a user can cause (a refused input, an empty
question, a full queue, no stream running) raise the hub's errors (`SessionError` is their base) with a message for
the page; the session stays usable (a refused `start` leaves the running stream as it was). A stream whose work
fails ends, not the session: the error is kept in `status()` and the chat, and the next `start` opens a fresh
stream. `stop` closes the stream's source only: as on a clip that ended, questions are still answered from what it
saw; the stream itself (its memory, its engine slot) is freed by the next `start` or when the session closes.

This module holds the lifecycle (streams started and stopped, standing conditions watched again on a fresh stream,
narration, pushed frames); questions and conditions are session_asking.py's, what the page reads (poll, status,
chat) session_reading.py's, sound session_sound.py's. The chat, the alerts and the log that `poll` reads are in
`transcript.py` (the lines' wording in `chat.py`).

Thread contract. `Session`: every public method may be called from any thread (gradio runs callbacks on worker
threads, and a tab's timer, webcam and buttons overlap). `_lock` serialises the lifecycle (start, stop, watch,
unwatch, close); `_cond` (the transcript's `cond`) guards the transcript, the answers and the current stream; lock
order `_lock` -> `_cond`; neither is held while the hub closes a stream (its fan-out thread takes `_cond`).
"""
from __future__ import annotations

import threading
import time

from streamvid.assistant.assistant import StreamingAssistant
from streamvid.engine.admission import EngineFull
from streamvid.errors import Busy, HubError, NotFound, Refused
from streamvid.hub.hub import Hub
from streamvid.hub.policy import SourcePolicy, Target
from streamvid.hub.shown import redact
from streamvid_app.session_asking import SessionAsking
from streamvid_app.session_reading import SessionReading
from streamvid_app.session_sound import SessionSound
from streamvid_app.transcript import Stream, Transcript
from streamvid_app.uploads import UploadFolders
from streamvid_app.voice import PLAYER_TIMEOUT_S, PageVoice, TalkRecording

__all__ = ["Session", "SessionError", "SessionLimitError"]

SessionError = HubError  # what a session refuses: the hub's errors, each with its message for the page
SessionLimitError = Busy  # every session slot (or every one of this client's) is taken


class Session(SessionAsking, SessionReading, SessionSound):
    def __init__(self, key: str, hub: Hub, policy: SourcePolicy, log_size: int = 1000, webcam_gap_s: float = 3.0,
                 client: str = "", uploads: UploadFolders | None = None, voice=None):
        self.key, self.hub, self.policy = key, hub, policy
        self.config, self.engine, self.adapter = hub.config, hub.engine, hub.engine.adapter
        self.uploads = uploads  # an uploaded video is removed once its stream stops
        self.client = client  # who made it (login user or address): the per-client session limit counts these
        self.webcam_gap_s = webcam_gap_s
        self._lock = threading.Lock()
        self._transcript = Transcript(key, log_size)  # chat, alerts, the poll log
        self._cond = self._transcript.cond
        # guarded by _cond
        self._stream: Stream | None = None
        self._prepared: StreamingAssistant | None = None  # made by watch() before any stream started
        self._conditions: dict[str, tuple[str, dict]] = {}  # trigger id (current assistant) -> condition, thresholds
        self._asked: dict[str, Stream] = {}  # question id -> the stream it was asked on (ids restart per stream)
        self._last_stats: dict | None = None
        self._closed = False
        self._webcam_armed = True
        self._last_webcam_s: float | None = None
        self.narrate = self.config.narration.on  # remarks without being asked, for streams started from now on
        self.last_active_s = time.monotonic()
        # answers spoken on the page (voice.py): only while its player asks for them
        self.voice = PageVoice(voice, player_timeout_s=PLAYER_TIMEOUT_S) if voice is not None else None
        self._talk = TalkRecording()  # "hold to talk": the microphone's sound is a question

    @property
    def version(self) -> int:
        """Bumped on every change the page shows."""
        return self._transcript.version

    # ---- streams ----------------------------------------------------------------------------------------
    def start(self, spec: str) -> dict:
        """Start a fresh stream on `spec` (see SourcePolicy.resolve; uploads allowed), replacing the running one."""
        self.touch()
        target = self.policy.resolve(spec, uploads=True)  # refused before the running stream is touched,
        try:
            target.policy.check(target)  # and so is a URL whose host is private or does not resolve
        except HubError as e:
            raise type(e)(redact(e.message)) from None
        with self._lock:
            self._webcam_armed = False  # an explicit choice: webcam frames no longer take over
            return self._start(target, "pushed frames" if target.kind == "push" else target.label, webcam=False)

    def start_webcam(self) -> dict:
        """Start a fresh push stream fed by the browser webcam (`push_frame(..., webcam=True)`)."""
        self.touch()
        with self._lock:
            self._webcam_armed = True
            return self._start(self.policy.resolve("push"), "webcam", webcam=True)

    def stop(self) -> dict:
        """Stop the running stream's source; returns its final stats. What it saw stays: questions are still
        answered from it until the next `start` (or the session's close) frees the stream."""
        self.touch()
        with self._lock:
            self._webcam_armed = False  # a webcam still recording does not restart the stream
            stats = self._end_input()
            self._drop_prepared()
        return stats or self.status()

    def close(self) -> None:
        """End the session for good (tab closed, idle, server shutdown). Safe to call twice."""
        with self._lock:
            self._closed = True
            self._stop_stream()
            self._drop_prepared()
        if self.voice is not None:
            self.voice.close()

    def push_frame(self, image, t_s: float | None = None, webcam: bool = False) -> dict | None:
        """Offer one image (an RGB array, or an image file's path) to the running push stream (latest frame wins)
        at stream time `t_s` (None: the hub's push clock). From the webcam (`webcam=True`), the first frame of a
        recording starts a webcam stream; webcam frames are ignored after the user stopped or chose another input,
        until the next recording (a pause longer than `webcam_gap_s`) or a start of the webcam input. Returns the
        frame counts, or None for an ignored webcam frame."""
        self.touch()
        if webcam:
            with self._lock:
                now = time.monotonic()
                if self._last_webcam_s is None or now - self._last_webcam_s > self.webcam_gap_s:
                    self._webcam_armed = True  # a new recording
                self._last_webcam_s = now
                stream = self._stream
                if stream is None or not stream.webcam or stream.closed or stream.stopped:
                    if not self._webcam_armed:
                        return None
                    self._start(self.policy.resolve("push"), "webcam", webcam=True)
        stream = self._stream
        if stream is None or stream.target.kind != "push" or stream.closed or stream.stopped:
            raise Refused('no push stream is running: start one with source "push" first')
        pushed = self.hub.push(stream.sid, image, t_s=t_s)
        return {"type": "status", "event": "frame", **pushed}

    @property
    def assistant(self) -> StreamingAssistant | None:
        """The running stream's assistant, if a stream runs."""
        with self._cond:
            return self._stream.sa if self._stream is not None else None

    def touch(self) -> None:
        self.last_active_s = time.monotonic()

    def upload_playing(self) -> str | None:
        """The uploaded file the running stream plays, if it plays one."""
        with self._cond:
            stream = self._stream
            playing = stream is not None and stream.target.kind == "upload" and not stream.stopped
            return stream.target.spec if playing else None

    def in_use(self) -> bool:
        """Whether the session holds anything of the user's: a stream, standing conditions, chat or outputs."""
        with self._cond:
            return (self._stream is not None or self._prepared is not None or bool(self._conditions)
                    or self._transcript.has_entries())

    # ---- internals --------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise SessionError("this session was closed (tab closed or idle too long): reload the page")

    def _running(self) -> Stream:
        """The current stream (with _cond held); SessionError if there is none."""
        if self._stream is None:
            raise Refused("no stream is running: start one first")
        return self._stream

    def _start(self, target: Target, label: str, webcam: bool) -> dict:
        """Replace the current stream with a fresh one on `target` (with _lock held)."""
        self._check_open()
        self._stop_stream()
        if self.voice is not None:
            self.voice.reset()  # the new stream's answer ids start again
        sa = self._take_assistant()
        stream = Stream(sa, target, label, webcam)
        with self._cond:  # the stream's first outputs wait for it to be the session's
            stream.sid = self.hub.open(target, client=self.client, assistant=sa,
                                       listener=lambda item: self._on_output(stream, item))["id"]
            self._stream = stream
            self._asked = {}  # ids restart with the new assistant
            event = self._transcript.started(label)
        return {**event, "triggers": self.triggers()}

    def _on_output(self, stream: Stream, item: dict) -> None:
        """One output of `stream` (its fan-out thread): to the transcript, and to the voice while it is current."""
        self._transcript.on_item(stream, item)
        if self.voice is not None and not stream.closed:
            self.voice.on_item(item)

    def _new_assistant(self) -> StreamingAssistant:
        """A fresh assistant on the shared model, watching the session's standing conditions (under new ids)."""
        config = self.config if self.config.narration.on == self.narrate else self.config.replace(narrate=self.narrate)
        try:
            sa = StreamingAssistant(config, engine=self.engine)
        except EngineFull as e:
            raise Busy(str(e)) from None
        if self._conditions:
            with self._cond:
                conditions = list(self._conditions.values())
                self._conditions = {sa.watch(c, **th): (c, th) for c, th in conditions}
        return sa

    def _take_assistant(self) -> StreamingAssistant:
        sa, self._prepared = self._prepared, None
        if sa is not None and sa.config.narration.on != self.narrate:  # narration was switched since watch() made it
            sa.stop()
            sa = None
        return sa if sa is not None else self._new_assistant()

    def _drop_prepared(self) -> None:
        if self._prepared is not None:
            self._prepared.stop()
            self._prepared = None

    def _end_input(self) -> dict | None:
        """Close the current stream's source (with _lock held) and wait (bounded) for what it took in to be encoded;
        the stream stays for questions. One still opening, failed or closed by the hub is stopped for good."""
        stream = self._stream
        if stream is None or stream.stopped:
            return None
        try:
            tap = self.hub.get(stream.sid, touch=False).tap
        except NotFound:
            tap = None
        if tap is None or stream.closed:
            return self._stop_stream()
        tap.close()
        stream.sa.ingest_done.wait(self.config.join_timeout_s)
        with self._cond:
            stream.stopped = True
        stats = {**self.status(), "running": False}
        if stream.target.kind == "upload" and self.uploads is not None:
            self.uploads.discard(stream.target.spec)
        with self._cond:
            self._last_stats = stats
            self._transcript.stopped(stream.label, stats.get("t_s"))
        return stats

    def _stop_stream(self) -> dict | None:
        """Stop the current stream on the hub (with _lock held): its work, reader and fan-out joined."""
        stream = self._stream
        if stream is None:
            return None
        try:
            final = self.hub.close(stream.sid)
        except NotFound:  # closed by the hub already (its shutdown)
            final = {**stream.sa.stats(), "t_s": round(stream.sa.latest_t_s, 3), "ended": stream.sa.ended}
        if final.get("error"):
            self._transcript.on_error(stream, final["error"])
        stats = {k: v for k, v in self._describe(stream, final).items() if k not in ("deleted", "reason")}
        if stream.target.kind == "upload" and self.uploads is not None and not stream.stopped:
            self.uploads.discard(stream.target.spec)
        with self._cond:
            stream.closed = True
            self._stream = None
            self._last_stats = {**stats, "running": False, "stopped": True, "can_ask": False}
            if not stream.stopped:
                self._transcript.stopped(stream.label, stats.get("t_s"))
        return self._last_stats
