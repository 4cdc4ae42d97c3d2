"""The web page of `streamvid demo` (Gradio): layout and callbacks only.

    from streamvid_app.ui import build_demo
    from streamvid_app.server import launch
    demo = build_demo(manager)            # a SessionManager (streamvid_app.manager): the page and the API
    launch(demo, host="127.0.0.1", port=7860, auth=None, max_upload_mb=200)

Every callback maps onto one `Session` method; a session belongs to the login user and gradio's session hash, so
each browser tab and each `gradio_client.Client` has its own assistant (api.py: `session_key`). The page: inputs
(webcam, demo clip, upload, URL), what the assistant sees with the stream time, live stats, a chat whose answers
stream in marked with their stream time and are spoken aloud (voice_ui.py: "Speak answers", "Stop speaking", "Hold
to talk"), standing "tell me when" conditions with an alert timeline. A `gr.Timer` refreshes the page once a second. The scriptable endpoints are api.py's.
"""

from __future__ import annotations

import html
import tempfile
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from streamvid.hub import validation
from streamvid.errors import Refused
from streamvid_app.api import (
    USER_ERRORS,
    ArgumentError,
    add_api,
    existing_session,
    session_key,
    user_errors,
    with_session,
)
from streamvid_app.alert_clips import alert_clip, alert_thumbnails, ready_ids
from streamvid_app.chat import alert_text, clock, heard_text, model_name
from streamvid_app.inputs import VIDEO_SUFFIXES
from streamvid_app.manager import SessionManager
from streamvid_app.page_style import ON_LOAD_JS
from streamvid_app.voice_ui import voice_panel, wire_voice

REFRESH_S = 1.0  # how often the page's timer refreshes stats, preview, chat and timeline
MIC_EVERY_S = 0.5  # how often the microphone's sound is sent
CAPTIONS = 3  # the newest utterances shown under the picture
PREVIEW_PX = 224  # smaller frames are shown enlarged (nearest neighbour) in "what the assistant sees"
_UNSEEN = {"v": -1, "f": -1, "t": None, "g": None, "c": None}  # what a tab has rendered: session version, frame
# index, trigger ids, the alert ids in its gallery, the second of stream time its timeline spans to


# ---- the page ---------------------------------------------------------------------------------------------
@dataclass
class _Page:
    now: gr.Markdown
    frame: gr.Image
    captions: gr.Markdown
    stats: gr.Markdown
    chat: gr.Chatbot
    timeline: gr.HTML
    alerts: gr.Gallery
    triggers: gr.Dropdown
    seen: gr.State  # what the tab last rendered (see _UNSEEN)


def build_demo(manager: SessionManager, ask_timeout_s: float = 120.0) -> gr.Blocks:
    """The page and the API endpoints, on `manager`'s sessions."""
    fps = manager.config.fps
    with gr.Blocks(title="streamvid", analytics_enabled=False) as demo:
        add_api(manager, ask_timeout_s)  # first: the endpoints get their names before the page's private events
        gr.Markdown(f"## streamvid — ask a live video stream\nModel **{_model_label(manager)}**. Pick an input "
                    f"and press start (or record with the webcam), then ask at any moment; answers are marked "
                    f"with the stream time they refer to.")
        with gr.Row():
            with gr.Column(scale=5):
                inputs = _inputs(manager)
                page_now = gr.Markdown("*Nothing is playing.*", elem_id="sv-now")
                page_frame = gr.Image(label="What the assistant sees", interactive=False, height=240,
                                      elem_id="sv-frame")
                page_captions = gr.Markdown(_captions_md([]), elem_id="sv-captions")
                page_stats = gr.Markdown(elem_id="sv-stats")
            with gr.Column(scale=6):
                chat = gr.Chatbot(label="Chat", height=380, group_consecutive_messages=False, elem_id="sv-chat")
                with gr.Row():
                    question = gr.Textbox(placeholder="Ask about the stream, e.g. How many shapes are on screen?",
                                          show_label=False, scale=5, elem_id="sv-question")
                    ask_btn = gr.Button("Ask", variant="primary", scale=1, elem_id="sv-ask")
                voice = voice_panel(manager)
                watch = _trigger_panel(manager.config.narration.on)
                timeline = gr.HTML(_timeline_html([], None), elem_id="sv-timeline")
                alert_gallery = gr.Gallery(label="Alerts, newest first: the frame each fired on (click for its clip)",
                                           columns=5, height=200, fit_columns=False, object_fit="contain",
                                           allow_preview=False, elem_id="sv-alert-gallery")
                alert_video = gr.Video(label="The clip around the alert", interactive=False, autoplay=True,
                                       height=260, visible=False, elem_id="sv-alert-clip")  # shown with a clip
        page = _Page(page_now, page_frame, page_captions, page_stats, chat, timeline, alert_gallery, watch["list"],
                     gr.State(_UNSEEN))
        _wire_inputs(manager, inputs, page, fps)
        _wire_chat(manager, question, ask_btn, page, ask_timeout_s)
        wire_voice(manager, voice, chat, ask_timeout_s)
        _wire_triggers(manager, watch, page)
        _wire_alerts(manager, page, alert_video)
        timer = gr.Timer(REFRESH_S)

        def refresh(seen: dict, request: gr.Request):
            return _render(manager, request, seen)

        def unload(request: gr.Request) -> None:
            manager.close(session_key(request))

        timer.tick(refresh, [page.seen], _outputs(page), api_visibility="private", show_progress="hidden",
                   concurrency_limit=None)
        demo.unload(unload)
        demo.load(None, None, None, js=ON_LOAD_JS)
    return demo


