"""The front door of `streamvid serve`: what every request passes before a route reads it.

    app = FrontDoor(app, Door(api_key=..., hosts=..., origins=..., max_body_mb=1.0))

In order, for HTTP requests and WebSocket upgrades alike:
1. Host: a request whose `Host` header names neither the address the server is bound to (the loopback names for a
   loopback bind) nor an `--allowed-host` is refused (421): a page on another site that points its own name at
   127.0.0.1 (DNS rebinding) cannot drive the API;
2. Origin: a browser request or socket upgrade from another origin than the server's own (scheme, host and port of
   the request) or a `--cors-origin` is refused (403);
3. the API key, for `/v1` routes: checked before any body is read (401); an address that keeps sending wrong keys
   has its wrong keys answered 429 with `Retry-After` until its failures age out (`Throttle`); so are the failed
   logins to the page (`serve --ui`) of one whose logins keep failing. The throttle holds failures only: the right
   key, or a right password, is let in from a throttled address too (behind a proxy or on loopback every client
   shares one address, and one client's wrong key must not lock the others out); what keeps a key from being
   guessed is its length (at least 16 characters off loopback: server.check_bind);
4. bodies: every `/v1` body but the image of a frame and the sound of `/audio` (their routes read them, up to
   `max_body_mb`) is read here, at most `--max-json-mb` (413 past it, from its
   Content-Length before reading when it says), each read within `request_timeout_s` (408), then handed on; an
   address refused a body more than PACE_AFTER times a second has its next body refusals held a second before
   they are sent (refusal_pace), so a client that resends an oversized body at once costs a held connection,
   not a request loop.
Refusals are the API's one-line JSON errors (`{"error": {"message", "type", "code"}}`); a refused upgrade is closed
before it is accepted (HTTP 403).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from streamvid.media.net_policy import is_loopback
from streamvid.serve.errors import ServeError
from streamvid.serve.refusal_pace import RefusalPace
from streamvid.serve.web import check_key, dumps

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class Throttle:
    """Failures per client address: after `limit` within `window_s`, the address is refused until the oldest of them
    is `window_s` old. Bounded: the `max_addresses` most recently failing addresses are tracked. Thread-safe."""

    def __init__(self, limit: int = 10, window_s: float = 60.0, max_addresses: int = 10_000, clock=time.monotonic):
        self.limit, self.window_s, self.max_addresses, self.clock = limit, window_s, max_addresses, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def retry_after_s(self, address: str) -> int:
        """0 when `address` may try again now, else the whole seconds until it may."""
        with self._lock:
            times = self._recent(address)
            if len(times) < self.limit:
                return 0
            return max(1, math.ceil(times[0] + self.window_s - self.clock()))

    def fail(self, address: str) -> None:
        with self._lock:
            times = self._recent(address)
            times.append(self.clock())
            while len(times) > self.limit:
                times.popleft()
            self._failures[address] = times
            self._failures.move_to_end(address)
            while len(self._failures) > self.max_addresses:
                self._failures.popitem(last=False)

    def _recent(self, address: str) -> deque[float]:
        times = self._failures.get(address, deque())
        while times and times[0] <= self.clock() - self.window_s:
            times.popleft()
        return times


def host_name(host: str) -> str:
    """The name in a Host header or URL authority, without its port, lower case ("[::1]:8000" -> "::1")."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@dataclass(frozen=True)
class Door:
    """What the front door lets in. `bind`: the address the server listens on; `hosts`: more Host names to accept
    (`--allowed-host`); `origins`: other origins whose browser requests to accept (`--cors-origin`, as
    scheme://host[:port])."""

    bind: str = "127.0.0.1"
    api_key: str | None = None
    hosts: tuple[str, ...] = ()
    origins: tuple[str, ...] = ()
    max_body_mb: float = 1.0
    request_timeout_s: float = 30.0
    unlimited_bodies: tuple[str, ...] = ("/frames", "/audio")  # /v1 paths ending so read their own (image, sound)
    # bodies, up to ServeOptions.max_body_mb (32 MB)
    throttle: Throttle = field(default_factory=Throttle, compare=False)
    pace: RefusalPace = field(default_factory=RefusalPace, compare=False)  # body refusals, per address

    @classmethod
    def of(cls, options) -> Door:
        """The door a server's `ServeOptions` ask for."""
        return cls(bind=options.host, api_key=options.api_key, hosts=options.allowed_hosts,
                   origins=options.cors_origins, max_body_mb=options.max_json_mb,
                   request_timeout_s=options.request_timeout_s)

    def host_allowed(self, host: str | None) -> bool:
        """Without a Host header (HTTP/1.0) nothing is claimed; a loopback bind takes the loopback names, any other
        bind its own address; `hosts` are taken always; a bind to every interface checks only where `hosts` says."""
        if host is None:
            return True
        name = host_name(host)
        if name in (h.lower() for h in self.hosts):
            return True
        if is_loopback(self.bind):
            return name in LOOPBACK_NAMES or name == self.bind.lower()
        if self.bind in ("0.0.0.0", "::", ""):
            return not self.hosts
        return name == self.bind.lower()

    def origin_allowed(self, origin: str, host: str | None, scheme: str) -> bool:
        """The request's own origin (same scheme, host and port as it was sent to), or one of `origins`."""
        origin = origin.strip().rstrip("/").lower()
        if origin in (o.strip().rstrip("/").lower() for o in self.origins):
            return True
        if host is None or origin == "null":
            return False
        own = f"{'https' if scheme in ('https', 'wss') else 'http'}://{host.strip().lower()}"
        parts = urlsplit(origin)
        default = {"http": 80, "https": 443}
        mine = urlsplit(own)
        try:
            return (parts.scheme, host_name(parts.netloc), parts.port or default.get(parts.scheme)) == (
                mine.scheme, host_name(mine.netloc), mine.port or default.get(mine.scheme))
        except ValueError:  # a port that is not a number
            return False


