"""The page's voice controls (Gradio): the player that speaks answers and alerts ("Speak answers", "Stop speaking")
and "Hold to talk". What is said, and when, is voice.py's `PageVoice`; this module moves its clips to the player.

    panel = voice_panel(manager)                    # inside the page's Blocks, under the question box
    wire_voice(manager, panel, chat, ask_timeout_s)

The player is a plain `gr.Audio(autoplay=True)` (the browser's own <audio>, `#sv-voice`): each clip is a WAV of the
sentences synthesized so far. A timer (every VOICE_EVERY_S) hands the player the first clip of an answer or alert as
soon as it is ready, and the player's end of playback ("stop" event) asks for the next one, waiting for the
next sentence, so that an answer is heard sentence by sentence as it is generated, without gaps. A clip set over the
one playing replaces it (an interrupting answer); an empty value stops it. Gradio's streamed audio output needs the
ffmpeg program, which this app does not: WAV files play in every browser.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from streamvid.audio.voices import best_voice
from streamvid_app.api import USER_ERRORS, ArgumentError, existing_session, with_session
from streamvid_app.manager import SessionManager
from streamvid_app.voice import STOP

VOICE_EVERY_S = 0.3  # how often the page looks for the first clip of something to say
ENDED_WAIT_S = 5.0  # after a clip ends, how long the next sentence of the same answer is waited for


@dataclass
class VoicePanel:
    player: gr.Audio
    speak: gr.Checkbox
    stop: gr.Button
    talk: gr.Checkbox
    timer: gr.Timer


def voice_panel(manager: SessionManager) -> VoicePanel:
    on = manager.voice is not None
    with gr.Row(equal_height=True):
        speak = gr.Checkbox(value=on, interactive=on, scale=2, elem_id="sv-speak",
                            label="Speak answers" + (f" ({getattr(manager.voice, 'name', '')})" if on else
                                                     f": no voice (the best installed: {best_voice()}; --tts)"))
        stop = gr.Button("Stop speaking", scale=1, elem_id="sv-stop-speaking")
        talk = gr.Checkbox(value=False, scale=3, elem_id="sv-talk",
                           label="Hold to talk: while ticked the microphone (Webcam tab) hears a question; untick to "
                                 "ask it")
    player = gr.Audio(label="Spoken answer", autoplay=True, interactive=False, elem_id="sv-voice",
                      waveform_options=gr.WaveformOptions(show_recording_waveform=False))
    return VoicePanel(player, speak, stop, talk, gr.Timer(VOICE_EVERY_S, active=on))


def _played(out: str | None):
    """next_clip's answer as the player's new value: a clip, None (stop), or nothing to change."""
    if out is None:
        return gr.skip()
    return None if out == STOP else out


def wire_voice(manager: SessionManager, panel: VoicePanel, chat: gr.Chatbot, ask_timeout_s: float) -> None:
    def voice_of(request: gr.Request):
        s = existing_session(manager, request)
        return (s, s.voice) if s is not None and s.voice is not None else (s, None)

    def tick(request: gr.Request):
        _, voice = voice_of(request)
        if voice is None:
            return gr.skip()
        if voice.error:
            gr.Warning(voice.error)
            voice.error = None
        return _played(voice.next_clip())

    def ended(request: gr.Request):
        _, voice = voice_of(request)
        return gr.skip() if voice is None else _played(voice.next_clip(ended=True, wait_s=ENDED_WAIT_S))

    def speak(on: bool, request: gr.Request):
        if not isinstance(on, bool):
            raise gr.Error(f"speak must be true or false, got {on!r}"[:120], print_exception=False)
        if manager.voice is None:
            return gr.Timer(active=False), None
        try:
            with_session(manager, request, lambda s: s.voice.set_enabled(on))
        except USER_ERRORS as e:
            raise gr.Error(str(e), print_exception=False) from e
        return gr.Timer(active=on), gr.skip() if on else None

    def stop_speaking(request: gr.Request):
        _, voice = voice_of(request)
        if voice is not None:
            voice.interrupt()
            voice.next_clip()  # the stop is this one: the player stops now
        return None

    def talk(on: bool, request: gr.Request):
        if not isinstance(on, bool):
            raise gr.Error(f"talk must be true or false, got {on!r}"[:120], print_exception=False)
        try:
            s, asked = with_session(manager, request, lambda s: (s, s.talk(on)))
        except (*USER_ERRORS, ArgumentError) as e:
            raise gr.Error(str(e), print_exception=False) from e
        if asked is None:  # turned on (what is said stops), or off without a recording
            yield gr.skip(), None if on else gr.skip()
            return
        yield s.chat(), gr.skip()  # the words heard, as the question
        for _ in s.follow(asked[1], ask_timeout_s):
            yield s.chat(), gr.skip()

    private = {"api_visibility": "private", "concurrency_limit": None, "show_progress": "hidden"}
    panel.timer.tick(tick, None, panel.player, **private)
    panel.player.stop(ended, None, panel.player, **private)
    panel.speak.input(speak, [panel.speak], [panel.timer, panel.player], **private)
    panel.stop.click(stop_speaking, None, panel.player, **private)
    panel.talk.input(talk, [panel.talk], [chat, panel.player], **private)
