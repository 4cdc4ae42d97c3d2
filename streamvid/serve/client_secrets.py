"""Short-lived client secrets for realtime sessions: `POST /v1/realtime/client_secrets`, with the server's API key,
gives a key a browser (or any client the server's key must not reach) uses as its Bearer for one realtime session.

    POST /v1/realtime/client_secrets  {"expires_after": {"anchor": "created_at", "seconds": 600},
                                       "session": {"type": "realtime", ...}}      (both optional)
      -> {"value": "ek_...", "expires_at": 1767225600, "session": {"type": "realtime", "object":
          "realtime.session", "id", ..., "expires_at"}}                            (OpenAI's shape)

A secret lives `seconds` (10 to 7200; 600 by default), is good for one session (a second upgrade or call with it
is refused), and only for the realtime socket (`GET /v1/realtime`) and a WebRTC call's offer (`POST
/v1/realtime/calls`): on any other `/v1` route it is a wrong key (401).
The session it was made with (checked when it is made, realtime_session.py) is that session from its
session.created on; its `streamvid.stream_id` names a stream to attach to. Secrets live in the server's memory (a restart forgets them).

`SecretDoor` is what lets a secret in: an ASGI middleware outside the front door (front_door.py) that, for the
realtime socket's upgrade and a call's offer only, takes a valid secret's `Authorization` as the server's key (the front door then lets
it pass) and marks the scope with the secret, which the socket takes (`authorize`).
"""

from __future__ import annotations

import hmac
import secrets as tokens
import threading
import time
from collections import OrderedDict

from fastapi import Depends, FastAPI, Request

from streamvid.serve.errors import ServeError, Unauthorized
from streamvid.serve.realtime_session import ParamError, SessionConfig
from streamvid.serve.web import GetBackend, check_key

DEFAULT_S, MIN_S, MAX_S = 600, 10, 7200
MAX_LIVE = 10_000  # secrets kept at once: past this the oldest are forgotten
REALTIME_PATHS = ("/v1/realtime",)
CALLS_PATH = "/v1/realtime/calls"  # a WebRTC call's offer (realtime_calls.py)
SCOPE_KEY = "streamvid.client_secret"


class ClientSecrets:
    """The live secrets: value -> (expires_at, session); thread-safe; `clock` in epoch seconds (for tests)."""

    def __init__(self, clock=time.time, max_live: int = MAX_LIVE):
        self.clock, self.max_live = clock, max_live
        self._live: OrderedDict[str, tuple[float, dict]] = OrderedDict()
        self._lock = threading.Lock()

    def issue(self, seconds: int, session: dict) -> tuple[str, int]:
        value = f"ek_{tokens.token_urlsafe(32)}"
        expires_at = int(self.clock() + seconds)
        with self._lock:
            self._forget_expired()
            self._live[value] = (expires_at, session)
            while len(self._live) > self.max_live:
                self._live.popitem(last=False)
        return value, expires_at

    def valid(self, value: str) -> bool:
        with self._lock:
            found = self._find(value)
            return found is not None and found[1][0] > self.clock()

    def take(self, value: str) -> dict | None:
        """The session of a live secret, which is used up; None for an unknown, used or expired one."""
        with self._lock:
            found = self._find(value)
            if found is None:
                return None
            key, (expires_at, session) = found
            del self._live[key]
            return session if expires_at > self.clock() else None

    def _find(self, value: str):
        given = value.encode()
        for key, entry in self._live.items():
            if hmac.compare_digest(key.encode(), given):
                return key, entry
        return None

    def _forget_expired(self) -> None:
        now = self.clock()
        for key in [k for k, (at, _) in self._live.items() if at <= now]:
            del self._live[key]

    def __len__(self) -> int:
        return len(self._live)


def bearer(authorization: str | None) -> str | None:
    scheme, _, given = (authorization or "").partition(" ")
    return given.strip() if scheme.lower() == "bearer" and given.strip() else None


