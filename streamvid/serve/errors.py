"""Errors the server answers with, and JSON that never holds NaN or Infinity.

    raise NotFound("no stream 'vs-1a2b'")          # -> 404 {"error": {"message": ..., "type": "not_found_error"}}

Every error a client can cause is a `ServeError` with its HTTP status, a one-line message and an OpenAI-style type;
the routes turn it into `{"error": {"message", "type", "code"}}`. They cross a Ray Serve handle as plain data
(`to_wire` / `from_wire`), so the ingress answers exactly what the replica said.
"""

from __future__ import annotations

import math


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


class BadRequest(ServeError):
    status, type = 400, "invalid_request_error"


class Unauthorized(ServeError):
    status, type = 401, "invalid_request_error"


class Forbidden(ServeError):
    """A path the server does not allow (a session folder outside every --allow-dir)."""

    status, type = 403, "permission_error"


class NotFound(ServeError):
    status, type = 404, "not_found_error"


class Conflict(ServeError):
    status, type = 409, "invalid_request_error"


class TooLarge(ServeError):
    status, type = 413, "invalid_request_error"


class UnsupportedMedia(ServeError):
    status, type = 415, "invalid_request_error"


class Busy(ServeError):
    """The engine holds its maximum of streams, or a stream's questions queue is full."""

    status, type = 429, "rate_limit_error"


class Unavailable(ServeError):
    """The stream's replica died or restarted, or the stream stopped with an error."""

    status, type = 503, "service_unavailable"


class Timeout(ServeError):
    status, type = 504, "timeout"


def wire_error(e: BaseException) -> ServeError:
    """Any exception as a ServeError (an unexpected one as 500, in one line)."""
    if isinstance(e, ServeError):
        return e
    return ServeError(f"internal error: {type(e).__name__}: {e}")


def finite(obj):
    """`obj` with every NaN or infinite float replaced by None (containers copied), for strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", None) == 0:  # a numpy scalar
        return finite(obj.item())
    return obj
