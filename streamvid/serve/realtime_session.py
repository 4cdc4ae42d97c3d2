"""A GA realtime session's configuration (`GET /v1/realtime`, realtime_ga.py): OpenAI's session object, what a
`session.update` may change in it, and streamvid's own settings under the one namespaced key `streamvid`.

    session = SessionConfig(model="streamvid-tiny", stream_id="vs-1a2b", fps=2.0, audio_out=True)
    changes = session.update({"type": "realtime", "output_modalities": ["text"],
                              "audio": {"input": {"turn_detection": None}}})
    session.to_json()   # the whole session, as session.created / session.updated carry it

What is taken (anything else is refused with an OpenAI-shaped error naming the parameter, `ParamError`):
- `type`: "realtime" (transcription sessions are not served); `model`: the served model or an OpenAI realtime name
  (an alias of it); `instructions`: kept and echoed (the served model is prompted with the question alone);
- `output_modalities`: ["audio"] (spoken, with its transcript; the default when the server has a voice) or
  ["text"]; `max_output_tokens`: a whole number from 1 to 4096 or "inf" (an answer cut there is "incomplete");
- `audio.input.format` / `audio.output.format`: PCM16 at 24 kHz ({"type": "audio/pcm", "rate": 24000});
  `audio.input.turn_detection`: null (push to talk: commit by hand), {"type": "server_vad", "silence_duration_ms":
  100..5000, "create_response", "interrupt_response", "threshold", "prefix_padding_ms"} or {"type":
  "semantic_vad", ...}, which is served as server_vad (the pause that ends an utterance is the one setting the
  server's voice detector takes; threshold and prefix_padding_ms are echoed, not applied);
  `audio.input.transcription`: null (no transcription events) or {"model", "language", "prompt"} (any model name
  means the server's recogniser, --asr); `audio.input.noise_reduction`: null;
  `audio.output.voice`: any name (the server has one voice, --tts); `audio.output.speed`: 1.0;
- `tools`: [] and `tool_choice`: "auto" / "none" (no function calling); `tracing`, `prompt`, `truncation`,
  `include`, `reasoning`: null.
- `streamvid` (streamvid's own, all optional): `events` (true: this client also gets the stream's own outputs as
  `streamvid.*` events: `streamvid.alert`, `streamvid.answer`, `streamvid.transcript`, ...), `questions` ("all":
  every utterance server VAD hears is a question, as OpenAI's turn detection answers every turn, the default;
  "wake_word": only those that start with the server's wake word), `watches` (conditions to watch for: each new
  one is added, "tell me when" alerts come as server-initiated responses). `stream_id` and `fps` are read-only:
  a session attaches to a stream only when it connects (`?stream_id=`).
"""

from __future__ import annotations

import copy
import secrets

from streamvid.audio.vad import SILENCE_S

RATE = 24000
PCM = {"type": "audio/pcm", "rate": RATE}
SILENCE_MS = (100, 5000)
MAX_OUTPUT_TOKENS = 4096
NULL_ONLY = ("tracing", "prompt", "truncation", "include", "reasoning")
QUESTIONS = ("all", "wake_word")
MAX_WATCHES = 16


class ParamError(Exception):
    """A refused value, in OpenAI's error shape: one line, the parameter it is about, a code."""

    def __init__(self, message: str, param: str | None = None, code: str | None = "invalid_value",
                 type: str = "invalid_request_error"):
        super().__init__(" ".join(str(message).split())[:1000])
        self.message, self.param, self.code, self.type = str(self), param, code, type


