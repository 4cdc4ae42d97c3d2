"""Arguments checked before anything else happens: one line saying what is wrong.

    text(value, "question")                  # a non-empty str, at most MAX_TEXT characters
    path_text(value, "source")               # None, or a str a file system and the network can take
    optional_number(value, "fire", 0, 1)     # None, or a finite number within [low, high]
    cursor(value)                            # an int >= 0 (a JSON number with no fraction)
    stream_time(value, after_s=5.0)          # None, or a finite time in [after_s, MAX_STREAM_S]
    fps(value, high=30.0)                    # a finite number in [MIN_FPS, high]

Every check raises `ArgumentError` (a ValueError), which every transport shows as the call's error; nothing has
changed. Values arrive from JSON, so a bool is not a number and a float with no fraction is an int.
"""

from __future__ import annotations

import math

from streamvid.errors import ArgumentError

MAX_TEXT = 2000  # characters of a question, a condition, a source spec or an id
MAX_CURSOR = 2**53  # the largest whole number every JSON reader keeps exact
MAX_STREAM_S = 10 * 365 * 24 * 3600.0  # stream times beyond ten years are refused (and 1e300 is)
MIN_FPS = 0.01  # a frame per 100 s: slower is not a video stream (and 5e-324 would never sample a frame)
MAX_PATH = 4096  # characters of a source or folder name

__all__ = ["ArgumentError", "cursor", "fps", "number", "optional_number", "optional_text", "path_text",
           "stream_time", "text"]


def text(value, name: str, empty_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise ArgumentError(f"{name} must be a string, got {_kind(value)}")
    if not empty_ok and not value.strip():
        raise ArgumentError(f"{name} is empty")
    if len(value) > MAX_TEXT:
        raise ArgumentError(f"{name} is {len(value):,} characters long; at most {MAX_TEXT:,} are accepted")
    return value


def optional_text(value, name: str) -> str | None:
    return None if value is None else text(value, name, empty_ok=True)


def path_text(value, name: str) -> str | None:
    """None, or a source or folder name the file system and the network can take: no NUL, no lone surrogate, at
    most MAX_PATH characters and no path part over 255 bytes."""
    if value is None or not isinstance(value, str):
        return value
    if "\x00" in value:
        raise ArgumentError(f"{name} holds a NUL character")
    if any("\ud800" <= c <= "\udfff" for c in value):
        raise ArgumentError(f"{name} holds a lone UTF-16 surrogate")
    if len(value) > MAX_PATH:
        raise ArgumentError(f"{name} is {len(value)} characters long, at most {MAX_PATH}")
    if any(len(part.encode("utf-8")) > 255 for part in value.replace("\\", "/").split("/")):
        raise ArgumentError(f"{name} has a part longer than 255 bytes")
    return value


def number(value, name: str, low: float = -math.inf, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ArgumentError(f"{name} must be a number, got {_kind(value)}")
    if not math.isfinite(value):
        raise ArgumentError(f"{name} must be a finite number, got {value}")
    if not low <= value <= high:
        raise ArgumentError(f"{name} must be within [{low:g}, {high:g}], got {value:g}")
    return float(value)


def optional_number(value, name: str, low: float = -math.inf, high: float = math.inf) -> float | None:
    return None if value is None else number(value, name, low, high)


def fps(value, high: float) -> float:
    return number(value, "fps", MIN_FPS, high)


def cursor(value) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"cursor must be a whole number >= 0 (0 at first), got {_kind(value)}")
    if not 0 <= value <= MAX_CURSOR:
        raise ArgumentError(f"cursor must be >= 0 (0 at first) and at most {MAX_CURSOR}, got {value}"[:200])
    return value


def stream_time(value, after_s: float | None = None) -> float | None:
    """None (the hub's push clock), or a finite stream time not before `after_s` (the last frame's) and not past
    MAX_STREAM_S."""
    if value is None:
        return None
    t_s = number(value, "t_s", 0.0, MAX_STREAM_S)
    if after_s is not None and t_s < after_s:
        raise ArgumentError(f"t_s {t_s:g} is earlier than the last frame's {after_s:g}: stream times only go forward")
    return t_s


def _kind(value) -> str:
    return "null" if value is None else f"{type(value).__name__} {str(value)[:40]!r}"