def _inputs(manager: SessionManager) -> dict:
    policy = manager.policy
    with gr.Tabs():
        with gr.Tab("Demo clip", id="clip"):
            choices = policy.choices()
            clip = gr.Dropdown(choices, value=choices[0] if choices else None, label="Clip", elem_id="sv-clip")
            clip_btn = gr.Button("Start clip", variant="primary", elem_id="sv-start-clip")
        with gr.Tab("Webcam", id="webcam"):
            webcam = gr.Image(sources=["webcam"], streaming=True, type="numpy", image_mode="RGB",
                              webcam_options=gr.WebcamOptions(mirror=False), label="Webcam", elem_id="sv-webcam")
            gr.Markdown(f"Record to stream frames to the assistant ({manager.config.fps:g} per second; the latest "
                        f"frame wins when the model is busy).")
            mic = gr.Audio(sources=["microphone"], streaming=True, type="numpy", label="Microphone",
                           elem_id="sv-mic")
            gr.Markdown("Record the microphone too and the assistant hears what is said (captions below the "
                        "picture); say “assistant, …” to ask it a question.")
        with gr.Tab("Upload", id="upload"):
            upload = gr.File(label=f"Video file ({', '.join(VIDEO_SUFFIXES)}; up to {policy.max_upload_mb:g} MB)",
                             file_types=list(VIDEO_SUFFIXES), type="filepath", elem_id="sv-upload")
            upload_btn = gr.Button("Play upload", variant="primary", elem_id="sv-start-upload")
        with gr.Tab("URL", id="url"):
            url = gr.Textbox(label="Stream URL", placeholder="rtsp://camera.local/stream or https://.../clip.mp4",
                             elem_id="sv-url")
            url_btn = gr.Button("Start URL", variant="primary", elem_id="sv-start-url")
    stop_btn = gr.Button("Stop stream", variant="stop", elem_id="sv-stop")
    return {"clip": clip, "clip_btn": clip_btn, "webcam": webcam, "mic": mic, "upload": upload,
            "upload_btn": upload_btn, "url": url, "url_btn": url_btn, "stop_btn": stop_btn}


def _trigger_panel(narrate_default: bool) -> dict:
    gr.Markdown("**Tell me when …**")
    with gr.Row():
        condition = gr.Textbox(placeholder="a red circle appears", show_label=False, scale=5,
                               elem_id="sv-condition")
        add = gr.Button("Watch", scale=1, elem_id="sv-watch")
    with gr.Row():
        active = gr.Dropdown([], label="Standing conditions", scale=5, elem_id="sv-triggers")
        remove = gr.Button("Remove", scale=1, elem_id="sv-unwatch")
    narrate = gr.Checkbox(value=narrate_default, label="Narrate: comment on scene changes without being asked "
                          "(from the next start)", elem_id="sv-narrate")
    return {"condition": condition, "add": add, "list": active, "remove": remove, "narrate": narrate}


def _outputs(page: _Page) -> list:
    return [page.now, page.frame, page.captions, page.stats, page.chat, page.timeline, page.alerts, page.triggers,
            page.seen]


