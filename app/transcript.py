"""A session's transcript: the chat (answers streamed into it token by token, alerts, remarks, status lines), the
alerts, and the log of outputs that `poll` reads, written from its stream's outputs as the hub delivers them.

    transcript = Transcript("tab-key", log_size=1000)
    stream = Stream(sa, target, "shapes_7", webcam=False)
    hub.open(target, assistant=sa, listener=lambda item: transcript.on_item(stream, item))
    with transcript.cond:
        transcript.started("shapes_7")                  # "*Watching shapes_7.*", a "started" status in the log
        transcript.asked(stream, qid, question, t_s)    # the question, then its answer's line filled token by token
    transcript.poll(0)                                  # {"cursor": n, "outputs": [answers, alerts, ...]}

The items are the JSON objects the hub's fan-out gives every reader (streamvid.hub.fanout): `on_item` runs on the
stream's fan-out thread ("streamvid-hub-fanout"). What the chat lines say is in chat.py.

Thread contract. `cond` (a re-entrant Condition) guards everything here and the fields of every `Stream`. Methods
documented "with cond held" expect the caller to hold it (so that a session can change its own state in the same
step); the others take it. Every change bumps `version` and notifies the waiters on `cond`.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque

from streamvid.assistant.assistant import StreamingAssistant
from streamvid.hub.policy import Target
from streamvid_app.chat import alert_line, answer_line, error_line, pending_line, say_line, status_line, watching_line

log = logging.getLogger(__name__)

CHAT_MESSAGES = 200  # chat messages a session keeps
ALERTS_KEPT = 200
HEARD_KEPT = 200  # utterances heard in the stream's sound that a session keeps (captions, timeline)


class Stream:
    """One assistant on one source, from a session's `start` to its `stop`: the hub stream `sid`. Fields below
    `started_s` are guarded by the transcript's `cond`."""

    def __init__(self, sa: StreamingAssistant, target: Target, label: str, webcam: bool):
        self.sa, self.target, self.label, self.webcam = sa, target, label, webcam
        self.sid: str | None = None  # its id on the hub, once opened
        self.started_s = time.monotonic()
        # guarded by the transcript's cond
        self.closed = False
        self.stopped = False  # its source was closed by the user (Stop): questions still work
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
        self._heard: deque[dict] = deque(maxlen=HEARD_KEPT)

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

    def heard(self) -> list[dict]:
        """The utterances heard in the stream's sound ({"type": "transcript", "t_s", "t_end_s", "text"})."""
        with self.cond:
            return list(self._heard)

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

    # ---- a stream's outputs ----------------------------------------------------------------------------
    def on_item(self, stream: Stream, item: dict) -> None:
        """One output of `stream` (on its fan-out thread): an answer.delta piece extends its answer's line; an error
        ends the stream; the hub's "closed" marks it closed; anything else goes to the log, and answers, alerts,
        remarks and status events to the chat as well."""
        kind, event = item.get("type"), item.get("event")
        if kind == "status" and event == "error":
            self.on_error(stream, item.get("message") or "the stream failed")
            return
        with self.cond:
            if kind == "answer.delta":
                pending = stream.pending.get(item.get("id"))
                if pending is not None:
                    message, t_s, pieces = pending
                    pieces.append(item.get("text", ""))
                    message["content"] = pending_line(t_s, pieces)
            elif kind == "status" and event in ("ended", "closed"):  # the hub's own: the chat says it otherwise
                stream.closed = stream.closed or event == "closed"
            else:
                self.add_log(item)
                if kind == "answer":
                    message, _, _ = stream.pending.pop(item.get("id"), (None, 0.0, None))
                    text = answer_line(item)
                    if message is not None:
                        message["content"] = text
                    else:  # asked elsewhere (by voice, the API): the question first
                        if item.get("question"):
                            self._chat.append({"role": "user", "content": str(item["question"])})
                        self._chat.append({"role": "assistant", "content": text})
                    stream.answers[item.get("id")] = item
                    self.last_ttft_ms = item.get("ttft_ms")
                elif kind == "alert":
                    self._alerts.append(item)
                    self._chat.append({"role": "assistant", "content": alert_line(item)})
                elif kind == "transcript":
                    self._heard.append(item)
                elif kind == "say":
                    self._chat.append({"role": "assistant", "content": say_line(item)})
                elif kind == "status":
                    self._chat.append({"role": "assistant", "content": status_line(item)})
            self.changed()

    def on_error(self, stream: Stream, error: str) -> None:
        """`stream`'s work failed: the stream is closed, the first error kept (and logged, and said in the chat)."""
        log.warning("session %s: stream %s failed: %s", self.key, stream.label, error)
        with self.cond:
            if stream.error is None:
                stream.error = str(error)
                self.add_log({"type": "status", "event": "error", "source": stream.label, "text": str(error),
                              "t_s": round(stream.sa.latest_t_s, 3)})
                self._chat.append({"role": "assistant", "content": error_line(error)})
            stream.closed = True
            self.changed()
