"""A session's transcript: the chat (answers streamed into it token by token, alerts, remarks, status lines), the
alerts, and the log of outputs that `poll` reads; and the drain thread that moves a running stream's outputs there.

    transcript = Transcript("tab-key", log_size=1000)
    stream = Stream(sa, target, tap, "shapes_7", webcam=False)
    with transcript.cond:
        transcript.started("shapes_7")                  # "*Watching shapes_7.*", a "started" status in the log
    transcript.drain_in_background(stream)              # thread "streamvid-app-outputs" until stream.done is set
    with transcript.cond:
        transcript.asked(stream, qid, question, t_s)    # the question, then its answer's line filled token by token
    transcript.poll(0)                                  # {"cursor": n, "outputs": [answers, alerts, ...]}
    stream.done.set(); stream.sa.stop()
    transcript.drain_rest(stream, join_timeout_s=5.0)   # the thread joined, what is left moved in

Only the assistant's public API is used: `outputs()` for the outputs, `latest_t_s` for an error's stream time.
What the chat lines say is in chat.py.

Thread contract. `cond` (a re-entrant Condition) guards everything here and the fields of every `Stream` below its
`thread`. Methods documented "with cond held" expect the caller to hold it (so that a session can change its own
state in the same step); the others take it. Every change bumps `version` and notifies the waiters on `cond`.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque

from streamvid.assistant import StreamingAssistant
from streamvid_app.chat import alert_line, answer_line, error_line, pending_line, say_line, status_line, watching_line
from streamvid_app.frames import FrameTap
from streamvid_app.inputs import Target

log = logging.getLogger(__name__)

DRAIN_WAIT_S = 0.25  # how long the drain thread blocks on the outputs queue before checking its stop event
CHAT_MESSAGES = 200  # chat messages a session keeps
ALERTS_KEPT = 200


class Stream:
    """One assistant on one source, from a session's `start` to its `stop`. Fields below `thread` are guarded by the
    transcript's `cond`."""

    def __init__(self, sa: StreamingAssistant, target: Target, tap: FrameTap, label: str, webcam: bool):
        self.sa, self.target, self.tap, self.label, self.webcam = sa, target, tap, label, webcam
        self.started_s = time.monotonic()
        self.done = threading.Event()  # tells the drain thread to finish
        self.thread: threading.Thread | None = None
        # guarded by the transcript's cond
        self.closed = False
        self.error: str | None = None
        self.answers: dict[str, dict] = {}  # answer id -> answer object
        self.pending: dict[str, tuple[dict, float, list[str]]] = {}  # id -> (chat message, t_s, pieces)


