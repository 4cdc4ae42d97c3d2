"""The library's one error family: what it refuses, and why, with a one-line message and no transport in it.

    raise NotFound("no stream 'vs-1a2b' on this server")

The hub raises them; so do the layers below it where a refusal is theirs to name (the engine's full question queue
and its full slots are `Busy`: engine/stream.BusyError, engine/admission.EngineFull).
Each transport maps them onto its own answers: `streamvid serve` onto HTTP statuses (serve/errors.py: Refused 400,
NotAllowed 403, NotFound 404, Conflict 409, TooLarge 413, UnsupportedMedia 415, Busy 429, Unavailable and
StreamFailed 503, Timeout 504), the web page onto its one-line error messages. `StreamFailed` is the one type for a
stream whose work failed or stopped: the library's worker errors (RuntimeError) are turned into it where the hub
calls the assistant, and nowhere else.
"""

from __future__ import annotations


class HubError(Exception):
    """Something a client asked for that cannot be done; `message` says why, in one line."""

    def __init__(self, message: object):
        message = " ".join(str(message).split()) or type(self).__name__
        super().__init__(message[:1000])
        self.message = str(self)


class Refused(HubError, ValueError):
    """A value of the wrong type or out of range, or a source, image or folder the policy does not allow."""


class ArgumentError(Refused):
    """An argument of the wrong type or out of range; the message names it."""


class UnsupportedMedia(Refused):
    """An image of another type than PNG or JPEG."""


class TooLarge(Refused):
    """A body or file above its size limit."""


class NotAllowed(HubError):
    """A path outside every folder the hub allows (a session folder outside every --allow-dir)."""


class NotFound(HubError):
    """No such stream, watch or saved session."""


class Conflict(HubError):
    """Not in this stream's state: frames to a stream that is not "push", a folder in use, a source still opening."""


class Busy(HubError):
    """Every slot is taken: the engine's streams, one client's share of them, or a stream's questions queue."""


class Unavailable(HubError):
    """Cannot be done now: too many sources opening, or the hub is shutting down."""


class StreamFailed(Unavailable):
    """The stream's work failed (or it stopped): what it was asked cannot be done on it any more."""


class Timeout(HubError):
    """Something did not happen in time: a source that did not open, an answer that did not come."""
