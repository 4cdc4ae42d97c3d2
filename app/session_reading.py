"""What a page session shows: the outputs since a cursor, its stats (the keys of `streamvid run`'s stats line), the
chat, the alerts, what was heard and the latest frame. A part of `streamvid_app.sessions.Session` (its thread
contract and fields), kept here to keep that module short."""

from __future__ import annotations

import time

from streamvid.errors import NotFound
from streamvid.types import Frame
from streamvid_app.chat import model_name
from streamvid_app.transcript import Stream


class SessionReading:
    """`poll`, `status`, `chat`, `alerts`, `heard` and `latest_frame` of `Session`, which provides `hub`, `config`,
    `adapter`, `touch` and the fields used."""

    def poll(self, cursor: int) -> dict:
        """Outputs (answers, alerts, remarks, status events; not tokens) since `cursor`, and the next cursor.
        A cursor older than the kept log starts at the oldest kept output."""
        self.touch()
        return self._transcript.poll(cursor)

    def status(self) -> dict:
        """The keys of `streamvid run`'s stats line for the current (or last) stream, and where it stands."""
        with self._cond:
            stream = self._stream
            if stream is None:
                last = self._last_stats or {}
                return {**last, **self._base(), "narrate": self.narrate, "running": False, "can_ask": False,
                        "source": last.get("source")}
        try:
            return self._describe(stream, self.hub.status(stream.sid, touch=False))
        except NotFound:  # closed by the hub (its shutdown)
            return self._describe(stream, {**stream.sa.stats(), "t_s": round(stream.sa.latest_t_s, 3),
                                           "running": False, "ended": stream.sa.ended})

    def _base(self) -> dict:
        return {"type": "stats", "model": model_name(self.config.model), "device": str(self.adapter.device),
                "last_ttft_ms": self._transcript.last_ttft_ms}

    def _describe(self, stream: Stream, hub_status: dict) -> dict:
        """The page's stats of `stream`: the hub's status with the page's own keys."""
        with self._cond:
            error = stream.error
        return {**self._base(), **hub_status, "narrate": stream.sa.config.narration.on,
                "wall_s": round(time.monotonic() - stream.started_s, 2), "source": stream.label,
                "running": bool(hub_status.get("running")) and error is None and not stream.stopped,
                "stopped": stream.stopped, "can_ask": error is None and hub_status.get("error") is None,
                "error": error or hub_status.get("error")}

    def chat(self) -> list[dict]:
        return self._transcript.chat()

    def alerts(self) -> list[dict]:
        return self._transcript.alerts()

    def heard(self) -> list[dict]:
        return self._transcript.heard()

    def latest_frame(self) -> Frame | None:
        with self._cond:
            stream = self._stream
        try:
            return self.hub.latest_frame(stream.sid) if stream is not None else None
        except NotFound:
            return None