# ---- callbacks --------------------------------------------------------------------------------------------
def _wire_inputs(manager: SessionManager, inputs: dict, page: _Page, fps: float) -> None:
    @user_errors
    def start(spec: str, request: gr.Request):
        with_session(manager, request, lambda s: s.start(validation.text(spec, "source")))
        return _render(manager, request, _UNSEEN)

    @user_errors
    def start_upload(path: str | None, request: gr.Request):
        if not path:
            raise Refused("choose a video file first")
        return start(path, request)

    @user_errors
    def stop(request: gr.Request):
        s = existing_session(manager, request)
        if s is not None:
            s.stop()
        return _render(manager, request, _UNSEEN)

    def on_mic(chunk, request: gr.Request):
        if chunk is None:
            return
        rate, samples = chunk
        try:
            with_session(manager, request, lambda s: s.push_audio(rate, samples))
        except USER_ERRORS as e:
            gr.Warning(str(e))

    def on_webcam(image, request: gr.Request):
        if image is None:
            return
        try:
            with_session(manager, request, lambda s: s.push_frame(image, webcam=True))
        except USER_ERRORS as e:  # shown once per frame would flood the page: a warning toast
            gr.Warning(str(e))

    private = {"api_visibility": "private", "concurrency_limit": None}
    outs = _outputs(page)
    inputs["clip_btn"].click(start, [inputs["clip"]], outs, **private)
    inputs["url_btn"].click(start, [inputs["url"]], outs, **private)
    inputs["url"].submit(start, [inputs["url"]], outs, **private)
    inputs["upload_btn"].click(start_upload, [inputs["upload"]], outs, **private)
    inputs["stop_btn"].click(stop, None, outs, **private)
    inputs["webcam"].stream(on_webcam, [inputs["webcam"]], None, stream_every=1.0 / fps, time_limit=None,
                            show_progress="hidden", **private)
    inputs["mic"].stream(on_mic, [inputs["mic"]], None, stream_every=MIC_EVERY_S, time_limit=None,
                         show_progress="hidden", **private)


def _wire_chat(manager: SessionManager, question: gr.Textbox, ask_btn: gr.Button, page: _Page,
               ask_timeout_s: float) -> None:
    def ask(text: str, request: gr.Request):
        try:
            s, qid = with_session(manager, request, lambda s: (s, s.ask(validation.text(text, "question"))))
        except USER_ERRORS as e:
            raise gr.Error(str(e), print_exception=False) from e
        yield "", s.chat()
        for _ in s.follow(qid, ask_timeout_s):
            yield gr.skip(), s.chat()

    for event in (ask_btn.click, question.submit):
        event(ask, [question], [question, page.chat], api_visibility="private", concurrency_limit=None,
              show_progress="hidden")


def _wire_triggers(manager: SessionManager, panel: dict, page: _Page) -> None:
    @user_errors
    def add(condition: str, request: gr.Request):
        with_session(manager, request, lambda s: s.watch(validation.text(condition, "condition")))
        return "", *_render(manager, request, _UNSEEN)

    @user_errors
    def remove(trigger_id: str | None, request: gr.Request):
        s = existing_session(manager, request)
        if trigger_id and s is not None:
            s.unwatch(trigger_id)
        return _render(manager, request, _UNSEEN)

    @user_errors
    def narrate(on: bool, request: gr.Request) -> None:
        if not isinstance(on, bool):
            raise ArgumentError(f"narrate must be true or false, got {on!r}"[:120])
        with_session(manager, request, lambda s: setattr(s, "narrate", on))

    outs = _outputs(page)
    private = {"api_visibility": "private", "concurrency_limit": None}
    panel["narrate"].input(narrate, [panel["narrate"]], None, **private)
    panel["add"].click(add, [panel["condition"]], [panel["condition"], *outs], **private)
    panel["condition"].submit(add, [panel["condition"]], [panel["condition"], *outs], **private)
    panel["remove"].click(remove, [panel["list"]], outs, **private)


def _wire_alerts(manager: SessionManager, page: _Page, video: gr.Video) -> None:
    def play(seen: dict, evt: gr.SelectData, request: gr.Request):
        s = existing_session(manager, request)
        ids = (seen or {}).get("g") or []
        if s is None or not isinstance(evt.index, int) or not 0 <= evt.index < len(ids):
            return gr.skip()
        path = alert_clip(s.assistant, ids[evt.index], Path(tempfile.gettempdir()), session_key(request))
        if path is None:
            gr.Info("That alert's clip is still being recorded (it ends a few seconds after the alert).")
            return gr.skip()
        return gr.Video(value=str(path), visible=True)

    page.alerts.select(play, [page.seen], video, api_visibility="private", concurrency_limit=None)


def _render(manager: SessionManager, request: gr.Request, seen: dict) -> tuple:
    """The page's live parts for this tab's session; parts that did not change since `seen` are skipped."""
    s = existing_session(manager, request)
    if s is None:
        return ("*Nothing is playing.*", gr.skip(), gr.skip(), _stats_md(None), gr.skip(), gr.skip(), gr.skip(),
                gr.skip(), seen)
    status = s.status()
    frame = s.latest_frame()
    frame_index = frame.index if frame is not None else -1
    version = s.version
    changed = version != seen.get("v")
    second = int(status.get("t_s") or 0)  # the timeline's span follows the stream time
    triggers = s.triggers()
    ids = [t.get("trigger_id") for t in triggers]
    heard = s.heard() if changed else []
    shown, gallery = ready_ids(s.assistant), gr.skip()
    if shown != seen.get("g"):  # thumbnails decoded only when the alerts shown change
        thumbs = alert_thumbnails(s.assistant)
        shown, gallery = [alert_id for _, _, alert_id in thumbs], [(image, caption) for image, caption, _ in thumbs]
    return (
        _now_md(status),
        _enlarged(frame.image) if frame is not None and frame_index != seen.get("f") else gr.skip(),
        _captions_md(heard) if changed else gr.skip(),
        _stats_md(status),
        s.chat() if changed else gr.skip(),
        _timeline_html(s.alerts(), status.get("t_s"), s.heard()) if changed or second != seen.get("c") else gr.skip(),
        gallery,
        gr.Dropdown(choices=[(f"{t.get('condition')} ({t.get('trigger_id')})", t.get("trigger_id"))
                             for t in triggers], value=ids[-1] if ids else None)
        if ids != seen.get("t") else gr.skip(),
        {"v": version, "f": frame_index, "t": ids, "g": shown, "c": second},
    )


