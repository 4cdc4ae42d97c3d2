"""Serving the app: where uploads go, who may bind where, and the launch with its login throttle."""

from __future__ import annotations


import gradio as gr
import gradio.utils
from starlette.middleware import Middleware

from streamvid.net_policy import is_loopback
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
           max_upload_mb: float = 200.0, block: bool = True) -> gr.Blocks:
    """Serve `demo` (bound to `host`; see check_bind). `block=False` returns once the server is up."""
    if auth is None and not is_loopback(host):
        raise ValueError(f"refusing to listen on {host} without auth")
    demo.queue(default_concurrency_limit=None)  # sessions are bounded by the manager, not by the queue
    throttle = [Middleware(LoginThrottle)] if auth is not None else []
    demo.launch(server_name=host, server_port=port, auth=auth, max_file_size=int(max_upload_mb * 2**20),
                ssr_mode=False, show_error=True, quiet=not block, prevent_thread_lock=not block,
                footer_links=["api"], app_kwargs={"middleware": throttle})
    return demo
