"""The page of `streamvid demo` on an engine of the caller's: what `streamvid serve --ui` mounts at `/`.

    blocks = page(engine, engine.config)      # a gradio Blocks; sessions are streams on `engine`
    blocks.streamvid_close()                  # at shutdown: closes the page's sessions (not the engine)

Registered as the `page` entry point of the `streamvid.ui` group (pyproject.toml), which the library looks up,
since it never imports the app.
"""

from __future__ import annotations

from streamvid.config import EngineConfig
from streamvid_app.inputs import InputPolicy
from streamvid_app.manager import SessionManager
from streamvid_app.server import upload_folder
from streamvid_app.ui import build_demo


def page(engine, config: EngineConfig):
    """The web page (chat, alerts, stats, webcam, clips, uploads) with its sessions on `engine`."""
    manager = SessionManager(config, InputPolicy.default([upload_folder()]), engine=engine)
    blocks = build_demo(manager)
    blocks.streamvid_close = manager.shutdown
    return blocks
