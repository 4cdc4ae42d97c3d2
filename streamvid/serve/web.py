"""What the route modules share: the backend they call, strict JSON, OpenAI-style errors, the API key check, SSE.

A backend is `service.HubService` (one process, one engine) or `ray_app.RayBackend` (an ingress forwarding to the
engine replicas); the routes reach it through `get_backend()`, so the same FastAPI app serves both.
"""

from __future__ import annotations

import hmac
import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import JSONResponse

from streamvid.hub.shown import finite
from streamvid.serve.errors import ServeError, Unauthorized
from streamvid.serve.options import ServeOptions


class Backend(ABC):
    """What the routes call, implemented by service.HubService (one process; its docstrings say what each does) and
    ray_app.RayBackend (an ingress forwarding to the engine replicas): a backend missing one cannot be made. The calls
    on one stream take its id first (STREAM_CALLS, STREAMED): Ray's backend forwards exactly those to the replica
    holding the stream."""

    options: ServeOptions

    @abstractmethod
    async def open(self, source: object, fps: float | None = None, session_dir: str | None = None,
                   resume: bool = False) -> dict: ...
    @abstractmethod
    async def list(self) -> list[dict]: ...
    @abstractmethod
    async def status(self, sid: str) -> dict: ...
    @abstractmethod
    async def close(self, sid: str) -> dict: ...
    @abstractmethod
    async def push(self, sid: str, data: bytes, content_type: str | None, t_s: float | None = None) -> dict: ...
    @abstractmethod
    async def push_audio(self, sid: str, data: bytes, content_type: str | None, rate: int | None = None,
                         t_s: float | None = None) -> dict: ...
    @abstractmethod
    async def spoken_question(self, sid: str, data: bytes, fmt: object) -> str: ...
    @abstractmethod
    async def set_silence(self, sid: str, silence_s: float) -> None: ...
    @abstractmethod
    async def question(self, sid: str, text: object) -> dict: ...
    @abstractmethod
    async def watch(self, sid: str, condition: object, fire: float | None = None,
                    reset: float | None = None) -> dict: ...
    @abstractmethod
    async def watches(self, sid: str) -> list[dict]: ...
    @abstractmethod
    async def unwatch(self, sid: str, wid: str) -> dict: ...
    @abstractmethod
    async def alerts(self, sid: str) -> list[dict]: ...
    @abstractmethod
    async def alert(self, sid: str, alert_id: str) -> dict: ...
    @abstractmethod
    async def alert_snapshot(self, sid: str, alert_id: str) -> bytes: ...
    @abstractmethod
    async def alert_clip(self, sid: str, alert_id: str) -> bytes: ...
    @abstractmethod
    async def frame_jpeg(self, sid: str, t_s: float) -> bytes: ...
    @abstractmethod
    def ask(self, sid: str, text: object, dialogue: list | None = None) -> AsyncIterator[dict]: ...
    @abstractmethod
    def events(self, sid: str, deltas: bool = False) -> AsyncIterator[dict | None]: ...


GetBackend = Callable[[], Backend]
# the Backend's calls on one stream, (sid, *args) -> a value, and those that stream their items
STREAM_CALLS = ("status", "close", "push", "push_audio", "spoken_question", "set_silence", "question", "watch",
                "watches", "unwatch", "alerts", "alert", "alert_snapshot", "alert_clip", "frame_jpeg")
STREAMED = ("ask", "events")


def dumps(obj: Any) -> str:
    """Strict JSON: NaN and infinities become null, never the non-standard literals."""
    return json.dumps(finite(obj), allow_nan=False, ensure_ascii=False)


class StrictJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return dumps(content).encode("utf-8")


def error_response(e: ServeError) -> StrictJSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
    return StrictJSONResponse(e.body(), status_code=e.status, headers=headers)


def check_key(authorization: str | None, options: ServeOptions) -> None:
    """Unauthorized unless `Authorization: Bearer KEY` carries the server's key (constant-time compare); nothing
    to check without a key."""
    if not options.api_key:
        return
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), options.api_key.encode()):
        raise Unauthorized("missing or wrong API key: send the header 'Authorization: Bearer KEY'",
                           code="invalid_api_key")


def event_name(item: dict) -> str:
    """The SSE event an output goes out as: its type, "narration" for remarks ("say"), and source_lost /
    source_back for those status events."""
    kind = item.get("type", "status")
    if kind == "say":
        return "narration"
    if kind == "status" and item.get("event") in ("source_lost", "source_back"):
        return item["event"]
    return kind


def sse(item: dict, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {dumps(item)}\n\n"
