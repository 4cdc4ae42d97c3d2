"""Serving the app: where uploads go, who may bind where, and the launch with its login throttle."""

from __future__ import annotations

import sys
import threading
from typing import TextIO

import gradio as gr
import gradio.utils
from starlette.middleware import Middleware

from streamvid.media.net_policy import is_loopback
from streamvid_app.login import LoginThrottle, check_password


def upload_folder() -> str:
    """Where gradio stores uploaded files (the only folder, besides the demo clips, that inputs may come from)."""
    return gradio.utils.get_upload_folder()


def check_bind(host: str, auth: str | None) -> tuple[str, str] | None:
    """(user, password) from "USER:PASS"; refuses a non-loopback host without auth, in one line."""
    creds = None
    if auth is not None:
        user, sep, password = auth.partition(":")
        if not sep or not user or not password:
            raise ValueError(f"--auth expects USER:PASS with both parts non-empty, got {len(auth)} characters "
                             f"without that form")
        creds = (user, password)
        check_password(user, password, loopback=is_loopback(host))
    if creds is None and not is_loopback(host):
        raise ValueError(f"refusing to listen on {host} without --auth USER:PASS (or STREAMVID_AUTH): anyone who "
                         f"can reach that address could use the assistant; use --host 127.0.0.1 for local use")
    return creds


def launch(demo: gr.Blocks, host: str = "127.0.0.1", port: int | None = 7860, auth: tuple[str, str] | None = None,
           max_upload_mb: float = 200.0, block: bool = True, out: TextIO | None = None) -> gr.Blocks:
    """Serve `demo` (bound to `host`; see check_bind). `block=False` returns once the server is up; `block=True`
    says where it serves in one line on `out` (stdout) and serves until Ctrl-C (SIGTERM: see streamvid.cli.main), then
    closes the server without a word: the framework's own lines (its share hint, its "Keyboard interruption"
    notice) are not for a command line's user."""
    if auth is None and not is_loopback(host):
        raise ValueError(f"refusing to listen on {host} without auth")
    demo.queue(default_concurrency_limit=None)  # sessions are bounded by the manager, not by the queue
    throttle = [Middleware(LoginThrottle)] if auth is not None else []
    demo.launch(server_name=host, server_port=port, auth=auth, max_file_size=int(max_upload_mb * 2**20),
                ssr_mode=False, show_error=True, quiet=True, prevent_thread_lock=True,
                footer_links=["api"], app_kwargs={"middleware": throttle})
    if not block:
        return demo
    print(f"streamvid demo: open {demo.local_url} in a browser (Ctrl-C to stop)", file=out or sys.stdout, flush=True)
    tick = threading.Event()
    try:
        while demo.is_running:
            tick.wait(0.2)
    finally:
        demo.close(verbose=False)
    return demo