class SessionConfig:
    def __init__(self, model: str, stream_id: str, fps: float | None, audio_out: bool):
        self.id = f"sess_{secrets.token_hex(8)}"
        self.model, self.stream_id, self.fps, self.voice_available = model, stream_id, fps, audio_out
        self.instructions = ""
        self.output_modalities = ["audio"] if audio_out else ["text"]
        self.max_output_tokens: int | str = "inf"
        self.turn_detection: dict | None = {"type": "server_vad", "silence_duration_ms": round(SILENCE_S * 1000),
                                            "create_response": True, "interrupt_response": True}
        self.transcription: dict | None = {"model": "streamvid"}
        self.voice = "alloy"
        self.events = False
        self.questions = "all"
        self.watches: list[dict] = []  # {"id", "condition"}

    # ---- reading ------------------------------------------------------------------------------------------
    @property
    def audio_out(self) -> bool:
        return "audio" in self.output_modalities

    @property
    def manual(self) -> bool:
        """Push to talk: appended audio is the question being spoken, until it is committed."""
        return self.turn_detection is None

    def to_json(self) -> dict:
        return {
            "type": "realtime", "object": "realtime.session", "id": self.id, "model": self.model,
            "output_modalities": list(self.output_modalities), "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens, "tools": [], "tool_choice": "auto",
            "audio": {"input": {"format": dict(PCM), "transcription": copy.deepcopy(self.transcription),
                                "turn_detection": copy.deepcopy(self.turn_detection), "noise_reduction": None},
                      "output": {"format": dict(PCM), "voice": self.voice, "speed": 1.0}},
            "streamvid": {"stream_id": self.stream_id, "fps": self.fps, "events": self.events,
                          "questions": self.questions, "watches": copy.deepcopy(self.watches)}}

    # ---- changing -----------------------------------------------------------------------------------------
    def update(self, session: object) -> dict:
        """Apply a session object (all of it checked before any of it is applied); what the transport must act on:
        {"silence_s": seconds or None, "watches": [new conditions]}."""
        if not isinstance(session, dict):
            raise ParamError("session.update needs \"session\": an object", "session", "invalid_type")
        new = copy.copy(self)
        new.turn_detection = copy.deepcopy(self.turn_detection)
        act: dict = {"silence_s": None, "watches": []}
        known = {"type", "object", "id", "model", "instructions", "output_modalities", "max_output_tokens", "audio",
                 "tools", "tool_choice", "streamvid", "expires_at", *NULL_ONLY}
        for key in session:
            if key not in known:
                raise ParamError(f"unknown parameter: 'session.{str(key)[:40]}'", f"session.{str(key)[:40]}",
                                 "unknown_parameter")
        if session.get("type", "realtime") != "realtime":
            raise ParamError(f"session.type must be \"realtime\" (transcription sessions are not served), got "
                             f"{str(session.get('type'))[:40]!r}", "session.type")
        if "model" in session:
            check_model(session["model"], self.model, "session.model")
        if "instructions" in session:
            if not isinstance(session["instructions"], str):
                raise ParamError("session.instructions must be a string", "session.instructions", "invalid_type")
            new.instructions = session["instructions"][:20000]
        if "output_modalities" in session:
            new.output_modalities = self.modalities(session["output_modalities"], "session.output_modalities")
        if "max_output_tokens" in session:
            new.max_output_tokens = max_tokens(session["max_output_tokens"], "session.max_output_tokens")
        for key in NULL_ONLY:
            if session.get(key) not in (None, []):
                raise ParamError(f"session.{key} is not supported by this server: leave it out or null",
                                 f"session.{key}", "unsupported_parameter")
        if session.get("tools") not in (None, []):
            raise ParamError("session.tools: function calling is not supported by this server", "session.tools",
                             "unsupported_parameter")
        if session.get("tool_choice") not in (None, "auto", "none"):
            raise ParamError('session.tool_choice must be "auto" or "none"', "session.tool_choice")
        if "audio" in session:
            act["silence_s"] = new.apply_audio(session["audio"])
        if "streamvid" in session:
            act["watches"] = new.apply_streamvid(session["streamvid"])
        self.__dict__.update(new.__dict__)
        return act

    def modalities(self, value: object, param: str) -> list[str]:
        if value == ["text", "audio"] or value == ["audio", "text"]:
            value = ["audio"]  # (OpenAI's audio output comes with its transcript)
        if value not in (["text"], ["audio"]):
            raise ParamError(f'{param} must be ["audio"] or ["text"], got {str(value)[:60]}', param)
        if value == ["audio"] and not self.voice_available:
            raise ParamError(f'{param}: this server does not speak (--tts off or no voice installed): use ["text"]',
                             param, "unsupported_value")
        return list(value)

    def apply_audio(self, audio: object) -> float | None:
        if audio is None:
            return None
        if not isinstance(audio, dict):
            raise ParamError("session.audio must be an object", "session.audio", "invalid_type")
        _only(audio, ("input", "output"), "session.audio")
        silence = None
        inp = audio.get("input") or {}
        if not isinstance(inp, dict):
            raise ParamError("session.audio.input must be an object", "session.audio.input", "invalid_type")
        _only(inp, ("format", "transcription", "turn_detection", "noise_reduction"), "session.audio.input")
        if "format" in inp:
            check_format(inp["format"], "session.audio.input.format")
        if inp.get("noise_reduction") is not None:
            raise ParamError("session.audio.input.noise_reduction is not supported by this server: leave it null",
                             "session.audio.input.noise_reduction", "unsupported_parameter")
        if "transcription" in inp:
            t = inp["transcription"]
            if t is not None and not isinstance(t, dict):
                raise ParamError("session.audio.input.transcription must be an object or null",
                                 "session.audio.input.transcription", "invalid_type")
            if t is not None:
                _only(t, ("model", "language", "prompt", "languages", "keywords", "delay"),
                      "session.audio.input.transcription")
                t = {"model": "streamvid", **{k: v for k, v in t.items() if k in ("language", "prompt")}}
            self.transcription = t
        if "turn_detection" in inp:
            silence = self._turns(inp["turn_detection"])
        out = audio.get("output") or {}
        if not isinstance(out, dict):
            raise ParamError("session.audio.output must be an object", "session.audio.output", "invalid_type")
        _only(out, ("format", "voice", "speed"), "session.audio.output")
        if "format" in out:
            check_format(out["format"], "session.audio.output.format")
        if "voice" in out:
            if not isinstance(out["voice"], str) or not out["voice"].strip():
                raise ParamError("session.audio.output.voice must be a voice name", "session.audio.output.voice")
            self.voice = out["voice"][:64]
        if out.get("speed", 1.0) != 1.0:
            raise ParamError("session.audio.output.speed must be 1.0 on this server", "session.audio.output.speed",
                             "unsupported_value")
        return silence

    def _turns(self, td: object) -> float | None:
        param = "session.audio.input.turn_detection"
        if td is None:
            self.turn_detection = None
            return None
        if not isinstance(td, dict) or td.get("type") not in ("server_vad", "semantic_vad"):
            raise ParamError(f'{param} must be null, {{"type": "server_vad"}} or {{"type": "semantic_vad"}}',
                             f"{param}.type")
        _only(td, ("type", "silence_duration_ms", "create_response", "interrupt_response", "threshold",
                   "prefix_padding_ms", "idle_timeout_ms", "eagerness"), param)
        if td.get("idle_timeout_ms") is not None:
            raise ParamError(f"{param}.idle_timeout_ms is not supported by this server", f"{param}.idle_timeout_ms",
                             "unsupported_parameter")
        now = dict(self.turn_detection or {"silence_duration_ms": round(SILENCE_S * 1000), "create_response": True,
                                           "interrupt_response": True})
        now["type"] = "server_vad"  # semantic_vad is served as server_vad
        for key in ("create_response", "interrupt_response"):
            if key in td:
                if not isinstance(td[key], bool):
                    raise ParamError(f"{param}.{key} must be true or false", f"{param}.{key}", "invalid_type")
                now[key] = td[key]
        for key in ("threshold", "prefix_padding_ms"):
            if td.get(key) is not None:
                if isinstance(td[key], bool) or not isinstance(td[key], (int, float)):
                    raise ParamError(f"{param}.{key} must be a number", f"{param}.{key}", "invalid_type")
                now[key] = td[key]
        silence = None
        if "silence_duration_ms" in td:
            ms = td["silence_duration_ms"]
            if isinstance(ms, bool) or not isinstance(ms, int) or not SILENCE_MS[0] <= ms <= SILENCE_MS[1]:
                raise ParamError(f"{param}.silence_duration_ms must be a whole number from {SILENCE_MS[0]} to "
                                 f"{SILENCE_MS[1]}, got {str(ms)[:20]}", f"{param}.silence_duration_ms")
            now["silence_duration_ms"] = ms
            silence = ms / 1000
        self.turn_detection = now
        return silence

    def apply_streamvid(self, ext: object) -> list[str]:
        param = "session.streamvid"
        if not isinstance(ext, dict):
            raise ParamError(f"{param} must be an object", param, "invalid_type")
        _only(ext, ("events", "questions", "watches", "stream_id", "fps"), param)
        for key, mine in (("stream_id", self.stream_id), ("fps", self.fps)):
            if key in ext and ext[key] != mine:
                raise ParamError(f"{param}.{key} is read-only: a session attaches to a stream when it connects "
                                 f"(?stream_id=)", f"{param}.{key}", "read_only")
        if "events" in ext:
            if not isinstance(ext["events"], bool):
                raise ParamError(f"{param}.events must be true or false", f"{param}.events", "invalid_type")
            self.events = ext["events"]
        if "questions" in ext:
            if ext["questions"] not in QUESTIONS:
                raise ParamError(f'{param}.questions must be "all" or "wake_word"', f"{param}.questions")
            self.questions = ext["questions"]
        added = []
        if "watches" in ext:
            watches = ext["watches"]
            if not isinstance(watches, list) or not all(isinstance(w, str) and w.strip() for w in watches):
                raise ParamError(f"{param}.watches must be a list of conditions (strings)", f"{param}.watches",
                                 "invalid_type")
            have = {w["condition"] for w in self.watches}
            added = list(dict.fromkeys(w for w in watches if w not in have))
            if len(self.watches) + len(added) > MAX_WATCHES:
                raise ParamError(f"{param}.watches: at most {MAX_WATCHES} per session", f"{param}.watches")
        return added