class Transcript:
    def __init__(self, key: str, log_size: int = 1000):
        self.key = key  # the session's, for the log
        self.cond = threading.Condition()
        # guarded by cond
        self.version = 0  # bumped on every change the page shows
        self.last_ttft_ms: float | None = None  # of the last complete answer
        self._log: deque[dict] = deque(maxlen=log_size)  # outputs other than tokens, for poll()
        self._log_start = 0  # cursor of self._log[0]
        self._chat: deque[dict] = deque(maxlen=CHAT_MESSAGES)
        self._alerts: deque[dict] = deque(maxlen=ALERTS_KEPT)

    # ---- reading ----------------------------------------------------------------------------------------
    def poll(self, cursor: int) -> dict:
        """Outputs (answers, alerts, remarks, status events; not tokens) since `cursor`, and the next cursor.
        A cursor older than the kept log starts at the oldest kept output."""
        with self.cond:
            end = self._log_start + len(self._log)
            start = min(max(int(cursor), self._log_start), end)
            return {"cursor": end, "outputs": list(self._log)[start - self._log_start:]}

    def chat(self) -> list[dict]:
        with self.cond:
            return [dict(m) for m in self._chat]

    def alerts(self) -> list[dict]:
        with self.cond:
            return list(self._alerts)

    def has_entries(self) -> bool:
        """Whether anything was written to the chat or the log (with cond held)."""
        return bool(self._chat) or bool(self._log)

    # ---- a session's own entries (with cond held) -------------------------------------------------------
    def started(self, label: str) -> dict:
        """A stream on `label` started: its status event (returned) in the log, a line in the chat."""
        event = {"type": "status", "event": "started", "source": label, "t_s": 0.0}
        self.add_log(event)
        self._chat.append({"role": "assistant", "content": watching_line(label)})
        self.changed()
        return event

    def stopped(self, label: str, t_s: float | None) -> None:
        self.add_log({"type": "status", "event": "stopped", "source": label, "t_s": t_s})
        self.changed()

    def asked(self, stream: Stream, qid: str, question: str, t_s: float) -> None:
        """Question `qid` was asked on `stream` at stream time `t_s`: the question in the chat, and a line below it
        that its answer fills as its tokens arrive."""
        self._chat.append({"role": "user", "content": question.strip()})
        message = {"role": "assistant", "content": pending_line(t_s, [])}
        self._chat.append(message)
        stream.pending[qid] = (message, t_s, [])
        self.changed()

    def add_log(self, obj: dict) -> None:
        if len(self._log) == self._log.maxlen:
            self._log_start += 1
        self._log.append(obj)

    def changed(self) -> None:
        self.version += 1
        self.cond.notify_all()

    # ---- a stream's outputs -----------------------------------------------------------------------------
    def drain_in_background(self, stream: Stream) -> None:
        """Start the stream's drain thread: its outputs into the transcript until `stream.done` is set."""
        stream.thread = threading.Thread(target=self._drain, args=(stream,), name="streamvid-app-outputs",
                                         daemon=True)
        stream.thread.start()

    def drain_rest(self, stream: Stream, join_timeout_s: float) -> None:
        """After `stream.done` was set and its assistant stopped: join the drain thread (for at most
        `join_timeout_s` and two waits of its own), then move in the outputs still queued."""
        if stream.thread is not None:
            stream.thread.join(timeout=join_timeout_s + 2 * DRAIN_WAIT_S)
        try:
            for out in stream.sa.outputs(timeout_s=0.0):
                self.on_output(stream, out)
        except RuntimeError as e:
            self.on_error(stream, e)

    def _drain(self, stream: Stream) -> None:
        """Drain thread: the assistant's outputs into the transcript until the stream is stopped."""
        try:
            while not stream.done.is_set():
                for out in stream.sa.outputs(timeout_s=DRAIN_WAIT_S):
                    self.on_output(stream, out)
        except RuntimeError as e:  # a worker failed: the stream is over, the session is not
            self.on_error(stream, e)

    def on_output(self, stream: Stream, out) -> None:
        """One output of `stream`'s assistant: a token extends its answer's line; anything else goes to the log,
        and answers, alerts, remarks and status events to the chat as well."""
        with self.cond:
            if out.kind == "token":
                pending = stream.pending.get(out.id)
                if pending is not None:
                    message, t_s, pieces = pending
                    pieces.append(out.text)
                    message["content"] = pending_line(t_s, pieces)
            else:
                obj = out.to_json()
                self.add_log(obj)
                if out.kind == "answer":
                    message, _, _ = stream.pending.pop(out.id, (None, 0.0, None))
                    text = answer_line(obj)
                    if message is not None:
                        message["content"] = text
                    else:
                        self._chat.append({"role": "assistant", "content": text})
                    stream.answers[out.id] = obj
                    self.last_ttft_ms = obj.get("ttft_ms")
                elif out.kind == "alert":
                    self._alerts.append(obj)
                    self._chat.append({"role": "assistant", "content": alert_line(obj)})
                elif out.kind == "say":
                    self._chat.append({"role": "assistant", "content": say_line(obj)})
                elif out.kind == "status":
                    self._chat.append({"role": "assistant", "content": status_line(obj)})
            self.changed()

    def on_error(self, stream: Stream, error: BaseException) -> None:
        """`stream`'s worker failed: the stream is closed, the first error kept (and logged, and said in the chat)."""
        log.warning("session %s: stream %s failed: %s", self.key, stream.label, error)
        with self.cond:
            if stream.error is None:
                stream.error = str(error)
                self.add_log({"type": "status", "event": "error", "source": stream.label, "text": str(error),
                              "t_s": round(stream.sa.latest_t_s, 3)})
                self._chat.append({"role": "assistant", "content": error_line(error)})
            stream.closed = True
            self.changed()
