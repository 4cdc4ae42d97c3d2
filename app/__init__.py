"""The web app of `streamvid demo`: a Gradio page and scriptable API over `StreamingAssistant` sessions.

    cli.py         the `demo` command, plugged into `streamvid` (the `streamvid.commands` entry point)
    app.py         the same as a script: `python app/app.py` (the Hugging Face Spaces convention)
    server.py      where uploads go, who may bind where, the launch with its login throttle
    ui.py          the page: layout and callbacks
    api.py         the scriptable endpoints, and how a call finds its session (login user + session hash)
    manager.py     the sessions of one server on one engine (one model, one scheduler): caps, idle cleanup
    mount.py       the page on a caller's engine (`streamvid serve --ui`, the `streamvid.ui` entry point)
    sessions.py    one session: starting and stopping its stream, standing conditions, the calls of page and API
    transcript.py  a stream's outputs into the chat, the poll log and the alerts (the drain thread)
    inputs.py      what a page or API client may open (demo clips, uploads, URLs, pushed frames) and how
    frames.py      still frames: refused above the pixel cap from their header, made square and small early;
                   the tap that keeps the preview frame and pushes frames in stream-time order
    validation.py  endpoint arguments checked before anything else happens
    login.py       password length, and repeated failed logins slowed down
    uploads.py     uploads removed when their session is done with them, the folders kept under a quota
    chat.py        the wording of each chat line: stream times as clocks, answers, alerts, remarks, errors

Layout and callbacks only: no model logic and no torch here; everything goes through streamvid's public API.
Installed as the package `streamvid_app`.
"""
