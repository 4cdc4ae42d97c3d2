"""Logins to the app: passwords long enough, and repeated failures from one address slowed down.

    check_password("me", "a-long-password", host)   # ValueError when shorter than MIN_PASSWORD off loopback
    LoginThrottle(app, max_failures=10, window_s=60) # ASGI middleware: 429 once an address failed too often

The throttle watches the server's login route (POST .../login): each answer other than success from an address
is a failure, and once an address has `max_failures` failures within the last `window_s` seconds its further
failures are answered 429 (with Retry-After) until the oldest of them is older than the window. Every login is
checked: a right password is let in from a throttled address too (behind a proxy every user shares one address,
and one user's wrong password must not lock the others out); what stands against guessing is the password's
length (MIN_PASSWORD).
Thread contract: one event loop calls the middleware; a lock guards the failure table anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

log = logging.getLogger(__name__)

MIN_PASSWORD = 8


def check_password(user: str, password: str, loopback: bool) -> None:
    """Refuse a password shorter than MIN_PASSWORD on an address others can reach; on loopback, warn."""
    if len(password) >= MIN_PASSWORD:
        return
    message = f"the password for {user!r} is {len(password)} characters long; use at least {MIN_PASSWORD}"
    if not loopback:
        raise ValueError(message)
    log.warning("%s (accepted only because the server listens on loopback)", message)


class LoginThrottle:
    def __init__(self, app, max_failures: int = 10, window_s: float = 60.0, clock=time.monotonic):
        self.app, self.max_failures, self.window_s, self.clock = app, max_failures, window_s, clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].rstrip("/").endswith("/login"):
            return await self.app(scope, receive, send)
        address = (scope.get("client") or ("", 0))[0]
        refused = False

        async def watch(message):
            nonlocal refused
            if message["type"] == "http.response.start" and message["status"] >= 400:
                wait_s = self.retry_after_s(address)
                if wait_s > 0:  # a failure from an address that failed too often: 429 instead of the app's answer
                    refused = True
                    body = b'{"detail": "too many failed logins from this address: try again later"}'
                    await send({"type": "http.response.start", "status": 429,
                                "headers": [(b"content-type", b"application/json"),
                                            (b"retry-after", str(wait_s).encode()),
                                            (b"content-length", str(len(body)).encode())]})
                    await send({"type": "http.response.body", "body": body})
                    return
                self.failed(address)
            if not refused:
                await send(message)

        await self.app(scope, receive, watch)
        return None

    def failed(self, address: str) -> None:
        with self._lock:
            times = self._failures.setdefault(address, deque())
            times.append(self.clock())
            while len(times) > self.max_failures:
                times.popleft()
            if len(times) == self.max_failures:
                log.warning("login: %d failures from %s within %g s; slowing it down", self.max_failures, address,
                            self.window_s)

    def retry_after_s(self, address: str) -> int:
        """Seconds until `address` may try again (0: now)."""
        with self._lock:
            times = self._failures.get(address)
            now = self.clock()
            while times and now - times[0] > self.window_s:
                times.popleft()
            if not times:
                self._failures.pop(address, None)
                return 0
            if len(times) < self.max_failures:
                return 0
            return max(1, int(self.window_s - (now - times[0])) + 1)