class FrontDoor:
    """ASGI middleware applying a `Door` (see the module docstring) in front of `app`; `door` may be a function
    that gives it, for an app built before its options are known (a Ray Serve ingress)."""

    def __init__(self, app, door: Door | Callable[[], Door]):
        self.app = app
        self._door = door

    @property
    def door(self) -> Door:
        return self._door() if callable(self._door) else self._door

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        door = self.door
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        host = headers.get("host")
        if not door.host_allowed(host):
            return await refuse(scope, send, ServeError(
                f"this server does not answer to the host name {host_name(host or '')[:100]!r} (start it with "
                f"--allowed-host NAME to allow it)", 421, "invalid_request_error"))
        origin = headers.get("origin")
        if origin is not None and not door.origin_allowed(origin, host, scope.get("scheme", "http")):
            return await refuse(scope, send, ServeError(
                f"requests from the origin {origin[:100]!r} are not allowed (start the server with --cors-origin "
                f"{origin[:100]} to allow them)", 403, "permission_error"))
        path = scope.get("path", "")
        address = (scope.get("client") or ("?",))[0]
        if path.endswith("/login") and scope.get("method") == "POST":  # the page's login (serve --ui)
            return await self.login(scope, receive, send, address)
        preflight = scope.get("method") == "OPTIONS" and "access-control-request-method" in headers
        if not path.startswith("/v1") or preflight:  # a CORS preflight carries no key; CORSMiddleware answers it
            return await self.app(scope, receive, send)
        if door.api_key:
            try:
                check_key(headers.get("authorization"), door)
            except ServeError as e:  # only a wrong key meets the throttle: the right one is never held
                wait = door.throttle.retry_after_s(address)
                if wait:
                    return await refuse(scope, send, ServeError(
                        f"too many wrong API keys from {address}; try again in {wait} s", 429, "rate_limit_error"),
                        {"Retry-After": str(wait)})
                door.throttle.fail(address)
                return await refuse(scope, send, e, {"WWW-Authenticate": "Bearer"})
        if scope["type"] == "http" and not path.endswith(door.unlimited_bodies):
            try:
                body = await read_body(receive, headers, door)
            except ServeError as e:
                if hold := door.pace.hold_s(address):
                    await asyncio.sleep(hold)
                return await refuse(scope, send, e)
            receive = replay(body, receive)
        return await self.app(scope, receive, send)


    async def login(self, scope, receive, send, address: str) -> None:
        """A login form post, always checked: a success passes whatever the throttle says; a failure (a 4xx answer)
        counts against its address, and once the address has failed too often its failures are answered 429."""
        throttle = self.door.throttle
        refused = False

        async def watch(message):
            nonlocal refused
            if message["type"] == "http.response.start" and 400 <= message["status"] < 500:
                wait = throttle.retry_after_s(address)
                if wait:
                    refused = True
                    return await refuse(scope, send, ServeError(
                        f"too many failed logins from {address}; try again in {wait} s", 429, "rate_limit_error"),
                        {"Retry-After": str(wait)})
                throttle.fail(address)
            if not refused:  # the body of a failure answered 429 instead is not sent
                await send(message)

        return await self.app(scope, receive, watch)


async def read_body(receive, headers: dict, door: Door) -> bytes:
    """The whole request body, at most `door.max_body_mb` (TooLarge: 413), each part within `request_timeout_s`."""
    limit = int(door.max_body_mb * 2**20)
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(int(declared), door)
    body = bytearray()
    while True:
        try:
            message = await asyncio.wait_for(receive(), door.request_timeout_s)
        except TimeoutError:
            raise ServeError(f"the request body did not arrive within {door.request_timeout_s:g} s", 408,
                             "invalid_request_error") from None
        if message["type"] == "http.disconnect":
            raise ServeError("the client went away while sending the body", 400, "invalid_request_error")
        body += message.get("body", b"")
        if len(body) > limit:
            raise too_large(None, door)
        if not message.get("more_body", False):
            return bytes(body)


def too_large(size: int | None, door: Door) -> ServeError:
    said = f" is {size / 2**20:.1f} MB," if size is not None else ""
    return ServeError(f"the request body{said} above the {door.max_body_mb:g} MB limit (--max-json-mb)", 413,
                      "invalid_request_error")


def replay(body: bytes, receive):
    """A `receive` that gives `body` once, then what the connection says next (a disconnect)."""
    sent = False

    async def again():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def refuse(scope, send, error: ServeError, headers: dict | None = None) -> None:
    """`error` as the API's JSON answer, also to a socket upgrade where the server can answer one with HTTP (the ASGI
    websocket.http.response extension, as uvicorn does); else the upgrade is closed before it is accepted (403)."""
    body = dumps(error.body()).encode("utf-8")
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    if scope["type"] == "websocket":
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})
            return
        kind = "websocket.http.response"
    else:
        kind = "http.response"
        raw.append((b"connection", b"close"))
    await send({"type": f"{kind}.start", "status": error.status, "headers": raw})
    await send({"type": f"{kind}.body", "body": body})
