"""The FastAPI app of `streamvid serve`: the stream routes here, the OpenAI-compatible ones in openai_api.py, the
realtime socket in realtime.py. The same app runs in one process (uvicorn, server.py) and as the ingress of a Ray
Serve application (ray_app.py); only the backend behind `get_backend()` differs.

    POST   /v1/streams                        {"source", "fps", "session_dir", "resume"} -> 201 {"id", "object": "stream",
                                              "source", "created"}
    GET    /v1/streams                        {"object": "list", "data": [...]}
    GET    /v1/streams/{id}                   frames in/dropped, clock, window, memory (the stats line)
    DELETE /v1/streams/{id}                   stops it: the final stats
    POST   /v1/streams/{id}/frames[?t_s=]     PNG or JPEG body -> {"frames_in", "frames_dropped", "t_s"}
    POST   /v1/streams/{id}/audio[?rate=&t_s=]  WAV, or raw PCM16 (audio/pcm) at ?rate= -> {"t_s", "t_end_s",
                                              "utterances"}; what is heard comes as "transcript" events; a body
                                              of at most 10 minutes and the image cap (32 MB), 429 past the
                                              stream's sound budget (hub/sound_budget.py)
    POST   /v1/streams/{id}/watches           {"condition"} -> {"id"}; GET lists them; DELETE .../watches/{wid}
    GET    /v1/streams/{id}/events            server-sent events: one per output (event: <type>, data: <JSON>)
    GET    /v1/streams/{id}/alerts[/{alert_id}[/snapshot.jpg|/clip.mp4]], /v1/streams/{id}/frames/at/{t_s}.jpg:
                                              the evidence behind alerts and answers (alert_routes.py)

Errors are `{"error": {"message", "type", "code"}}` with a one-line message: 400 (bad value or JSON), 401 (API
key), 403 (a session_dir outside the allowed folders), 404 (unknown stream, watch, model or saved session), 409
(frames or sound to a stream that is not "push", a session_dir in use or already holding a session), 413 (body too
large), 415 (not PNG/JPEG, not WAV/PCM16), 422 (a body of the wrong shape), 429 (engine full, questions queue full,
sound past a stream's budget), 503 (the stream's replica died, or the stream failed), 504 (no answer in time). JSON
never holds NaN or Infinity.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from collections.abc import Callable

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt
from starlette.exceptions import HTTPException as StarletteHTTPException

import streamvid.serve.alert_routes as alert_routes
import streamvid.serve.openai_api as openai_api
import streamvid.serve.realtime as realtime
import streamvid.serve.speech_route as speech_route
from streamvid.errors import HubError, Refused, TooLarge
from streamvid.hub.images import media_type
from streamvid.hub.sound import media_type as sound_media_type
from streamvid.serve.errors import ServeError, wire_error
from streamvid.serve.front_door import Door, FrontDoor
from streamvid.serve.web import GetBackend, StrictJSONResponse, check_key, error_response, event_name, sse


class StreamCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str | None = Field(None, description='"push", a demo clip name (shapes_7), a URL, or a file under an '
                                                 '--allow-dir (required, except with "resume": then "push")')
    fps: StrictFloat | StrictInt | None = Field(None, description="frames sampled per second (default: the server's "
                                                                   "--fps; at least 0.01)")
    session_dir: str | None = Field(None, description="a folder inside an --allow-dir where the stream is saved "
                                                      "(periodically and when it closes)")
    resume: StrictBool = Field(False, description="continue the session saved in session_dir (memory, dialogue, "
                                                  "clock)")



class WatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    condition: str = Field(description='what to watch for, e.g. "a red circle appears"')
    fire: float | None = Field(None, description="p(yes) at which it fires (default: the server's)")
    reset: float | None = Field(None, description="p(yes) below which it re-arms")


def create_app(get_backend: GetBackend, lifespan: Callable[[FastAPI], AbstractAsyncContextManager] | None = None,
               door: Door | Callable[[], Door] | None = None) -> FastAPI:
    """The app; `door`: what passes its front door (front_door.py: Host, Origin, the API key before any body,
    body sizes and read times), with CORS answers for its allowed other origins (a Door given whole); or a function
    that gives the Door once the options are known (under Ray Serve, without CORS answers)."""
    app = FastAPI(title="streamvid serve", lifespan=lifespan, default_response_class=StrictJSONResponse,
                  description="Streaming video-LLM streams over HTTP: OpenAI-compatible chat about live video, "
                              "server-sent events, a realtime WebSocket. See docs/api.md.")
    _add_error_handlers(app)
    if door is not None:
        if isinstance(door, Door) and door.origins:
            app.add_middleware(CORSMiddleware, allow_origins=list(door.origins), allow_methods=["*"],
                               allow_headers=["Authorization", "Content-Type"])
        app.add_middleware(FrontDoor, door=door)  # added last: the outermost, before CORS and every route

    async def authorized(request: Request) -> None:
        check_key(request.headers.get("authorization"), get_backend().options)

    auth = [Depends(authorized)]

    @app.post("/v1/streams", status_code=201, dependencies=auth)
    async def open_stream(body: StreamCreate) -> dict:
        if body.source is None and not body.resume:
            raise ServeError('source: Field required ("push", a demo clip name, a URL or an allowed file)', 422,
                             "invalid_request_error")
        source = "push" if body.source is None else body.source
        return await get_backend().open(source, body.fps, body.session_dir, body.resume)

    @app.get("/v1/streams", dependencies=auth)
    async def list_streams() -> dict:
        return {"object": "list", "data": await get_backend().list()}

    @app.get("/v1/streams/{sid}", dependencies=auth)
    async def stream_status(sid: str) -> dict:
        return await get_backend().status(sid)

    @app.delete("/v1/streams/{sid}", dependencies=auth)
    async def close_stream(sid: str) -> dict:
        return await get_backend().close(sid)

    @app.post("/v1/streams/{sid}/frames", dependencies=auth,
              openapi_extra={"requestBody": {"required": True, "content": {
                  "image/png": {"schema": {"type": "string", "format": "binary"}},
                  "image/jpeg": {"schema": {"type": "string", "format": "binary"}}}}})
    async def push_frame(sid: str, request: Request,
                         t_s: float | None = Query(None, description="stream time of the frame (default: "
                                                   "the last frame's plus the wall time since)")) -> dict:
        backend = get_backend()
        content_type = request.headers.get("content-type")
        media_type(content_type)  # 415 before the body is read
        data = await _body(request, backend.options, "image", backend.options.max_body_mb)
        return await backend.push(sid, data, content_type, t_s)

    @app.post("/v1/streams/{sid}/audio", dependencies=auth,
              openapi_extra={"requestBody": {"required": True, "content": {
                  "audio/wav": {"schema": {"type": "string", "format": "binary"}},
                  "audio/pcm": {"schema": {"type": "string", "format": "binary"}}}}})
    async def push_audio(sid: str, request: Request,
                         rate: int | None = Query(None, description="sample rate of a raw PCM16 body (audio/pcm)"),
                         t_s: float | None = Query(None, description="stream time the sound starts at (default: "
                                                   "where the last pushed sound ended)")) -> dict:
        backend = get_backend()
        content_type = request.headers.get("content-type")
        sound_media_type(content_type)  # 415 before the body is read
        data = await _body(request, backend.options, "audio", backend.options.max_body_mb)  # not --max-json-mb
        return await backend.push_audio(sid, data, content_type, rate, t_s)

    @app.post("/v1/streams/{sid}/watches", dependencies=auth)
    async def add_watch(sid: str, body: WatchCreate) -> dict:
        return await get_backend().watch(sid, body.condition, body.fire, body.reset)

    @app.get("/v1/streams/{sid}/watches", dependencies=auth)
    async def list_watches(sid: str) -> dict:
        return {"object": "list", "data": await get_backend().watches(sid)}

    @app.delete("/v1/streams/{sid}/watches/{wid}", dependencies=auth)
    async def remove_watch(sid: str, wid: str) -> dict:
        return await get_backend().unwatch(sid, wid)

    @app.get("/v1/streams/{sid}/events", dependencies=auth, response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}}}})
    async def events(sid: str) -> StreamingResponse:
        """Server-sent events, one per output of the stream: `event: alert|answer|narration|transcript|
        voice_activity|status|source_lost|source_back` and `data:` the JSON object `streamvid run` prints; a
        comment line while nothing happens."""
        items = get_backend().events(sid)
        try:
            await anext(items)  # subscribed: an unknown stream is a 404 here, before the response starts
        except BaseException:
            await items.aclose()
            raise

        async def body():
            try:
                yield ": subscribed\n\n"
                async for item in items:
                    yield ": keep-alive\n\n" if item is None else sse(item, event_name(item))
            except (ServeError, HubError) as e:  # the stream's replica went away mid-stream
                yield sse(wire_error(e).body(), "error")
            finally:
                await items.aclose()

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    alert_routes.add_routes(app, get_backend, auth)
    openai_api.add_routes(app, get_backend, auth)
    speech_route.add_routes(app, get_backend, auth)
    realtime.add_routes(app, get_backend)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServeError)
    @app.exception_handler(HubError)
    async def serve_error(request: Request, e: Exception):
        return error_response(wire_error(e))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, e: RequestValidationError):
        errors = e.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            return error_response(wire_error(Refused(f"the body is not valid JSON ({first.get('msg', '')})")))
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return error_response(ServeError(f"{where}: {first.get('msg', 'invalid')}{more}", 422,
                                         "invalid_request_error"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException):
        kind = {404: "not_found_error", 405: "invalid_request_error"}.get(e.status_code, "invalid_request_error")
        return error_response(ServeError(str(e.detail), e.status_code, kind))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception):
        return error_response(wire_error(e))


async def _body(request: Request, options, what: str, limit_mb: float) -> bytes:
    """A binary body, each part within the read timeout (as the front door reads JSON bodies), at most `limit_mb`
    (413 from the declared length, before reading, or once more has come)."""
    limit = int(limit_mb * 2**20)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"the {what} body is {int(declared) / 2**20:.1f} MB, above the {limit_mb:g} MB limit")
    data = bytearray()
    parts = request.stream()
    while True:
        try:
            chunk = await asyncio.wait_for(anext(parts), options.request_timeout_s)
        except StopAsyncIteration:
            return bytes(data)
        except TimeoutError:
            raise ServeError(f"the {what} body did not arrive within {options.request_timeout_s:g} s", 408,
                             "invalid_request_error") from None
        data += chunk
        if len(data) > limit:
            raise TooLarge(f"the {what} body is above the {limit_mb:g} MB limit")
