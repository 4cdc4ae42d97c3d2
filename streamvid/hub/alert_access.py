"""The evidence behind a hub stream's alerts, for every client: the frame each alert fired on, a clip around it, and
the recent frames an answer was given from (the library's AlertMedia, streamvid/media/alert_media.py, of each stream).

    keep(sa, session)                           # at open: RAM, or <session_dir>/alerts/ for a stream with a folder
    hub.alerts(sid)                             # [{"alert_id": "a0", "t_s", "snapshot": "ready", "clip": ...}, ...]
    hub.alert_snapshot(sid, "a0")               # JPEG bytes of the frame it fired on, at the source's size
    hub.alert_clip(sid, "a0")                   # MP4 bytes (H.264); NotFound while it records or encodes
    hub.alert_thumbnail(sid, "a0", 160)         # a small JPEG of the snapshot
    hub.frame_jpeg(sid, 12.5)                   # a recent frame while the stream's ring holds it
    annotate(s, obj)                            # an alert or answer object with the transport's URLs (`Hub.links`)

Every hub stream keeps alert media while `HubOptions.alert_media` is on (the default; the engine's
--alert-ring-mb, --alert-media-mb, --alert-media-before-s and --alert-media-after-s bound it). In RAM the media go
with the stream when it closes; in a session folder they stay there, and a resumed session lists them again. A
closed stream is not found, so neither are its media. What is not there (an unknown id, an id of another stream, a
snapshot without a frame, a clip still recording, a frame that left the ring) is NotFound with one line saying why.

Thread contract: any thread (AlertMedia's own lock guards the media).
"""

from __future__ import annotations

import math

from streamvid.errors import NotFound, Refused
from streamvid.hub.stream import HubStream
from streamvid.media.alert_media import UnknownAlert

ALERTS_FOLDER = "alerts"  # inside a stream's session folder
SNAPSHOT_WAIT_S = 5.0  # a snapshot being made (a JPEG, on the stream's media thread) is waited for this long
MAX_THUMBNAIL_PX = 1024


def keep(sa, session, on: bool = True) -> None:
    """Keep the alert media of assistant `sa` (not started yet): in its session folder when it has one."""
    if on:
        sa.keep_alert_media(session.folder / ALERTS_FOLDER if session is not None else None)


def annotate(s: HubStream, obj: dict) -> dict:
    """`obj` (an output's JSON) with the URLs of its media (`s.links`): an alert's snapshot and clip, an answer's
    newest evidence frame; as it is when the stream keeps no media or the hub has no links."""
    if s.links is None or getattr(s.sa, "alert_media", None) is None:
        return obj
    kind = obj.get("type")
    if kind == "alert" and obj.get("alert_id"):
        return {**obj, **s.links(s.id, obj)}
    if kind == "answer" and (t := newest_evidence_frame(obj.get("evidence_t_s"), s.fps)) is not None:
        return {**obj, **s.links(s.id, {"frame_t_s": t})}
    return obj


def newest_evidence_frame(spans, fps: float) -> float | None:
    """The stream time of the newest frame of an answer's evidence spans ([[start, end], ...], each end one frame
    period past its last frame), or None without spans."""
    ends = [(a, b) for a, b in spans or () if isinstance(a, int | float) and isinstance(b, int | float)]
    if not ends:
        return None
    start, end = max(ends, key=lambda span: span[1])
    return round(max(start, end - 1.0 / fps), 3)


class AlertAccess:
    """The Hub's methods for alert media (a mixin: `get` is the Hub's)."""

    def alerts(self, sid: str) -> list[dict]:
        """Every alert the stream keeps, oldest first (AlertMedia.list), each with the transport's URLs."""
        s = self.get(sid)
        return [_listed(s, rec) for rec in _media(s).list()]

    def alert(self, sid: str, alert_id: object) -> dict:
        s = self.get(sid)
        return _listed(s, _known(s, alert_id, lambda m: m.get(alert_id)))

    def alert_snapshot(self, sid: str, alert_id: object, timeout_s: float = SNAPSHOT_WAIT_S) -> bytes:
        """The JPEG of the frame the alert fired on; NotFound when there is none (yet)."""
        s = self.get(sid)
        return _ready(s, alert_id, "snapshot", _known(s, alert_id, lambda m: m.snapshot(alert_id, timeout_s)))

    def alert_clip(self, sid: str, alert_id: object) -> bytes:
        """The MP4 (H.264) of the seconds around the alert; NotFound until its end has arrived and it is encoded."""
        s = self.get(sid)
        return _ready(s, alert_id, "clip", _known(s, alert_id, lambda m: m.clip(alert_id)))

    def alert_thumbnail(self, sid: str, alert_id: object, max_px: int = 160,
                        timeout_s: float = SNAPSHOT_WAIT_S) -> bytes:
        if not isinstance(max_px, int) or isinstance(max_px, bool) or not 16 <= max_px <= MAX_THUMBNAIL_PX:
            raise Refused(f"a thumbnail's size must be 16..{MAX_THUMBNAIL_PX} px, got {str(max_px)[:20]}")
        s = self.get(sid)
        data = _known(s, alert_id, lambda m: m.thumbnail(alert_id, max_px, timeout_s))
        return _ready(s, alert_id, "snapshot", data)

    def frame_jpeg(self, sid: str, t_s: object) -> bytes:
        """The stream's frame at stream time `t_s` (within half a frame period) as a JPEG at the source's size,
        while its ring of recent frames holds it; NotFound after."""
        if isinstance(t_s, bool) or not isinstance(t_s, int | float) or not math.isfinite(t_s) or t_s < 0:
            raise Refused(f"a frame's time must be a number of seconds >= 0, got {str(t_s)[:40]!r}")
        s = self.get(sid)
        data = _media(s).frame_jpeg(float(t_s))
        if data is None:
            raise NotFound(f"stream {sid} holds no frame at {t_s:g} s: it keeps only its last "
                           f"{_media(s).ring.seconds:g} s of frames")
        return data


def _media(s: HubStream):
    media = getattr(s.sa, "alert_media", None)
    if media is None:
        raise NotFound(f"stream {s.id} keeps no alert media")
    return media


def _known(s: HubStream, alert_id: object, fn):
    try:
        return fn(_media(s))
    except UnknownAlert:
        raise NotFound(f"no alert {str(alert_id)[:40]!r} on stream {s.id}") from None


def _ready(s: HubStream, alert_id: object, kind: str, data: bytes | None) -> bytes:
    if data is not None:
        return data
    state = _media(s).get(alert_id)[kind]
    why = {"pending": "is still being made", "recording": "is still recording: its end has not arrived yet",
           "encoding": "is still being encoded", "missing": "was not made (its frames were not held)",
           "failed": "could not be written", "dropped": "was dropped to keep the stream's media within "
                                                        "--alert-media-mb"}.get(state, f"is {state}")
    raise NotFound(f"the {kind} of alert {alert_id} on stream {s.id} {why}")


def _listed(s: HubStream, rec: dict) -> dict:
    rec = {"object": "alert", **rec}
    return {**rec, **s.links(s.id, rec)} if s.links is not None else rec
