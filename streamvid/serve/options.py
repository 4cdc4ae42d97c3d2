"""What a `streamvid serve` server allows and how it behaves: the same for every stream, and for every replica
under Ray (the command line's flags; see docs/api.md).

    options = ServeOptions(api_key="...", allow_dirs=("/srv/videos",), stream_idle_timeout_s=600.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServeOptions:
    """What a server allows; the same for every stream (and every replica under Ray)."""

    api_key: str | None = None
    model_id: str = "streamvid"
    allow_dirs: tuple[str, ...] = ()
    allow_private_urls: bool = False
    max_frame_pixels: int = 4096 * 4096
    max_outage_s: float | None = 300.0
    source_open_timeout_s: float = 10.0  # a URL source that has not opened (connected, probed) by then has failed
    max_opening_sources: int = 16  # URL sources opening at once (their own threads); one more is refused (503)
    max_body_mb: float = 32.0  # largest image body accepted
    max_fps: float = 30.0
    max_new_tokens: int | None = None  # the engine's: an answer that long finishes with "length"
    answer_timeout_s: float = 120.0  # a chat completion waits this long for its answer
    subscriber_queue: int = 1024  # items one subscriber may be behind before it loses the oldest
    webhook_urls: tuple[str, ...] = ()
    webhook_queue: int = 256
    webhook_retries: int = 5
    heartbeat_s: float = 15.0  # SSE comment / idle tick while no output comes
    stream_idle_timeout_s: float | None = 600.0  # a stream without frames, questions or reads this long is closed
    session_save_s: float | None = 60.0  # a stream with a session_dir is saved this often (and when it closes)
    # the front door (front_door.py): the bound address, more Host names and browser origins to accept, JSON bodies
    host: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    max_json_mb: float = 1.0  # largest request body other than an image
    request_timeout_s: float = 30.0  # a request body's parts must each arrive within this long


def model_id(model: str) -> str:
    """The id /v1/models lists: a checkpoint folder's name, or the Hugging Face id."""
    path = Path(model)
    return path.name if path.is_dir() else model
