"""`streamvid serve`: the HTTP transports over the hub (streamvid/hub/), on one engine or R engines on Ray Serve.

    from streamvid.engine.engine import Engine
    from streamvid.serve import ServeOptions, build_app
    app = build_app(Engine(EngineConfig()), ServeOptions(api_key="..."))   # a FastAPI app; run it with uvicorn

The streams themselves (their registry, fan-out, source policy, images, push clock, session folders, idle reaping)
are the hub's; this package carries requests to it. Modules: options.py (ServeOptions: the hub's options and the
front door's), service.py (the hub's async face), routes.py (the FastAPI app and the stream routes), openai_api.py
(/v1/models, /v1/chat/completions), realtime.py (the older WebSocket), realtime_ga.py (OpenAI's Realtime API at
/v1/realtime, with realtime_conversation.py, realtime_session.py, realtime_responses.py, realtime_events.py,
realtime_input.py; realtime_calls.py and webrtc_media.py: the same over WebRTC; the /realtime page in page/) and
client_secrets.py (its one-session keys), webhooks.py (alert webhooks), front_door.py (Host,
Origin, API key, body sizes), errors.py (the hub's errors as HTTP statuses), web.py (shared helpers), server.py (one
process on uvicorn), ray_app.py (Ray Serve), ray_engines.py and scaling.py (its replicas, autoscaled on streams per
replica), cli.py (the command). The routes are documented in docs/api.md.

serve/ knows nothing of the engine's insides: it carries requests to the hub (or to the hubs of Ray Serve replicas).
"""

__all__ = ["Hub", "ServeOptions", "build_app"]


def __getattr__(name: str):  # lazily: `streamvid --help` registers the command without loading torch
    if name == "Hub":
        from streamvid.hub.hub import Hub

        return Hub
    if name == "ServeOptions":
        from streamvid.serve.options import ServeOptions

        return ServeOptions
    if name == "build_app":
        from streamvid.serve.server import build_app

        return build_app
    raise AttributeError(name)
