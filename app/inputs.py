"""What the web page may open: the hub's source policy (streamvid.hub.policy: "push", demo clips, URLs, the
--allow-dir folders, under the same flags as every other client), plus the files the page's users uploaded and the
operator's own --video.

    policy = page_policy(hub, upload_dirs=[gradio_upload_folder], max_upload_mb=200, operator_video="cam:0")
    target = policy.resolve("shapes_7", uploads=True)     # what Session.start opens on the hub

An uploaded file is one inside the upload folders, of a video type, of at most `max_upload_mb`; any other path is
refused. The operator's --video is trusted: only the frame cap applies to it.
"""

from __future__ import annotations

import dataclasses

from streamvid.hub.hub import Hub
from streamvid.hub.policy import VIDEO_SUFFIXES, SourcePolicy

__all__ = ["MAX_UPLOAD_MB", "VIDEO_SUFFIXES", "page_policy"]

MAX_UPLOAD_MB = 200.0  # the largest video file a page may upload (`streamvid demo --max-upload-mb`)


def page_policy(hub: Hub, upload_dirs=(), max_upload_mb: float = MAX_UPLOAD_MB,
                operator_video: str | None = None) -> SourcePolicy:
    """The hub's policy with the page's upload folders and the operator's --video."""
    return dataclasses.replace(hub.policy, upload_dirs=tuple(upload_dirs), max_upload_mb=max_upload_mb,
                               operator_video=operator_video)
