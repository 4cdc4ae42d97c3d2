"""The web app of `streamvid demo`: a Gradio page and scriptable API over `StreamingAssistant` sessions.

    cli.py         the `demo` command, plugged into `streamvid` (the `streamvid.commands` entry point)
    app.py         the same as a script: `python app/app.py` (the Hugging Face Spaces convention)
    server.py      where uploads go, who may bind where, the launch with its login throttle
    ui.py          the page: layout and callbacks
    api.py         the scriptable endpoints, and how a call finds its session (login user + session hash)
    manager.py     the sessions of one server on one loaded model: caps (per client too), idle cleanup
    sessions.py    one session: its stream, chat, alerts and standing conditions
    inputs.py      what a page or API client may open (demo clips, uploads, URLs, pushed frames) and how
    frames.py      still frames: refused above the pixel cap from their header, made square and small early
    validation.py  endpoint arguments checked before anything else happens
    login.py       password length, and repeated failed logins slowed down
    uploads.py     uploads removed when their session is done with them, the folders kept under a quota
    chat.py        stream times as clocks, alerts as one line

Layout and callbacks only: no model logic and no torch here; everything goes through streamvid's public API.
Installed as the package `streamvid_app`.
"""
