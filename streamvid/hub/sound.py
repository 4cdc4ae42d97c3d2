"""Sound pushed to a hub stream (`POST /v1/streams/{id}/audio`, the realtime socket's `input_audio_buffer.append`):
a WAV body, or raw PCM16 mono at a given rate, heard by the stream's own listener from the first push on.

    heard = push_sound(s, body, "audio/wav", config)                       # {"t_s", "t_end_s", "utterances"}
    heard = push_sound(s, raw, "audio/pcm", config, rate=24000, t_s=12.0)
    set_silence(s, config, 0.8)             # a pause of 0.8 s ends an utterance (a socket's turn detection)

Sound goes to push streams only (a file, camera or URL stream hears its own). Its time is the client's `t_s` (0 to
ten years), or where the last push ended (the stream's newest frame for the first). What a body claims is checked
before it is decoded (pcm.py: 8-192 kHz, 1-8 channels, at most 10 minutes), and each stream has a sound budget
(sound_budget.py: twice real time and a 10-s burst; past it a push is Busy). Refusals are the hub's errors, one line
each.
The voice detector's edges in pushed sound are the stream's {"type": "voice_activity"} outputs.
"""

from __future__ import annotations

import threading
import weakref

from streamvid.assistant.hearing import Hearing, asr_device
from streamvid.audio import recognition
from streamvid.audio.asr import load_recognizer
from streamvid.audio.pcm import RATE, pcm16_duration_s, pcm16_samples, wav_duration_s, wav_samples
from streamvid.engine.stream import BusyError
from streamvid.errors import Conflict, Refused, UnsupportedMedia
from streamvid.hub.sound_budget import SoundBudget
from streamvid.hub.stream import HubStream
from streamvid.hub.validation import MAX_STREAM_S, optional_number
from streamvid.language import wake_word

WAV = ("audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave")
PCM = ("audio/pcm", "audio/l16", "application/octet-stream")


def media_type(content_type: str | None) -> str:
    """The body's kind ("wav" or "pcm") from its Content-Type; Unsupported (one line) for anything else."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind in WAV:
        return "wav"
    if kind in PCM:
        return "pcm"
    raise UnsupportedMedia(f"audio must be a WAV (audio/wav) or raw PCM16 (audio/pcm with ?rate=), got "
                      f"{kind or 'no Content-Type'!r}")


def spoken_question(config, data: bytes, fmt: object, key: str = "") -> str:
    """The words of a recorded question (an OpenAI `input_audio` part: WAV bytes) about stream `key`, a leading wake
    word left out, heard in that stream's turn at the recogniser (audio/recognition.py). Refused (one line) for
    another format, a body that is not a WAV, one longer than recognition.QUESTION_MAX_S, or one in which no words
    are heard."""
    if fmt != "wav":
        raise Refused(f'input_audio format must be "wav", got {str(fmt)[:20]!r}')
    if config.audio == "off":
        raise Conflict("this server does not hear sound (--audio off)")
    try:
        samples = wav_samples(data)
    except ValueError as e:
        raise Refused(f"input_audio: {e}") from None
    recognizer = load_recognizer(config.asr, asr_device(config))
    try:
        text = recognition.question(recognizer, samples, config.wake_word, key)
    except ValueError as e:
        raise Refused(f"input_audio: {e}") from None
    text = wake_word.spoken_question(text, config.wake_word)
    if not text.strip(" .,!?-"):
        raise Refused("input_audio: no words were heard in it")
    return text


def push_sound(s: HubStream, body: bytes, content_type: str | None, config, rate: int | None = None,
               t_s: float | None = None) -> dict:
    """`body` heard by stream `s` from `t_s`. Checked before anything is decoded: the media type, the stream, `t_s`
    (finite, 0 to ten years, as frames' times), the WAV header or PCM16 rate (8-192 kHz) and length, and the stream's
    sound budget (sound_budget.py: Busy past twice real time and a 10-s burst)."""
    kind = media_type(content_type)
    _check_pushable(s, config)
    budget, seconds = budget_of(s), 0.0
    try:
        t_s = optional_number(t_s, "t_s", 0.0, MAX_STREAM_S)
        if kind == "pcm":
            if rate is None:
                raise ValueError("raw PCM16 needs its sample rate: ?rate=24000")
            budget.take(seconds := pcm16_duration_s(body, rate))
            samples = pcm16_samples(body, rate)
        else:
            budget.take(seconds := wav_duration_s(body))
            samples = wav_samples(body)
        start = _hearing(s, config).push(samples, t_s)
    except BusyError:  # (a Busy of the error family: the recogniser is behind, the push was not heard)
        budget.give_back(seconds)
        raise
    except ValueError as e:
        budget.give_back(seconds)
        raise Refused(str(e)) from None
    return {"t_s": round(start, 3), "t_end_s": round(start + len(samples) / RATE, 3),
            "utterances": s.sa.stream.utterances}


_budgets: dict[str, tuple[weakref.ref, SoundBudget]] = {}
_budgets_lock = threading.Lock()


def budget_of(s: HubStream) -> SoundBudget:
    """The sound budget of stream `s` (one per stream, for as long as it lives)."""
    with _budgets_lock:
        held = _budgets.get(s.id)
        if held is None or held[0]() is not s:
            if len(_budgets) >= 256:  # the budgets of streams gone or closed are dropped
                for sid, (ref, _) in list(_budgets.items()):
                    if ref() is None or ref().done.is_set():
                        del _budgets[sid]
            held = _budgets[s.id] = (weakref.ref(s), SoundBudget())
        return held[1]


def set_silence(s: HubStream, config, silence_s: float) -> None:
    """How long a pause ends an utterance in the sound pushed to `s` (a realtime socket's `silence_duration_ms`)."""
    _check_pushable(s, config)
    _hearing(s, config).set_silence(silence_s)


def _check_pushable(s: HubStream, config) -> None:
    if s.push is None:
        raise Conflict(f"stream {s.id} plays {s.source!r}, which is heard from its own sound track: sound can only "
                       f"be pushed to a \"push\" stream")
    if config.audio == "off":
        raise Conflict("this server does not hear sound (--audio off)")


def _hearing(s: HubStream, config) -> Hearing:
    """The stream's listener from the first push on (its assistant closes it); the voice detector's edges are its
    voice_activity outputs."""
    with s.lock:
        if s.sa.hearing is None:
            s.sa.hearing = Hearing(s.sa.stream, load_recognizer(config.asr, asr_device(config)), voice_events=True)
        return s.sa.hearing
