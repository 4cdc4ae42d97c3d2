"""The page of `streamvid demo` on a hub of the caller's: what `streamvid serve --ui` mounts at `/`.

    blocks = page(hub)                        # a gradio Blocks; its sessions are streams of `hub`
    blocks.streamvid_close()                  # at shutdown: closes the page's sessions (not the hub)
    blocks.streamvid_max_file_size            # the uploads' limit in bytes, for the server that mounts it

The page opens its streams on the caller's hub, so the hub's flags (--max-frame-pixels, --allow-private-urls,
--max-outage-s, --stream-idle-timeout-s, --allow-dir ...) hold for it as for the HTTP clients, and it speaks its
answers with the voice of `--tts`. Registered as the
`page` entry point of the `streamvid.ui` group (pyproject.toml), which the library looks up, since it never imports
the app.
"""

from __future__ import annotations

from streamvid.hub.hub import Hub
from streamvid.hub.images import cap_decoded_pixels
from streamvid_app.inputs import MAX_UPLOAD_MB, page_policy
from streamvid_app.manager import SessionManager
from streamvid_app.server import upload_folder
from streamvid_app.ui import build_demo
from streamvid_app.voice import page_voice


def page(hub: Hub):
    """The web page (chat, alerts, stats, webcam, clips, uploads) with its sessions on `hub`."""
    cap_decoded_pixels(hub.options.max_frame_pixels)  # the web framework decodes webcam frames itself
    # the voice of `serve --tts` (its options are the hub's); one that does not load: a page that does not speak
    voice = page_voice(getattr(hub.options, "tts", "auto"), strict=False)
    manager = SessionManager(hub, page_policy(hub, [upload_folder()], MAX_UPLOAD_MB), voice=voice)
    blocks = build_demo(manager)
    blocks.streamvid_close = manager.shutdown
    blocks.streamvid_max_file_size = int(MAX_UPLOAD_MB * 2**20)
    return blocks
