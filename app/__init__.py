"""The web app of `streamvid demo`: a Gradio page and scriptable API, one client of the hub (streamvid.hub).

    cli.py         the `demo` command, plugged into `streamvid` (the `streamvid.commands` entry point)
    app.py         the same as a script: `python app/app.py` (the Hugging Face Spaces convention)
    server.py      where uploads go, who may bind where, the launch with its login throttle
    ui.py          the page: layout and callbacks
    api.py         the scriptable endpoints, and how a call finds its session (login user + session hash)
    manager.py     the sessions of one page (tabs and API clients): caps per client, idle cleanup, uploads' quota
    mount.py       the page on a caller's hub (`streamvid serve --ui`, the `streamvid.ui` entry point)
    sessions.py    one session: its streams on the hub started and stopped, the calls of page and API
    session_asking.py   its questions and standing conditions
    session_reading.py  what it shows: outputs since a cursor, stats, chat, alerts
    transcript.py  a stream's outputs (as the hub's fan-out delivers them) into the chat, the poll log, the alerts
    inputs.py      what a page may open: the hub's source policy plus its uploads and the operator's --video
    login.py       password length, and repeated failed logins slowed down
    uploads.py     uploads removed when their session is done with them, the folders kept under a quota
    voice.py       answers and alerts spoken sentence by sentence, interrupted by a new question; "hold to talk"
    voice_ui.py    the page's player and its "Speak answers", "Stop speaking" and "Hold to talk" controls
    chat.py        the wording of each chat line: stream times as clocks, answers, alerts, remarks, errors

Layout and callbacks only: no model logic and no torch here. Streams, sources, frames, validation, the push clock
and idle reaping are the hub's (the same as `streamvid serve`'s); everything goes through streamvid's public API.
Installed as the package `streamvid_app`.
"""
