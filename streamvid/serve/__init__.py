"""`streamvid serve`: streams over HTTP on one engine (or R engines on Ray Serve).

    from streamvid.engine import Engine
    from streamvid.serve import ServeOptions, build_app
    app = build_app(Engine(EngineConfig()), ServeOptions(api_key="..."))   # a FastAPI app; run it with uvicorn

Modules: hub.py (streams registry, one fan-out of outputs per stream, idle streams closed), subscriber.py (one
subscriber's queue), options.py (ServeOptions), stream_sessions.py (session folders: saving and resuming
streams), service.py (the hub's async face), routes.py (the FastAPI app and the stream routes), openai_api.py
(/v1/models, /v1/chat/completions), realtime.py (the WebSocket), webhooks.py (alert webhooks), policy.py (which
sources a client may open), images.py (pushed frames), errors.py, web.py (shared helpers), server.py (one process
on uvicorn), ray_app.py (Ray Serve), ray_engines.py and scaling.py (its replicas, autoscaled on streams per
replica), cli.py (the command).
The routes are documented in docs/api.md.
"""

__all__ = ["Hub", "ServeOptions", "build_app"]


def __getattr__(name: str):  # lazily: `streamvid --help` registers the command without loading torch
    if name in ("Hub", "ServeOptions"):
        import streamvid.serve.hub as hub

        return getattr(hub, name)
    if name == "build_app":
        from streamvid.serve.server import build_app

        return build_app
    raise AttributeError(name)
