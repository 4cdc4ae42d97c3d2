"""`streamvid serve` in one process: the app over one engine, on uvicorn.

    engine = Engine(EngineConfig())                      # the model, once; many streams on it
    app = build_app(engine, ServeOptions(api_key="..."))
    uvicorn.run(app, host="127.0.0.1", port=8000)        # or serve(app, host, port)

`build_app` makes the hub (streamvid.hub) on the engine (started here; the caller keeps and closes it), the alert
webhooks, and the FastAPI app (routes.py); the hub is shut down (every stream stopped) with the app's lifespan.
`ui=True` also mounts the web app's page at `/` as one more client of the same hub (its sessions are hub streams,
under the same flags), found through the `streamvid.ui` entry point group (name `page`; the web app registers
`streamvid_app.mount:page`), since the library never imports the app. `page(hub)` gives a gradio Blocks with
`streamvid_close` (closes the page's sessions) and `streamvid_max_file_size` (its uploads' limit, in bytes).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from importlib.metadata import entry_points

from fastapi import FastAPI

from streamvid.hub.hub import Hub
from streamvid.media.net_policy import is_loopback
from streamvid.serve.alert_routes import links
from streamvid.serve.front_door import Door
from streamvid.serve.options import ServeOptions, model_id
from streamvid.serve.realtime_ga import mount as mount_realtime
from streamvid.serve.routes import create_app
from streamvid.serve.service import HubService
from streamvid.serve.webhooks import WebhookSender

log = logging.getLogger(__name__)


def build_app(engine, options: ServeOptions | None = None, ui: bool = False) -> FastAPI:
    options = options or ServeOptions(model_id=model_id(engine.config.model),
                                      max_new_tokens=engine.config.generation.max_new_tokens)
    hub = Hub(engine, options, webhooks=WebhookSender.of(options), links=links)
    service = HubService(hub)
    closers = []

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            yield
        finally:
            await calls.hang_up_all()
            await service.shutdown()
            for close in closers:
                close()

    app = create_app(lambda: service, lifespan=lifespan, door=Door.of(options))
    app.state.hub = hub
    # GET /v1/realtime, POST /v1/realtime/calls (WebRTC), POST /v1/realtime/client_secrets
    calls = app.state.calls = mount_realtime(app, lambda: service)
    if ui:
        closers.append(mount_ui(app, hub, options))
    return app


def mount_ui(app: FastAPI, hub: Hub, options: ServeOptions):
    """The web app's page at `/` on `hub` (with an API key, its login is user "api" and the key); returns what
    closes the page's sessions."""
    pages = [ep for ep in entry_points(group="streamvid.ui") if ep.name == "page"]
    if not pages:
        raise ValueError("--ui needs the web app (streamvid_app, installed with streamvid): no 'page' entry point in "
                         "the streamvid.ui group")
    blocks = pages[0].load()(hub)
    import gradio  # only here: the library's other modules never import the web framework

    gradio.mount_gradio_app(app, blocks, path="/", auth=("api", options.api_key) if options.api_key else None,
                            ssr_mode=False, footer_links=["api"],
                            max_file_size=getattr(blocks, "streamvid_max_file_size", None))
    return getattr(blocks, "streamvid_close", lambda: None)


MIN_KEY_CHARS = 16  # an API key that guards a public address: long enough that guessing it is hopeless


def check_bind(host: str, api_key: str | None) -> None:
    if is_loopback(host):
        return
    if not api_key:
        raise ValueError(f"refusing to listen on {host} without --api-key (or STREAMVID_API_KEY): anyone who can "
                         f"reach that address could use the engine; use --host 127.0.0.1 for local use")
    if len(api_key) < MIN_KEY_CHARS:
        raise ValueError(f"refusing to listen on {host} with an API key of {len(api_key)} characters: use at least "
                         f"{MIN_KEY_CHARS} (e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))')")


def serve(app: FastAPI, host: str, port: int, max_body_mb: float = 32.0, request_timeout_s: float = 30.0,
          max_connections: int = 256) -> None:
    """uvicorn until Ctrl-C or SIGTERM (open event streams are given 3 s, then closed): see `uvicorn_config`."""
    import uvicorn

    uvicorn.Server(uvicorn_config(app, host, port, max_body_mb, request_timeout_s, max_connections)).run()


def uvicorn_config(app: FastAPI, host: str, port: int, max_body_mb: float = 32.0, request_timeout_s: float = 30.0,
                   max_connections: int = 256):
    """How `serve` runs uvicorn: a realtime message may carry a base64 image up to `max_body_mb`; a connection must
    send each request's head within `request_timeout_s` (the front door bounds body reads the same way); past
    `max_connections` open connections and tasks, uvicorn answers 503."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=3,
                          ws_max_size=int(4 / 3 * max_body_mb * 2**20) + 2**20, limit_concurrency=max_connections,
                          http=head_deadline_protocol(request_timeout_s))


def head_deadline_protocol(timeout_s: float) -> type:
    """uvicorn's h11 protocol with a deadline on request heads: a connection that has not sent a whole request head
    within `timeout_s` of opening, or of its last response, is closed (uvicorn itself only times idle keep-alive
    connections out, so a client dripping its head would hold a connection for ever)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadDeadline(H11Protocol):
        head_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self.arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.arm()

        def connection_lost(self, exc) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            super().connection_lost(exc)

        def arm(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            self.head_timer = self.loop.call_later(timeout_s, self.head_too_slow)

        def head_too_slow(self) -> None:
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self.transport.close()

    return HeadDeadline
