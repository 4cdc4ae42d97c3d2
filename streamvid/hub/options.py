"""What a hub allows and how it behaves: the same for every stream and every client (the HTTP API, the web page),
and for every replica under Ray. `streamvid serve` and `streamvid demo` fill it from the same flags.

    options = HubOptions(allow_dirs=("/srv/videos",), stream_idle_timeout_s=600.0)
    policy = options.policy(frame_px=112)          # the source policy these options describe
"""

from __future__ import annotations

from dataclasses import dataclass

from streamvid.hub.images import DEFAULT_MAX_PIXELS
from streamvid.hub.policy import SourcePolicy


@dataclass(frozen=True)
class HubOptions:
    allow_dirs: tuple[str, ...] = ()  # --allow-dir: folders whose videos clients may open, and keep sessions in
    allow_private_urls: bool = False
    max_frame_pixels: int = DEFAULT_MAX_PIXELS  # videos and pushed images with larger frames are refused
    max_outage_s: float | None = 300.0  # a URL without frames this long is given up
    source_open_timeout_s: float = 10.0  # a URL source that has not opened (connected, probed) by then has failed
    max_opening_sources: int = 16  # URL sources opening at once (their own threads); one more is refused
    max_fps: float = 30.0
    max_streams_per_client: int | None = None  # streams one client may hold at once (None: the engine's cap only)
    subscriber_queue: int = 1024  # items one subscriber may be behind before it loses the oldest
    stream_idle_timeout_s: float | None = 600.0  # a stream without frames, questions or reads this long is closed
    session_save_s: float | None = 60.0  # a stream with a session_dir is saved this often (and when it closes)
    alert_media: bool = True  # every stream keeps the frame and clip behind its alerts (alert_access.py)

    def policy(self, frame_px: int | None = None, **more) -> SourcePolicy:
        """The source policy of these options (frames resized to `frame_px`); `more`: other SourcePolicy fields
        (the web page's upload folders, the operator's --video)."""
        return SourcePolicy(allow_dirs=tuple(self.allow_dirs), max_frame_pixels=self.max_frame_pixels,
                            allow_private_urls=self.allow_private_urls, max_outage_s=self.max_outage_s,
                            open_timeout_s=self.source_open_timeout_s, frame_px=frame_px, **more)
