"""`POST /v1/audio/speech` in OpenAI's formats and under OpenAI's model names (speech_route.py, audio/encoding.py),
through the official `openai` client against a real server on loopback. The voice is a test one that speaks a
440 Hz tone of a known length per character; each reply is decoded back with PyAV (not the code that wrote it) and
checked against those samples, written out here: wav, pcm and flac sample for sample, mp3 / opus / aac by their
length (the lossy codecs add at most ~0.1 s of priming and padding), pitch and loudness. A long reply is streamed:
its first sentence can be decoded before the next one is spoken. Tiny random checkpoint (for the app only)."""

from __future__ import annotations

import io
import threading

import av
import httpx
import numpy as np
import pytest
from serve_helpers import speaking_server


openai = pytest.importorskip("openai")

RATE = 24000
PER_CHAR = 600  # samples per character spoken (25 ms)
TONE_HZ = 440.0
LEVEL = 0.3
TEXT = "The star is red."
TYPES = {"mp3": "audio/mpeg", "opus": "audio/opus", "aac": "audio/aac", "flac": "audio/flac", "wav": "audio/wav",
         "pcm": "audio/pcm"}


def tone(n: int) -> np.ndarray:
    return LEVEL * np.sin(2 * np.pi * TONE_HZ * np.arange(n) / RATE)


def reference(texts: list[str]) -> np.ndarray:
    """The PCM16 samples the route is given for `texts`, one after another, computed here."""
    return np.concatenate([np.round(tone(PER_CHAR * len(t)) * 32767).astype("<i2") for t in texts])


class ToneVoice:
    """PER_CHAR samples of the tone per character at 24 kHz; with `gated`, each synthesis waits for `release`."""

    def __init__(self, gated: bool = False):
        self.gated = gated
        self.spoken: list[str] = []
        self.permits = threading.Semaphore(0)

    def synthesize(self, text, variant=None):
        if self.gated:
            self.permits.acquire(timeout=60)
        self.spoken.append(text)
        return tone(PER_CHAR * len(text)).astype(np.float32), RATE


@pytest.fixture
def voiced(engine, monkeypatch):
    """A server whose --tts is a ToneVoice (a gated one for `voiced.gate`); (url, voice)."""
    voice = ToneVoice()
    with speaking_server(engine, monkeypatch, voice) as url:
        yield url, voice
        voice.permits.release(100)


def decoded(data: bytes) -> tuple[np.ndarray, int]:
    """The samples (float, mono) and rate PyAV decodes from `data`."""
    with av.open(io.BytesIO(data)) as container:
        frames = list(container.decode(container.streams.audio[0]))
    rate = frames[0].sample_rate
    x = np.concatenate([f.to_ndarray().reshape(f.to_ndarray().shape[0], -1)[0] if f.format.is_planar
                        else f.to_ndarray().reshape(-1) for f in frames]).astype(np.float64)
    if np.issubdtype(frames[0].to_ndarray().dtype, np.integer):
        x /= 32768.0
    return x, rate


def check(data: bytes, fmt: str, want: np.ndarray) -> None:
    """`data` in `fmt` is `want` (PCM16): exactly for the lossless formats, by length, pitch and level otherwise."""
    if fmt == "pcm":
        assert data == want.tobytes()
        return
    x, rate = decoded(data)
    if fmt in ("wav", "flac"):
        assert rate == RATE and np.array_equal(np.round(x * 32768).astype(np.int64), want.astype(np.int64)), fmt
        return
    seconds, expected_s = len(x) / rate, len(want) / RATE
    assert expected_s - 0.005 <= seconds <= expected_s + 0.12, (fmt, seconds, expected_s)
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    peak_hz = np.argmax(spectrum) * rate / len(x)
    assert abs(peak_hz - TONE_HZ) < 5, (fmt, peak_hz)
    loud = x[int(0.06 * rate):int((expected_s - 0.02) * rate)]  # (past the codec's priming)
    rms = np.sqrt(np.mean(loud ** 2))
    assert abs(rms - LEVEL / np.sqrt(2)) < 0.2 * LEVEL / np.sqrt(2), (fmt, rms)


def test_each_format_decodes_back_to_the_samples_spoken(voiced):
    url, voice = voiced
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60.0)
    for fmt, media in TYPES.items():
        r = client.audio.speech.with_raw_response.create(model="tts-1", voice="alloy", input=TEXT,
                                                         response_format=fmt)
        assert r.headers["content-type"] == media, fmt
        check(r.content, fmt, reference([TEXT]))
    # three sentences: spoken one by one and streamed, the same samples end to end
    sentences = ["The star is red.", "The circle moves left.", "Nothing else."]
    for fmt in TYPES:
        data = client.audio.speech.create(model="gpt-4o-mini-tts", voice="alloy", input=" ".join(sentences),
                                          response_format=fmt).read()
        check(data, fmt, reference(sentences))


def test_openai_model_names_are_the_servers_voice_and_unknown_names_are_refused(voiced):
    url, voice = voiced
    for model in ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "tiny"):
        r = httpx.post(f"{url}/v1/audio/speech", json={"model": model, "input": TEXT, "voice": "alloy"}, timeout=60)
        assert r.status_code == 200 and r.headers["content-type"] == "audio/wav", model
        check(r.content, "wav", reference([TEXT]))
    r = httpx.post(f"{url}/v1/audio/speech", json={"model": "tts-2", "input": TEXT, "voice": "alloy"}, timeout=60)
    message = r.json()["error"]["message"]
    assert r.status_code == 404 and "'tts-2'" in message and "\n" not in message
    for fmt in ("vorbis", "MP3", "wav "):
        r = httpx.post(f"{url}/v1/audio/speech", json={"model": "tts-1", "input": TEXT, "response_format": fmt},
                       timeout=60)
        message = r.json()["error"]["message"]
        assert r.status_code == 400 and repr(fmt) in message and "\n" not in message, fmt
    assert voice.spoken == [TEXT] * 4  # (nothing refused was spoken)


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_an_encoded_reply_streams_each_sentence_before_the_next_is_spoken(voiced, fmt):
    url, voice = voiced
    voice.gated = True
    sentences = ["The star is red and it is large.", "The circle moves left.", "Nothing else changed."]
    body = {"model": "tts-1", "input": " ".join(sentences), "response_format": fmt}
    got = b""
    with httpx.Client(timeout=60.0) as c, c.stream("POST", f"{url}/v1/audio/speech", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"] == TYPES[fmt]
        chunks = r.iter_raw()
        voice.permits.release(1)
        # the first sentence decodes (half of it at least: an encoder holds its last frames until more come, an Ogg
        # page waits to be full) while the second waits to be spoken
        while True:
            got += next(chunks)
            try:
                x, rate = decoded(got)
            except (av.error.FFmpegError, IndexError, ValueError):
                continue
            if len(x) / rate >= 0.5 * PER_CHAR * len(sentences[0]) / RATE:
                break
        assert voice.spoken == sentences[:1]
        voice.permits.release(2)
        got += b"".join(chunks)
    assert voice.spoken == sentences
    check(got, fmt, reference(sentences))
