"""The web app of `streamvid demo`: a Gradio page and scriptable API over `StreamingAssistant` sessions.

    inputs.py    what a page or API client may open (demo clips, uploads, URLs, pushed frames) and how
    sessions.py  one assistant per browser tab / API client on one shared model; cap, idle cleanup
    ui.py        layout, callbacks and API endpoints (the only module that imports gradio)

Layout and callbacks only: no model logic and no torch here; everything goes through the public engine API.
"""
