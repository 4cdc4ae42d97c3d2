"""How errors are answered over HTTP: the hub's errors (streamvid.errors) mapped onto statuses, and the errors
only HTTP has.

    wire_error(NotFound("no stream 'vs-1a2b'"))   # -> ServeError: 404 {"error": {"message", "type": "not_found_error"}}

Every error a client can cause is answered as `{"error": {"message", "type", "code"}}` with a one-line message and
an OpenAI-style type. They cross a Ray Serve handle as plain data (`to_wire` / `from_wire`), so the ingress answers
exactly what the replica said.
"""

from __future__ import annotations

from streamvid.errors import (Busy, Conflict, HubError, NotAllowed, NotFound, Refused, Timeout, TooLarge,
                                  Unavailable, UnsupportedMedia)

INVALID = "invalid_request_error"
# the hub's errors, most specific first: (class, HTTP status, OpenAI-style type)
STATUSES = ((UnsupportedMedia, 415, INVALID), (TooLarge, 413, INVALID), (Refused, 400, INVALID),
            (NotAllowed, 403, "permission_error"), (NotFound, 404, "not_found_error"), (Conflict, 409, INVALID),
            (Busy, 429, "rate_limit_error"), (Unavailable, 503, "service_unavailable"), (Timeout, 504, "timeout"),
            (HubError, 400, INVALID))


class ServeError(Exception):
    status = 500
    type = "server_error"

    def __init__(self, message: str, status: int | None = None, type: str | None = None, code: str | None = None):
        message = " ".join(str(message).split()) or self.__class__.__name__  # one line
        super().__init__(message)
        self.message = message[:1000]
        self.status = status or self.status
        self.type = type or self.type
        self.code = code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "code": self.code}}

    def to_wire(self) -> list:
        return [self.status, self.message, self.type, self.code]

    @classmethod
    def from_wire(cls, wire: list) -> ServeError:
        status, message, type_, code = wire
        return ServeError(message, status, type_, code)


class Unauthorized(ServeError):
    status, type = 401, INVALID


def wire_error(e: BaseException) -> ServeError:
    """Any exception as a ServeError: the hub's with their status, an unexpected one as 500, in one line."""
    if isinstance(e, ServeError):
        return e
    if isinstance(e, HubError):
        status, kind = next((status, kind) for cls, status, kind in STATUSES if isinstance(e, cls))
        return ServeError(e.message, status, kind)
    return ServeError(f"internal error: {type(e).__name__}: {e}")
