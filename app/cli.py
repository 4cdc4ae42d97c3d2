"""`streamvid demo`: the web app's command, plugged into the `streamvid` command line.

    streamvid demo [--model M] [--video V] [--host 127.0.0.1] [--port 7860] [--auth USER:PASS] [engine flags]

The library's parser (`streamvid.cli.build_parser`) adds the commands registered under the `streamvid.commands`
entry point group (pyproject.toml); `register` is this package's. The library never imports the app: the app
plugs in.
"""

from __future__ import annotations

import argparse
import os


def register(sub: argparse._SubParsersAction) -> None:
    from streamvid.cli import add_engine_args
    from streamvid.config import BUNDLED_MODEL, EngineConfig

    d = EngineConfig()
    dm = sub.add_parser("demo", help="the web assistant: webcam, demo clips, uploads, URLs; chat, alerts, API")
    dm.add_argument("--model", default=str(BUNDLED_MODEL), help="HF checkpoint directory or id (default: bundled)")
    dm.add_argument("--video", default=None, help="a video file, URL or cam:N to offer first (default: demo clips)")
    dm.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                    help="address to bind (default: $GRADIO_SERVER_NAME, else 127.0.0.1); other than loopback "
                         "needs --auth")
    dm.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    dm.add_argument("--auth", default=None, metavar="USER:PASS", help="login for the page and API "
                    "(default: $STREAMVID_AUTH)")
    dm.add_argument("--fps", type=float, default=d.fps)
    dm.add_argument("--frame-px", type=int, default=112, help="frames are resized to N x N (the bundled model: 112)")
    dm.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    dm.add_argument("--max-sessions", type=int, default=4, help="browser tabs / API clients served at once")
    dm.add_argument("--idle-timeout-s", type=float, default=600.0, help="close a session idle this long")
    dm.add_argument("--max-upload-mb", type=float, default=200.0)
    dm.add_argument("--narrate", action="store_true", help="sessions start with narration on (a page can switch)")
    add_engine_args(dm, d)
    dm.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from streamvid.cli import check_model, embedder_checkpoint, engine_config, offline_if_local

    offline_if_local(args.model, embedder_checkpoint(args))
    from streamvid_app.inputs import InputPolicy
    from streamvid_app.sessions import SessionManager
    from streamvid_app.ui import build_demo, check_bind, launch, upload_folder

    auth = args.auth if args.auth is not None else os.environ.get("STREAMVID_AUTH") or None
    creds = check_bind(args.host, auth)  # refused before the model is loaded
    cfg = engine_config(args, frame_px=args.frame_px, max_new_tokens=args.max_new_tokens, narrate=args.narrate)
    check_model(cfg.model)
    policy = InputPolicy.default([upload_folder()], operator_video=args.video, max_upload_mb=args.max_upload_mb)
    manager = SessionManager(cfg, policy, max_sessions=args.max_sessions, idle_timeout_s=args.idle_timeout_s)
    try:
        launch(build_demo(manager), host=args.host, port=args.port, auth=creds, max_upload_mb=args.max_upload_mb)
    finally:
        manager.shutdown()
    return 0