def authorize(authorization: str | None, scope: dict, options, secrets: ClientSecrets) -> dict | None:
    """A realtime upgrade's credentials: the server's key (None: no session given) or a client secret, used up
    here (its session, {} when it had none); Unauthorized otherwise. Without an API key anyone may connect, and
    a secret given still brings its session."""
    value = scope.get(SCOPE_KEY) or bearer(authorization)
    if value is not None and value.startswith("ek_"):
        session = secrets.take(value)
        if session is not None:
            return session
        if options.api_key:
            raise Unauthorized("the client secret is unknown, expired or already used: create a new one with "
                               "POST /v1/realtime/client_secrets", code="invalid_api_key")
    check_key(authorization, options)
    return None


class SecretDoor:
    """ASGI middleware (outermost): a live client secret on the realtime socket's upgrade passes the front door as
    the server's key; the scope carries the secret for `authorize`. Refuses nothing itself."""

    def __init__(self, app, secrets: ClientSecrets, get_backend: GetBackend):
        self.app, self.secrets, self.get_backend = app, secrets, get_backend

    async def __call__(self, scope, receive, send):
        realtime = (scope["type"] == "websocket" and scope.get("path") in REALTIME_PATHS) or (
            scope["type"] == "http" and scope.get("method") == "POST" and scope.get("path") == CALLS_PATH)
        api_key = self.get_backend().options.api_key if realtime else None
        if api_key:
            headers = list(scope.get("headers", ()))
            for i, (name, raw) in enumerate(headers):
                if name.lower() == b"authorization":
                    value = bearer(raw.decode("latin-1"))
                    if value is not None and value.startswith("ek_") and self.secrets.valid(value):
                        headers[i] = (b"authorization", f"Bearer {api_key}".encode("latin-1"))
                        scope = {**scope, "headers": headers, SCOPE_KEY: value}
                    break
        return await self.app(scope, receive, send)


def add_routes(app: FastAPI, get_backend: GetBackend, secrets: ClientSecrets) -> None:
    async def authorized(request: Request) -> None:
        check_key(request.headers.get("authorization"), get_backend().options)

    @app.post("/v1/realtime/client_secrets", dependencies=[Depends(authorized)])
    async def create_client_secret(request: Request) -> dict:
        options = get_backend().options
        try:
            body = await request.json() if await request.body() else {}
        except ValueError:
            raise ServeError("the body is not valid JSON", 400, "invalid_request_error") from None
        try:
            seconds, session = _request(body, options.model_id)
        except ParamError as e:
            raise ServeError(e.message, 400, "invalid_request_error", e.code) from None
        value, expires_at = secrets.issue(seconds, session)
        shown = SessionConfig(options.model_id, (session.get("streamvid") or {}).get("stream_id"), None, True)
        shown.update(session)
        return {"value": value, "expires_at": expires_at,
                "session": {**shown.to_json(), "expires_at": expires_at}}


def _request(body: object, model_id: str) -> tuple[int, dict]:
    if not isinstance(body, dict):
        raise ParamError("the body must be a JSON object", None, "invalid_type")
    for key in body:
        if key not in ("expires_after", "session"):
            raise ParamError(f"unknown parameter: {str(key)[:40]!r}", str(key)[:40], "unknown_parameter")
    after = body.get("expires_after") or {}
    if not isinstance(after, dict) or after.get("anchor", "created_at") != "created_at":
        raise ParamError('expires_after must be {"anchor": "created_at", "seconds": N}', "expires_after.anchor")
    seconds = after.get("seconds", DEFAULT_S)
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not MIN_S <= seconds <= MAX_S:
        raise ParamError(f"expires_after.seconds must be a whole number from {MIN_S} to {MAX_S}",
                         "expires_after.seconds")
    session = body.get("session") or {}
    if not isinstance(session, dict):
        raise ParamError("session must be an object", "session", "invalid_type")
    ext = session.get("streamvid")
    stream_id = ext.get("stream_id") if isinstance(ext, dict) else None
    if stream_id is not None and not isinstance(stream_id, str):
        raise ParamError("session.streamvid.stream_id must be a stream id", "session.streamvid.stream_id")
    SessionConfig(model_id, stream_id, None, True).update(session)  # refused now rather than at connect
    return seconds, session
