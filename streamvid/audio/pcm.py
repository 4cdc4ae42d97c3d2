"""Audio as the listener takes it: float32 mono samples at RATE (16 kHz), in timed chunks.

    for chunk in file_audio("talk.mp4", origin_s=0.0):     # PyAV demuxes and resamples the audio track
        listener.feed(chunk)
    samples = wav_samples(body)                            # a pushed WAV (8-192 kHz, 1-8 channels) -> RATE mono
    seconds = wav_duration_s(body)                         # its length from the header alone (nothing decoded)
    samples = pcm16_samples(raw, rate=24000)               # raw little-endian PCM16 mono -> RATE mono
    samples = resample(samples, 22050, to_rate=24000)      # mono float32 samples to another rate (8-192 kHz)

Decoding and resampling are PyAV's (libswresample); nothing here hand-writes a filter. What comes from a client
is checked before PyAV sees it (wav_header.py): a rate the resampler takes cheaply (8-192 kHz), 1-8 channels,
integer PCM or float samples, and at most MAX_PUSH_S seconds by the header, so the work per body is bounded by
its length. Float samples that are NaN or infinite are refused; every result is clipped to [-1, 1].
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import av
import numpy as np

from streamvid.audio.wav_header import check_rate, wav_header

log = logging.getLogger("streamvid.audio")

RATE = 16000  # what the VAD and every recogniser take
CHUNK_S = 0.5  # seconds per chunk a file's track is handed over in
MAX_PUSH_S = 600.0  # a pushed body longer than this is refused (hours of audio in one request)


@dataclass(frozen=True)
class AudioChunk:
    """Consecutive mono samples at RATE, the first at stream time `t_s`."""

    t_s: float
    samples: np.ndarray  # (n,) float32 in [-1, 1]

    @property
    def t_end_s(self) -> float:
        return self.t_s + len(self.samples) / RATE


def _resampler(rate: int = RATE) -> av.AudioResampler:
    return av.AudioResampler(format="flt", layout="mono", rate=rate)


def _as_float(frames) -> list[np.ndarray]:
    return [f.to_ndarray().reshape(-1).astype(np.float32, copy=False) for f in frames]


class Resampler:
    """Decoded audio frames of one stream, in order, as mono float32 at RATE (PyAV's resampler keeps the state
    between frames, so consecutive frames join without gaps; a frame in another format starts a new one)."""

    def __init__(self) -> None:
        self._resampler = _resampler()

    def __call__(self, frame: av.AudioFrame) -> np.ndarray:
        try:
            parts = _as_float(self._resampler.resample(frame))
        except ValueError:  # the format changed (a reconnected stream)
            self._resampler = _resampler()
            parts = _as_float(self._resampler.resample(frame))
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def file_audio(path: str, origin_s: float | None = None, end_s: float | None = None,
               chunk_s: float = CHUNK_S) -> Iterator[AudioChunk]:
    """The first audio track of a file as chunks of `chunk_s` seconds at RATE, mono. Stream time is the audio's
    own time minus `origin_s` (the video stream's start, so sound and frames share one clock; None: the audio's
    first sample), up to `end_s`. Nothing (and one warning line) for a file without audio or with a track that
    cannot be decoded: the video plays on without sound."""
    try:
        container = av.open(path)
    except (av.error.FFmpegError, OSError) as e:
        log.warning("no audio from %s: %s", path, e)
        return
    with container:
        if not container.streams.audio:
            return
        stream = container.streams.audio[0]
        resampler = _resampler()
        pending: list[np.ndarray] = []
        n_pending, t_next = 0, None
        size = max(1, int(round(chunk_s * RATE)))
        try:
            for frame in container.decode(stream):
                if t_next is None:
                    t0 = frame.time if frame.time is not None else 0.0
                    if origin_s is None:
                        origin_s = t0
                    t_next = t0 - origin_s
                for part in _as_float(resampler.resample(frame)):
                    pending.append(part)
                    n_pending += len(part)
                while n_pending >= size:
                    joined = np.concatenate(pending)
                    chunk, rest = joined[:size], joined[size:]
                    pending, n_pending = [rest], len(rest)
                    if t_next + size / RATE > 0:  # (audio before the video's first frame is left out)
                        yield _clip(AudioChunk(t_next, chunk))
                    t_next += size / RATE
                    if end_s is not None and t_next >= end_s:
                        return
        except (av.error.FFmpegError, OSError, ValueError) as e:
            log.warning("audio track of %s stops at %.1f s: %s", path, t_next or 0.0, e)
        if n_pending and t_next is not None:
            tail = np.concatenate(pending)
            if end_s is not None:
                tail = tail[:max(0, int(round((end_s - t_next) * RATE)))]
            if len(tail):
                yield _clip(AudioChunk(t_next, tail))


def _clip(chunk: AudioChunk) -> AudioChunk:
    """Samples before stream time 0 are cut off."""
    if chunk.t_s >= 0:
        return chunk
    skip = int(round(-chunk.t_s * RATE))
    return AudioChunk(0.0, chunk.samples[skip:])


def wav_samples(body: bytes, max_s: float = MAX_PUSH_S) -> np.ndarray:
    """A WAV as mono float32 at RATE, clipped to [-1, 1] after the downmix. Its header is checked first
    (wav_header.py: 8-192 kHz, 1-8 channels, integer PCM or float, at most `max_s` seconds by its data size), so what
    is refused is refused before a resampler is built or a sample decoded; then PyAV decodes it. ValueError (one
    line) for anything that is not such a WAV, or float samples that are NaN or infinite."""
    head = wav_header(body)
    _check_length(head.duration_s, max_s)
    limit = round(head.data_bytes / head.frame_bytes * RATE / head.rate) + RATE  # samples it may give
    try:
        with av.open(io.BytesIO(body), format="wav") as container:
            if not container.streams.audio:
                raise ValueError("not a WAV file: no audio stream")
            stream = container.streams.audio[0]
            if (stream.codec_context.sample_rate, stream.codec_context.channels) != (head.rate, head.channels):
                raise ValueError("not a WAV file: its header reads two ways")
            resampler = _resampler()
            parts, n = [], 0
            for frame in container.decode(stream):
                for part in _as_float(resampler.resample(_finite(frame))):
                    parts.append(part)
                    n += len(part)
                if n > limit:
                    raise ValueError(f"the WAV holds more samples than its header says ({head.duration_s:.1f} s)")
            parts += _as_float(resampler.resample(None))
    except (av.error.FFmpegError, OSError) as e:
        raise ValueError(f"not a WAV file: {str(e).splitlines()[0]}") from e
    samples = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return np.clip(samples, -1.0, 1.0, out=samples)


def wav_duration_s(body: bytes, max_s: float = MAX_PUSH_S) -> float:
    """The seconds a WAV holds, from its checked header alone (ValueError as wav_samples, nothing decoded)."""
    head = wav_header(body)
    _check_length(head.duration_s, max_s)
    return head.duration_s


def pcm16_samples(raw: bytes, rate: int, max_s: float = MAX_PUSH_S) -> np.ndarray:
    """Raw little-endian PCM16 mono at `rate` Hz as float32 at RATE (resampled by PyAV). ValueError (one line) for
    an odd byte count, a rate outside 8-192 kHz or more than `max_s` seconds, checked before any work."""
    pcm16_duration_s(raw, rate, max_s)
    return resample(np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0, rate)


def pcm16_duration_s(raw: bytes, rate: int, max_s: float = MAX_PUSH_S) -> float:
    """The seconds raw PCM16 mono at `rate` holds; ValueError as pcm16_samples (nothing decoded)."""
    rate = check_rate(rate, "PCM16")
    if len(raw) % 2:
        raise ValueError("PCM16 audio must have an even number of bytes")
    _check_length(len(raw) / 2 / rate, max_s)
    return len(raw) / 2 / rate


def _check_length(seconds: float, max_s: float) -> None:
    if seconds > max_s:
        raise ValueError(f"audio of {seconds:.1f} s is longer than the {max_s:g} s limit")


def _finite(frame: av.AudioFrame) -> av.AudioFrame:
    """A decoded float frame whose samples are finite, clipped to [-1, 1] (a frame of integers as it is); ValueError
    for NaN or infinity (a recogniser hears them as noise long after)."""
    if frame.format.name not in ("flt", "fltp", "dbl", "dblp"):
        return frame
    x = frame.to_ndarray()
    if not np.isfinite(x).all():
        raise ValueError("the WAV holds samples that are NaN or infinite")
    if not (np.abs(x) > 1.0).any():
        return frame
    clipped = av.AudioFrame.from_ndarray(np.clip(x, -1.0, 1.0), format=frame.format.name, layout=frame.layout.name)
    clipped.sample_rate = frame.sample_rate
    return clipped


def resample(samples: np.ndarray, rate: int, to_rate: int = RATE) -> np.ndarray:
    """Mono float32 samples from `rate` to `to_rate` Hz, in one piece (PyAV's resampler, flushed at the end).
    ValueError for a rate outside 8-192 kHz (a resampler's filter grows with the ratio of the two)."""
    rate, to_rate = check_rate(rate), check_rate(to_rate)
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    if rate == to_rate or not len(samples):
        return samples
    frame = av.AudioFrame.from_ndarray(samples[None], format="flt", layout="mono")
    frame.sample_rate = rate
    resampler = _resampler(to_rate)
    parts = _as_float(resampler.resample(frame)) + _as_float(resampler.resample(None))
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)
