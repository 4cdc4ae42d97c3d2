"""The scriptable API of `streamvid demo` (plain Gradio endpoints), and how a call finds its session.

    /start(source, video=None) -> status      source: a demo clip name, a URL, "push", or "" with `video` a file
    /push_frame(image, t_s=None) -> status    an RGB image for a "push" stream, at stream time t_s (None: now)
    /ask(question) -> answer                  waits for the whole answer
    /watch(condition, fire=None, reset=None) -> {"trigger_id"}    /unwatch(trigger_id) -> status
    /poll(cursor) -> {"cursor", "outputs"}    answers, alerts, remarks and status events since cursor
    /status() -> stats                        /stop() -> stats

Every endpoint checks its arguments first (streamvid.hub.validation) and answers a one-line error; a call makes a
session only when it succeeds (SessionManager.call). The page's callbacks (ui.py) find their sessions the same way.
A pushed image arrives as a file (gradio stores it; no decoding there) and is read by the hub, which refuses it
above the pixel cap from its header, in one line.
"""

from __future__ import annotations

import functools

import gradio as gr

from streamvid.hub import validation
from streamvid.errors import ArgumentError, HubError, Refused
from streamvid_app.chat import model_name
from streamvid_app.inputs import VIDEO_SUFFIXES
from streamvid_app.manager import SessionManager
from streamvid_app.sessions import Session

USER_ERRORS = (HubError, ValueError, OSError)  # the hub's refusals, and a bad value or file of the user's
MIN_REST_HASH = 16  # characters of a session hash that a REST call chooses itself
IMAGE_SUFFIXES = [".png", ".jpg", ".jpeg", ".webp"]  # the files streamvid.hub.images reads (PNG, JPEG, WebP)


def user_errors(fn):
    """Errors a user can cause become a message in the page (gr.Error); the session lives on."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as e:
            raise gr.Error(str(e), print_exception=False) from e

    return wrapper


def session_key(request: gr.Request) -> str:
    """A session belongs to the login user (with auth on) and gradio's session hash, so that one user never reaches
    another's session; a REST call (`/gradio_api/call/...`) that names its own hash must make it at least
    MIN_REST_HASH characters long (the page's own hashes are random and are not checked)."""
    h = request.session_hash or ""
    url = getattr(request, "url", None)
    if "/call/" in str(getattr(url, "path", "")) and len(h) < MIN_REST_HASH:
        raise ArgumentError(f"session_hash must be at least {MIN_REST_HASH} random characters, got {len(h)}")
    return f"{request.username}\n{h}" if request.username else h


def client_of(request: gr.Request) -> str:
    """Who holds a session, for the per-client limit: the login user, else the caller's address."""
    if request.username:
        return f"user:{request.username}"
    client = getattr(request, "client", None)
    return f"address:{getattr(client, 'host', '')}"


def with_session(manager: SessionManager, request: gr.Request, fn):
    """fn(session) on this caller's session, made for the call when there is none and kept only if it succeeds."""
    return manager.call(session_key(request), client_of(request), fn)


def existing_session(manager: SessionManager, request: gr.Request) -> Session | None:
    return manager.get(session_key(request))


def add_api(manager: SessionManager, ask_timeout_s: float) -> None:
    """Plain endpoints for gradio_client; each client (session hash) has its own session."""

    def idle_stats(request: gr.Request) -> dict:
        s = existing_session(manager, request)
        if s is not None:
            return s.status()
        return {"type": "stats", "running": False, "source": None, "model": model_name(manager.config.model),
                "device": str(manager.adapter.device)}

    @user_errors
    def start(source: str, request: gr.Request, video: str | None = None) -> dict:
        source = validation.text(source, "source", empty_ok=True)
        video = validation.optional_text(video, "video")
        spec = video if video and not source.strip() else source
        validation.text(spec, "source")
        return with_session(manager, request, lambda s: s.start(spec))

    @user_errors
    def push_frame(image: str | None, request: gr.Request, t_s: float | None = None) -> dict:
        if image is None:
            raise Refused("no image")
        path = validation.text(image, "image")
        try:
            t_s = validation.stream_time(t_s)
            if manager.uploads.owns(path) is None:
                raise Refused("the image must be a file uploaded to this server")
            return with_session(manager, request, lambda s: s.push_frame(path, t_s))
        finally:
            manager.uploads.discard(path)  # a pushed frame's upload is not kept

    @user_errors
    def ask(question: str, request: gr.Request) -> dict:
        """Ask about the stream so far; waits for the whole answer."""
        question = validation.text(question, "question")
        s, qid = with_session(manager, request, lambda s: (s, s.ask(question)))
        return s.wait_answer(qid, ask_timeout_s)

    @user_errors
    def watch(condition: str, request: gr.Request, fire: float | None = None, reset: float | None = None) -> dict:
        """Add a standing "tell me when ..." condition; `fire` / `reset` override the p(yes) thresholds."""
        condition = validation.text(condition, "condition")
        values = (("fire", validation.optional_number(fire, "fire", 0.0, 1.0)),
                  ("reset", validation.optional_number(reset, "reset", 0.0, 1.0)))
        thresholds = {k: v for k, v in values if v is not None}
        return {"trigger_id": with_session(manager, request, lambda s: s.watch(condition, **thresholds))}

    @user_errors
    def unwatch(trigger_id: str, request: gr.Request) -> dict:
        """Remove a standing condition."""
        trigger_id = validation.text(trigger_id, "trigger_id")
        s = existing_session(manager, request)
        removed = s.unwatch(trigger_id) if s is not None else False
        return {"type": "status", "event": "unwatched" if removed else "unknown_trigger", "trigger_id": trigger_id}

    @user_errors
    def poll(cursor: int, request: gr.Request) -> dict:
        """Answers, alerts, remarks and status events since `cursor` (0 at first)."""
        cursor = validation.cursor(cursor)
        s = existing_session(manager, request)
        return s.poll(cursor) if s is not None else {"cursor": 0, "outputs": []}

    @user_errors
    def status(request: gr.Request) -> dict:
        """The stats of this client's stream (the keys of `streamvid run`'s stats line)."""
        return idle_stats(request)

    @user_errors
    def stop(request: gr.Request) -> dict:
        """Stop this client's stream; returns its final stats."""
        s = existing_session(manager, request)
        return s.stop() if s is not None else idle_stats(request)

    with gr.Column(visible=False):
        source = gr.Textbox(label="source")
        video = gr.File(label="video", file_types=list(VIDEO_SUFFIXES), type="filepath")
        # a file, read by the hub: sized from its header before anything decodes it
        image = gr.File(label="image", file_types=IMAGE_SUFFIXES, type="filepath")
        t_s = gr.Number(label="t_s", value=None)
        out = gr.JSON()
        trigger_start, trigger_push = gr.Button(), gr.Button()
    trigger_start.click(start, [source, video], out, api_name="start", concurrency_limit=None)
    trigger_push.click(push_frame, [image, t_s], out, api_name="push_frame", concurrency_limit=None)
    for fn in (ask, watch, unwatch, poll, status, stop):
        gr.api(fn, api_name=fn.__name__, concurrency_limit=None)
