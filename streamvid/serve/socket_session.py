"""What the older realtime socket's (`/v1/streams/{id}/realtime`) `session.update` may say, read and checked whole
before anything changes (voice_turns.py applies it). Both OpenAI Realtime shapes are read: the GA one (`"audio": {"input": {"format",
"turn_detection"}, "output": {"format", "voice"}}`) and the beta one (`input_audio_format`, `output_audio_format`,
`voice`, `turn_detection` at the top).

    settings = read_session({"turn_detection": None, "voice": "alloy"})   # {"turn_detection": None, "voice": "alloy"}

Applied: `turn_detection` (null, or {"type": "server_vad", "silence_duration_ms"}), `output_modalities` (or
`modalities`), the input and output formats (PCM16 at 24 kHz only: "pcm16", or {"type": "audio/pcm", "rate": 24000}),
and `voice` (one of OpenAI's voice names, or "server": the server's --tts voice speaks either way).
Taken and ignored (the engine has no use for them): type, model, instructions, tools, tool_choice, temperature,
max_response_output_tokens, max_output_tokens, input_audio_transcription, input_audio_noise_reduction, include,
tracing, truncation, prompt, speed (and audio.input.transcription / noise_reduction, audio.output.speed, and
turn_detection's threshold, prefix_padding_ms, create_response, interrupt_response, idle_timeout_ms). Anything
else, another format (`audio/pcmu`, `g711_ulaw`, ...) or an unknown voice is refused in one line naming the field,
and nothing changes.
"""

from __future__ import annotations

from streamvid.errors import Refused

SILENCE_MS = (100, 5000)  # the silence_duration_ms a session may set
VOICES = ("alloy", "ash", "ballad", "cedar", "coral", "echo", "fable", "marin", "nova", "onyx", "sage", "shimmer",
          "verse", "server")
APPLIED = ("turn_detection", "output_modalities", "modalities", "input_audio_format", "output_audio_format", "voice",
           "audio")
IGNORED = ("type", "model", "instructions", "tools", "tool_choice", "temperature", "max_response_output_tokens",
           "max_output_tokens", "input_audio_transcription", "input_audio_noise_reduction", "include", "tracing",
           "truncation", "prompt", "speed", "id", "object", "expires_at", "client_secret")
AUDIO_INPUT = ("format", "turn_detection", "transcription", "noise_reduction")
AUDIO_OUTPUT = ("format", "voice", "speed")
TURN_DETECTION = ("type", "silence_duration_ms", "threshold", "prefix_padding_ms", "create_response",
                  "interrupt_response", "idle_timeout_ms")
UNSET = object()


def read_session(session: object) -> dict:
    """The settings `session` changes: some of "turn_detection" (None or {"silence_ms"}), "audio_out" (bool) and
    "voice"; Refused (one line, naming the field) for anything not taken."""
    if not isinstance(session, dict):
        raise Refused('session.update needs "session": an object')
    _known(session, APPLIED + IGNORED, "session")
    audio = _object(session.get("audio", {}), "session.audio")
    _known(audio, ("input", "output"), "session.audio")
    audio_in = _object(audio.get("input", {}), "session.audio.input")
    audio_out = _object(audio.get("output", {}), "session.audio.output")
    _known(audio_in, AUDIO_INPUT, "session.audio.input")
    _known(audio_out, AUDIO_OUTPUT, "session.audio.output")
    settings: dict = {}
    for name, value in (("session.turn_detection", session.get("turn_detection", UNSET)),
                        ("session.audio.input.turn_detection", audio_in.get("turn_detection", UNSET))):
        if value is not UNSET:
            settings["turn_detection"] = _turn_detection(value, name)
    modalities = session.get("output_modalities", session.get("modalities"))
    if modalities is not None:
        if not (isinstance(modalities, list) and set(modalities) <= {"text", "audio"}):
            raise Refused('output_modalities must be a list of "text" and "audio"')
        settings["audio_out"] = "audio" in modalities
    for name, value in (("session.input_audio_format", session.get("input_audio_format", UNSET)),
                        ("session.output_audio_format", session.get("output_audio_format", UNSET)),
                        ("session.audio.input.format", audio_in.get("format", UNSET)),
                        ("session.audio.output.format", audio_out.get("format", UNSET))):
        if value is not UNSET:
            _pcm16(value, name)
    for name, value in (("session.voice", session.get("voice", UNSET)),
                        ("session.audio.output.voice", audio_out.get("voice", UNSET))):
        if value is not UNSET:
            if value not in VOICES:
                raise Refused(f"{name}: unknown voice {str(value)[:40]!r}; one of {', '.join(VOICES)} (the "
                              f"server's own voice speaks)")
            settings["voice"] = value
    return settings


def _turn_detection(td: object, name: str) -> dict | None:
    if td is None:
        return None
    if not (isinstance(td, dict) and td.get("type") == "server_vad"):
        raise Refused(f'{name} must be null (commit by hand) or {{"type": "server_vad"}}')
    _known(td, TURN_DETECTION, name)
    if "silence_duration_ms" not in td:
        return {}
    ms = td["silence_duration_ms"]
    if isinstance(ms, bool) or not isinstance(ms, int | float) or not SILENCE_MS[0] <= ms <= SILENCE_MS[1]:
        raise Refused(f"silence_duration_ms must be a number from {SILENCE_MS[0]} to {SILENCE_MS[1]}, "
                      f"got {str(ms)[:20]}")
    return {"silence_ms": ms}


def _pcm16(fmt: object, name: str) -> None:
    """PCM16 mono at 24 kHz, in either shape; Refused naming `name` otherwise (pcmu/pcma/g711 would be heard as
    noise)."""
    if fmt == "pcm16":
        return
    if isinstance(fmt, dict) and fmt.get("type") == "audio/pcm" and fmt.get("rate", 24000) == 24000 and \
            set(fmt) <= {"type", "rate"}:
        return
    raise Refused(f'{name}: only PCM16 at 24 kHz is taken ("pcm16" or {{"type": "audio/pcm", "rate": 24000}}), '
                  f"got {str(fmt)[:60]}")


def _object(value: object, name: str) -> dict:
    if not isinstance(value, dict):
        raise Refused(f"{name} must be an object")
    return value


def _known(obj: dict, fields: tuple[str, ...], name: str) -> None:
    for key in obj:
        if key not in fields:
            raise Refused(f"{name}.{str(key)[:40]} is not a field this server takes; it takes {', '.join(fields)}")
