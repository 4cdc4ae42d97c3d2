"""A page session's questions and standing conditions: asked on its hub stream, answered into its chat, and the
conditions watched again on every fresh stream. A part of `streamvid_app.sessions.Session` (its thread contract and
fields), kept here to keep that module short."""

from __future__ import annotations

import time
from collections.abc import Iterator

from streamvid.errors import HubError, NotFound, Refused
from streamvid_app.transcript import Stream


class SessionAsking:
    """`ask`, `wait_answer`, `follow`, `watch`, `unwatch` and `triggers` of `Session`, which provides `hub`,
    `voice`, `touch`, `version` and the fields used."""

    # ---- questions --------------------------------------------------------------------------------------
    def ask(self, question: str) -> str:
        """Queue a question about the stream so far; returns its id. The answer streams into the chat."""
        self.touch()
        with self._cond:
            stream = self._running()
            t_s = stream.sa.latest_t_s
            if self.voice is not None:  # a new question: what is being said stops, its answer is said instead
                self.voice.interrupt()
            qid = self.hub.ask(stream.sid, question, t_s=t_s)
            if self.voice is not None:
                self.voice.asked(qid)
            self._asked[qid] = stream
            self._transcript.asked(stream, qid, question, t_s)
        return qid

    def wait_answer(self, qid: str, timeout_s: float) -> dict:
        """Block until the answer to `qid` (asked on the current stream) is complete; returns it."""
        with self._cond:
            stream = self._asked_on(qid)
            if not self._cond.wait_for(lambda: qid in stream.answers or stream.closed, timeout=timeout_s):
                raise HubError(f"no answer to {qid} within {timeout_s:g} s")
            if qid not in stream.answers:
                raise HubError(stream.error or "the stream stopped before the answer was complete")
            return stream.answers[qid]

    def follow(self, qid: str, timeout_s: float) -> Iterator[None]:
        """Yield after every change of the session until the answer to `qid` is complete (for a page that
        re-renders the chat as tokens arrive); ends after `timeout_s` at the latest."""
        with self._cond:
            stream = self._asked_on(qid)
        deadline = time.monotonic() + timeout_s
        seen = -1
        while True:
            with self._cond:
                self._cond.wait_for(lambda v=seen: self.version != v, timeout=max(0.0, deadline - time.monotonic()))
                seen = self.version
                done = qid in stream.answers or stream.closed
            yield
            if done or time.monotonic() >= deadline:
                return

    def _asked_on(self, qid: str) -> Stream:
        """The stream question `qid` was last asked on (with _cond held)."""
        if qid not in self._asked:
            raise NotFound(f"no question {qid!r} was asked in this session")
        return self._asked[qid]

    def watch(self, condition: str, **thresholds) -> str:
        """Add a standing "tell me when ..." condition; returns its trigger id. `thresholds` (fire, reset) override
        the engine's firing rule. It stays with the session: a fresh stream watches it again (under a new id)."""
        self.touch()
        condition = condition.strip()
        if not condition:
            raise Refused("empty condition")
        with self._lock:
            self._check_open()
            with self._cond:
                stream = self._stream
            if stream is not None:
                tid = self.hub.watch(stream.sid, condition, **thresholds)["id"]
            else:  # no stream yet: an assistant that the next start() will run
                if self._prepared is None:
                    self._prepared = self._new_assistant()
                try:
                    tid = self._prepared.watch(condition, **thresholds)
                except ValueError as e:
                    raise Refused(str(e)) from None
            with self._cond:
                self._conditions[tid] = (condition, thresholds)
                self._transcript.changed()
        return tid

    def unwatch(self, trigger_id: str) -> bool:
        """Remove a standing condition; False if there is none with this id."""
        self.touch()
        with self._lock:
            with self._cond:
                known = self._conditions.pop(trigger_id, None) is not None
                sa = self._stream.sa if self._stream is not None else self._prepared
                self._transcript.changed()
            if sa is not None:
                return bool(sa.unwatch(trigger_id)) or known
        return known

    def triggers(self) -> list[dict]:
        """The standing conditions: the assistant's view of them when one runs, else the remembered ones."""
        with self._cond:
            sa = self._stream.sa if self._stream is not None else self._prepared
            remembered = [{"trigger_id": t, "condition": c, **th} for t, (c, th) in self._conditions.items()]
        if sa is not None:
            return list(sa.triggers())
        return remembered
