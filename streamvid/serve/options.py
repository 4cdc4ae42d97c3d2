"""What a `streamvid serve` server allows and how it behaves: the hub's options (streamvid.hub.options: sources,
frames, caps, idle streams, sessions) and those of its HTTP front door, the same for every stream and every replica
under Ray (the command line's flags; see docs/api.md).

    options = ServeOptions(api_key="...", allow_dirs=("/srv/videos",), stream_idle_timeout_s=600.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streamvid.hub.options import HubOptions


@dataclass(frozen=True)
class ServeOptions(HubOptions):
    """What a server allows; the same for every stream (and every replica under Ray)."""

    api_key: str | None = None
    model_id: str = "streamvid"
    max_body_mb: float = 32.0  # largest image or sound body accepted
    max_new_tokens: int | None = None  # the engine's: an answer that long finishes with "length"
    answer_timeout_s: float = 120.0  # a chat completion waits this long for its answer
    tts: str = "auto"  # /v1/audio/speech's voice: auto (the best installed), off, espeak-ng, piper, an HF id or dir
    webhook_urls: tuple[str, ...] = ()
    webhook_queue: int = 256
    webhook_retries: int = 5
    webhook_thumbnails: bool = False  # each alert POSTed with a small base64 JPEG of its snapshot ("thumbnail")
    heartbeat_s: float = 15.0  # SSE comment / idle tick while no output comes
    ice_servers: tuple[str, ...] = ()  # WebRTC calls' STUN/TURN servers (--ice-server); none: host candidates only
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
