"""The frame and clip behind each alert, for the page: thumbnails for its gallery, and a clip written where the page
can play it (the stream's alert media: streamvid/media/alert_media.py, kept by every hub stream).

    ready_ids(sa)                              # ["a1", "a0"]: the alerts whose frame is ready, newest first
    alert_thumbnails(sa)                       # [(RGB thumbnail, "[00:14] a red hexagon", "a0"), ...], newest first
    alert_clip(sa, "a0", folder, "tab-key")    # folder/streamvid-alert-<tab>-a0.mp4, or None while recording
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
from PIL import Image

from streamvid_app.chat import clock

THUMBNAIL_PX = 160


def _media(sa):
    return getattr(sa, "alert_media", None) if sa is not None else None


def ready_ids(sa) -> list[str]:
    """The ids of the alerts of `sa` whose frame is kept and ready, newest first (what the gallery shows, in the
    order of the page's alert list)."""
    media = _media(sa)
    return [a["alert_id"] for a in media.list() if a.get("snapshot") == "ready"][::-1] if media is not None else []


def alert_thumbnails(sa, max_px: int = THUMBNAIL_PX) -> list[tuple[np.ndarray, str, str]]:
    """(thumbnail RGB, caption, alert id) of each alert of `sa` whose frame is kept, newest first."""
    media = _media(sa)
    if media is None:
        return []
    out = []
    for a in media.list():
        jpeg = media.thumbnail(a["alert_id"], max_px=max_px)
        if jpeg is not None:
            with Image.open(io.BytesIO(jpeg)) as im:
                image = np.asarray(im.convert("RGB"))
            out.append((image, f"[{clock(a.get('t_s'))}] {a.get('condition', '')}", a["alert_id"]))
    return out[::-1]


def alert_clip(sa, alert_id: str, folder: Path, tag: str) -> Path | None:
    """The clip of `alert_id` written into `folder` as an MP4 (named by a digest of `tag`, the tab's key), or None
    while it is being recorded or when it was not kept."""
    media = _media(sa)
    data = media.clip(alert_id) if media is not None else None
    if data is None:
        return None
    path = Path(folder) / f"streamvid-alert-{hashlib.sha256(tag.encode()).hexdigest()[:12]}-{alert_id}.mp4"
    path.write_bytes(data)
    return path