def _enlarged(image):
    factor = max(1, PREVIEW_PX // max(image.shape[:2]))
    return image.repeat(factor, 0).repeat(factor, 1) if factor > 1 else image


def _model_label(manager: SessionManager) -> str:
    return f"{model_name(manager.config.model)} on {manager.adapter.device}"


def _now_md(status: dict) -> str:
    if status.get("source") is None:
        return "*Nothing is playing.*"
    if status.get("error"):
        state = f"stopped with an error: {status['error']}"
    elif status.get("running"):
        state = "watching"
    elif status.get("stopped") and status.get("can_ask"):
        state = "stopped (questions still work on what it saw)"
    elif status.get("ended") and status.get("can_ask"):
        state = "stream ended (questions still work)"
    else:
        state = "stopped"
    return f"**{html.escape(str(status['source']))}** — {state} — stream time **{clock(status.get('t_s'))}**"


def _stats_md(status: dict | None) -> str:
    if status is None or status.get("frames_in") is None:
        return "| live stats | |\n|---|---|\n| frames in / dropped | 0 / 0 |"
    rate = status.get("ingest_frames_per_s")
    ttft = status.get("last_ttft_ms")
    rows = [
        ("stream time", clock(status.get("t_s"))),
        ("frames in / dropped", f"{status['frames_in']} / {status['frames_dropped']}"),
        ("ingest rate", f"{rate:.1f} frames/s of encode time" if rate else "–"),
        ("window", f"{status['window_tokens']} tokens in {status['blocks_in_window']} blocks"),
        ("memory", (f"{status['blocks_in_ram']} blocks in RAM ({status['memory_ram_mb']:.2f} MB), "
                    f"{status['blocks_on_disk']} on disk ({status['memory_disk_mb']:.2f} MB)")),
        ("last TTFT", f"{ttft:.0f} ms" if ttft is not None else "–"),
        ("model", f"{status['model']} on {status['device']}"),
    ]
    return "| live stats | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


def _width(utterance: dict, span: float) -> float:
    """An utterance's share of the timeline, in percent (at least a visible sliver)."""
    return max(0.3, 100 * ((utterance.get("t_end_s") or 0.0) - (utterance.get("t_s") or 0.0)) / span)


def _captions_md(heard: list[dict]) -> str:
    """The newest words heard in the stream's sound, under the picture."""
    if not heard:
        return "*Heard: nothing yet.*"
    return "**Heard** " + "  \n".join(html.escape(heard_text(t)) for t in heard[-CAPTIONS:])


def _timeline_html(alerts: list[dict], now_s: float | None, heard: list[dict] = ()) -> str:
    """A strip of the stream so far with one mark per alert (hover: condition, score, evidence) and one per
    utterance heard (hover: its words)."""
    span = max([now_s or 0.0, 1.0] + [a.get("t_s") or 0.0 for a in (*alerts, *heard)])
    marks = "".join(
        f'<div class="sv-mark" title="{html.escape(alert_text(a))}" style="position:absolute;'
        f'left:{100 * (a.get("t_s") or 0.0) / span:.2f}%;top:0;width:3px;height:18px;background:#e8590c"></div>'
        for a in alerts) + "".join(
        f'<div class="sv-heard" title="{html.escape(heard_text(t))}" style="position:absolute;'
        f'left:{100 * (t.get("t_s") or 0.0) / span:.2f}%;bottom:0;width:{_width(t, span):.2f}%;'
        f'height:6px;background:#1c7ed6"></div>' for t in heard)
    listing = "".join(f"<li>{html.escape(alert_text(a))}</li>" for a in list(alerts)[-5:][::-1])
    return (f'<div><b>Alerts</b> ({len(alerts)}) — 00:00 to {clock(span)}'
            f'<div style="position:relative;height:18px;background:#eee;border-radius:3px;margin:4px 0">'
            f'{marks}</div><ul style="margin:0">{listing or "<li><i>none yet</i></li>"}</ul></div>')


