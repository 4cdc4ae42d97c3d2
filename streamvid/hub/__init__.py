"""The hub: the streams of one engine for every client at once, whatever carries their requests.

    from streamvid.hub import Hub, HubOptions
    hub = Hub(engine, HubOptions(allow_dirs=("/srv/videos",)))
    info = hub.open("push", client="user:ana")      # a stream; hub.push / ask / watch / subscribe / close it

`streamvid serve` (streamvid/serve/: HTTP, server-sent events, a WebSocket, Ray Serve) and the web page of
`streamvid demo` / `streamvid serve --ui` (app/: Gradio) are transports over one hub: the same streams, caps,
source policy, image checks, push clock, session folders and idle reaping, so every flag means the same on each.
The hub lives in the library, outside `serve`, because it knows no transport (its errors are streamvid/errors.py's, which
each transport maps onto its own answers) and because the web app, which the library never imports, is one of its
clients.

    hub.py              the streams by id: open, frames, questions, watches, status, close, idle reaping
    lifecycle.py        a stream's life: opened (source policy, session folder, URL opening, a failed open),
                        stopped (the last save, joins, "closed" to every reader)
    fanout.py           a stream's one consumer of its outputs, offered to every reader
    alert_access.py     the snapshot and clip behind each alert, recent frames an answer cites
    subscriber.py       one reader's bounded queue
    stream.py           one stream's state, and the tap that keeps the last frame read
    registry.py         entries by key with per-client caps and idle reaping (the streams; the page's tabs)
    policy.py           which sources a client may open, and how
    images.py           still frames: capped from their header, decoded, made square
    validation.py       arguments checked before anything happens
    session_folders.py  where a stream is saved and resumed from
    opening.py          the threads that open URL sources
    options.py          what a hub allows (the flags)
    shown.py            URLs redacted, numbers made finite, wherever the hub shows them

hub/ knows nothing of HTTP, WebSockets or Gradio: each transport maps its errors onto its own answers.
"""

__all__ = ["Hub", "HubOptions"]


def __getattr__(name: str):  # lazily: importing the package loads neither torch nor the engine
    if name == "Hub":
        from streamvid.hub.hub import Hub

        return Hub
    if name == "HubOptions":
        from streamvid.hub.options import HubOptions

        return HubOptions
    raise AttributeError(name)
