"""`streamvid demo`: the web app's command, plugged into the `streamvid` command line.

    streamvid demo [--model M] [--video V] [--host 127.0.0.1] [--port 7860] [--auth USER:PASS] [--tts auto]
                   [--stream-idle-timeout-s 600] [engine flags]

The library's parser (`streamvid.cli.main.build_parser`) adds the commands registered under the `streamvid.commands`
entry point group (pyproject.toml); `register` is this package's. The library never imports the app: the app
plugs in.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile


def register(sub: argparse._SubParsersAction) -> None:
    from streamvid.audio.voices import best_voice
    from streamvid.cli.engine_flags import add_engine_args
    from streamvid.hub.images import DEFAULT_MAX_PIXELS
    from streamvid_app.inputs import MAX_UPLOAD_MB

    dm = sub.add_parser("demo", help="the web assistant: webcam, demo clips, uploads, URLs; chat, alerts, API")
    dm.add_argument("--video", default=None, help="a video file, URL or cam:N to offer first (default: demo clips)")
    dm.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                    help="address to bind (default: $GRADIO_SERVER_NAME, else 127.0.0.1); other than loopback "
                         "needs --auth")
    dm.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    dm.add_argument("--auth", default=None, metavar="USER:PASS", help="login for the page and API "
                    "(default: $STREAMVID_AUTH)")
    dm.add_argument("--max-sessions", type=int, default=None,
                    help="browser tabs / API clients served at once (default: the engine's --max-streams)")
    dm.add_argument("--max-sessions-per-client", type=int, default=None, metavar="N",
                    help="sessions one login user (or one address without login) may hold (default: half)")
    dm.add_argument("--stream-idle-timeout-s", "--idle-timeout-s", type=float, default=600.0, metavar="SECONDS",
                    help="close a session idle this long, as serve's flag of this name does (0: never; "
                         "--idle-timeout-s is the same)")
    dm.add_argument("--max-upload-mb", type=float, default=MAX_UPLOAD_MB, help="largest video file a page may upload")
    dm.add_argument("--upload-quota-mb", type=float, default=2048.0,
                    help="all uploads together; the oldest not playing are removed beyond it")
    dm.add_argument("--max-frame-pixels", type=int, default=DEFAULT_MAX_PIXELS, metavar="N",
                    help="refuse videos and images whose frames have more pixels (default: 4096x4096)")
    dm.add_argument("--allow-private-urls", action="store_true",
                    help="let URLs reach loopback, LAN and other non-public addresses (cameras on your network)")
    dm.add_argument("--max-outage-s", type=float, default=300.0,
                    help="give up on a URL that sends no frames for this long (it is reopened until then)")
    dm.add_argument("--tts", default="auto", metavar="VOICE",
                    help=f"the voice that speaks answers and alerts on the page: auto (the best installed here: "
                         f"{best_voice()}; none: the page does not speak), off, espeak-ng, piper, or a transformers "
                         f"text-to-speech checkpoint (HF id or directory)")
    add_engine_args(dm)
    dm.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from streamvid.cli.engine_flags import check_model, embedder_checkpoint, engine_config, offline_if_local

    offline_if_local(args.model, embedder_checkpoint(args))
    from streamvid.hub.images import cap_decoded_pixels
    from streamvid.hub.options import HubOptions
    from streamvid_app.manager import SessionManager
    from streamvid_app.server import check_bind, launch, upload_folder
    from streamvid_app.ui import build_demo
    from streamvid_app.voice import page_voice

    auth = args.auth if args.auth is not None else os.environ.get("STREAMVID_AUTH") or None
    creds = check_bind(args.host, auth)  # refused before the model is loaded
    cfg = engine_config(args)
    check_model(cfg.model)
    voice = page_voice(args.tts)  # a voice named but not installed: one line, before the model loads
    cap_decoded_pixels(args.max_frame_pixels)  # the web framework decodes webcam frames itself
    # this server's own upload folder (under $GRADIO_TEMP_DIR when set), removed with everything in it at shutdown
    previous = os.environ.get("GRADIO_TEMP_DIR")
    uploads = tempfile.mkdtemp(prefix="streamvid-uploads-", dir=previous)
    os.environ["GRADIO_TEMP_DIR"] = uploads
    try:
        idle_s = args.stream_idle_timeout_s
        if not idle_s >= 0:
            raise ValueError(f"--stream-idle-timeout-s must be a number of seconds >= 0 (0: never), got {idle_s}")
        options = HubOptions(max_frame_pixels=args.max_frame_pixels, allow_private_urls=args.allow_private_urls,
                             max_outage_s=args.max_outage_s, stream_idle_timeout_s=idle_s or None)
        options.policy(max_upload_mb=args.max_upload_mb, operator_video=args.video)  # refused before the model loads
        manager = SessionManager.standalone(cfg, options, upload_dirs=[upload_folder()],
                                            max_upload_mb=args.max_upload_mb, operator_video=args.video,
                                            max_sessions=args.max_sessions,
                                            max_sessions_per_client=args.max_sessions_per_client,
                                            upload_quota_mb=args.upload_quota_mb, voice=voice)
        try:
            launch(build_demo(manager), host=args.host, port=args.port, auth=creds,
                   max_upload_mb=args.max_upload_mb)
        finally:
            manager.shutdown()
    finally:
        shutil.rmtree(uploads, ignore_errors=True)
        if previous is None:
            os.environ.pop("GRADIO_TEMP_DIR", None)
        else:
            os.environ["GRADIO_TEMP_DIR"] = previous
    return 0