def check_model(model: object, served: str, param: str) -> None:
    """The served model's id, or an OpenAI realtime model's name (taken as an alias of it)."""
    if model is None or model == served or (isinstance(model, str) and model.startswith(("gpt-", "gpt_"))):
        return
    raise ParamError(f"{param}: this server serves {served!r} (OpenAI's realtime model names are taken as aliases "
                     f"of it), not {str(model)[:60]!r}", param, "model_not_found")


def check_format(fmt: object, param: str) -> None:
    if not isinstance(fmt, dict) or fmt.get("type", "audio/pcm") != "audio/pcm" or fmt.get("rate", RATE) != RATE:
        raise ParamError(f'{param} must be {{"type": "audio/pcm", "rate": 24000}} (PCM16 mono at 24 kHz), got '
                         f"{str(fmt)[:60]}", param, "unsupported_value")


def max_tokens(value: object, param: str) -> int | str:
    if value == "inf" or value is None:
        return "inf"
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_OUTPUT_TOKENS:
        raise ParamError(f'{param} must be a whole number from 1 to {MAX_OUTPUT_TOKENS} or "inf"', param)
    return value


def _only(obj: dict, keys: tuple[str, ...], where: str) -> None:
    for key in obj:
        if key not in keys:
            raise ParamError(f"unknown parameter: '{where}.{str(key)[:40]}'", f"{where}.{str(key)[:40]}",
                             "unknown_parameter")
