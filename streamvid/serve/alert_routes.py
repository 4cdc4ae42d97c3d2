"""The evidence behind alerts over HTTP: each alert's snapshot and clip, the list of a stream's alerts, and recent
frames an answer cites (the hub's alert_access.py), under the stream's own API key.

    GET /v1/streams/{id}/alerts                           {"object": "list", "data": [{"object": "alert",
                                                          "alert_id", "t_s", "snapshot", "clip", ..., URLs}]}
    GET /v1/streams/{id}/alerts/{alert_id}                one of them
    GET /v1/streams/{id}/alerts/{alert_id}/snapshot.jpg   image/jpeg: the frame the alert fired on, source size
    GET /v1/streams/{id}/alerts/{alert_id}/clip.mp4       video/mp4 (H.264): 404 until the clip's end has arrived
                                                          and it is encoded
    GET /v1/streams/{id}/frames/at/{t_s}.jpg              image/jpeg: the frame at stream time t_s while the
                                                          stream's ring of recent frames holds it (404 after)

`links` gives the URLs an alert ("snapshot_url", "clip_url") or an answer ("evidence_frame_url") carries in events,
the realtime socket and webhooks: paths on this server, the same under Ray (the hub of each replica makes them).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import Response

from streamvid.errors import Refused
from streamvid.serve.web import GetBackend

MAX_T_CHARS = 32


def links(sid: str, obj: dict) -> dict:
    """The URLs of an alert's media (`obj` has "alert_id") or of a frame (`obj` has "frame_t_s")."""
    base = f"/v1/streams/{sid}"
    if obj.get("alert_id"):
        aid = obj["alert_id"]
        return {"snapshot_url": f"{base}/alerts/{aid}/snapshot.jpg", "clip_url": f"{base}/alerts/{aid}/clip.mp4"}
    if isinstance(obj.get("frame_t_s"), int | float):
        return {"evidence_frame_url": f"{base}/frames/at/{seconds(obj['frame_t_s'])}.jpg"}
    return {}


def seconds(t_s: float) -> str:
    """A stream time in a URL: at most 3 decimals, no trailing zeros ("12.5", "3")."""
    return f"{round(float(t_s), 3):.3f}".rstrip("0").rstrip(".")


def add_routes(app: FastAPI, get_backend: GetBackend, auth: list) -> None:
    @app.get("/v1/streams/{sid}/alerts", dependencies=auth)
    async def list_alerts(sid: str) -> dict:
        return {"object": "list", "data": await get_backend().alerts(sid)}

    @app.get("/v1/streams/{sid}/alerts/{alert_id}", dependencies=auth)
    async def get_alert(sid: str, alert_id: str) -> dict:
        return await get_backend().alert(sid, alert_id)

    @app.get("/v1/streams/{sid}/alerts/{alert_id}/snapshot.jpg", dependencies=auth, response_class=Response,
             responses={200: {"content": {"image/jpeg": {}}}})
    async def alert_snapshot(sid: str, alert_id: str) -> Response:
        return _bytes(await get_backend().alert_snapshot(sid, alert_id), "image/jpeg")

    @app.get("/v1/streams/{sid}/alerts/{alert_id}/clip.mp4", dependencies=auth, response_class=Response,
             responses={200: {"content": {"video/mp4": {}}}})
    async def alert_clip(sid: str, alert_id: str) -> Response:
        return _bytes(await get_backend().alert_clip(sid, alert_id), "video/mp4")

    @app.get("/v1/streams/{sid}/frames/at/{t_s}.jpg", dependencies=auth, response_class=Response,
             responses={200: {"content": {"image/jpeg": {}}}})
    async def frame_at(sid: str, t_s: str) -> Response:
        return _bytes(await get_backend().frame_jpeg(sid, _time(t_s)), "image/jpeg")


def _time(text: str) -> float:
    try:
        if len(text) > MAX_T_CHARS:
            raise ValueError
        return float(text)
    except ValueError:
        raise Refused(f"a frame's time must be a number of seconds, got {text[:MAX_T_CHARS]!r}") from None


def _bytes(data: bytes, media_type: str) -> Response:
    return Response(bytes(data), media_type=media_type, headers={"Cache-Control": "private, max-age=3600"})
