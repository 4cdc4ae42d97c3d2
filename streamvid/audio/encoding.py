"""24 kHz mono PCM16 encoded as OpenAI's speech formats, piece by piece (PyAV), for a reply streamed as it is spoken.

    enc = Encoder("mp3")                 # FORMATS: mp3 opus aac flac wav pcm
    body = enc.feed(pcm16) + ... + enc.close()      # each call: the bytes ready to send
    encode(pcm16, "flac")                # all at once
    MEDIA_TYPES["opus"]                  # the Content-Type: "audio/opus"

mp3 (libmp3lame, 24 kHz, 64 kb/s), opus (libopus in Ogg, 24 kHz, 32 kb/s), aac (ADTS, 24 kHz, 64 kb/s) and flac
(24 kHz s16) are written to a sink that cannot seek, so every byte is final when it is given out and a reply can be
sent as it is spoken (a FLAC header without the total sample count, an MP3 without a Xing frame: readers take
both; Ogg pages of at most 0.1 s, so Opus goes out as it is encoded). wav is the 44-byte header (with the data size when known, 0xFFFFFFFF when streamed) and
the samples; pcm the raw samples (little-endian s16, as OpenAI's "pcm"). The lossy encoders' priming and last
frame's padding make a decoded reply up to ~0.1 s longer than its samples; wav, pcm and flac are exact.
"""

from __future__ import annotations

import io
import struct

import av
import numpy as np

RATE = 24000
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/opus", "aac": "audio/aac", "flac": "audio/flac",
               "wav": "audio/wav", "pcm": "audio/pcm"}
# format -> (container, codec, the codec's sample format, bit rate)
CODECS = {"mp3": ("mp3", "libmp3lame", "s16p", 64000), "opus": ("ogg", "libopus", "s16", 32000),
          "aac": ("adts", "aac", "fltp", 64000), "flac": ("flac", "flac", "s16", None)}
OPEN_LENGTH = 0xFFFFFFFF  # a streamed WAV's RIFF and data sizes: not known in advance, read to the end


def wav_header(data_bytes: int | None, rate: int = RATE) -> bytes:
    """A mono PCM16 WAV header for `data_bytes` of samples, or for a length left open (None)."""
    riff, data = (OPEN_LENGTH, OPEN_LENGTH) if data_bytes is None else (36 + data_bytes, data_bytes)
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, 2 * rate, 2, 16)
            + b"data" + struct.pack("<I", data))


class Sink(io.RawIOBase):
    """Where a container is written: bytes kept until taken; no seeking, so what is written is final."""

    def __init__(self):
        super().__init__()
        self.parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, b) -> int:
        self.parts.append(bytes(b))
        return len(b)

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


class Encoder:
    """PCM16 at RATE in, `fmt`'s bytes out as they are ready (`feed`), the rest at `close`."""

    def __init__(self, fmt: str, streamed: bool = True):
        if fmt not in FORMATS:
            raise ValueError(f"response_format must be one of {', '.join(FORMATS)}, got {str(fmt)[:20]!r}")
        self.fmt = fmt
        self.streamed = streamed
        self.started = False
        self.closed = False
        if fmt not in CODECS:
            return
        container, codec, sample_format, bit_rate = CODECS[fmt]
        self.sink = Sink()
        options = {"page_duration": "100000"} if container == "ogg" else {}  # (us: an Ogg page per 0.1 s)
        self.out = av.open(self.sink, "w", format=container, options=options)
        self.stream = self.out.add_stream(codec, rate=RATE)
        self.stream.layout = "mono"
        self.stream.format = sample_format
        if bit_rate:
            self.stream.bit_rate = bit_rate
        self.resampler = av.AudioResampler(format=sample_format, layout="mono", rate=RATE)
        self.fifo = av.AudioFifo()
        self.pts = 0

    def feed(self, pcm: bytes) -> bytes:
        """The bytes ready after `pcm` (mono little-endian s16 at RATE)."""
        head = b""
        if not self.started:
            self.started = True
            head = wav_header(None) if self.fmt == "wav" and self.streamed else b""
        if self.fmt in ("wav", "pcm"):
            return head + pcm
        if pcm:
            samples = np.frombuffer(pcm, "<i2").reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
            frame.sample_rate = RATE
            for converted in self.resampler.resample(frame):
                self.fifo.write(converted)
            size = self.stream.codec_context.frame_size or 1024
            while self.fifo.samples >= size:
                self._encode(self.fifo.read(size))
        return self.sink.take()

    def close(self) -> bytes:
        """The last bytes: what the encoder still held, and the container's end."""
        if self.closed:
            return b""
        self.closed = True
        if self.fmt in ("wav", "pcm"):
            return b"" if self.started or self.fmt == "pcm" else wav_header(None if self.streamed else 0)
        if not self.started:
            self.feed(b"")
        if self.fifo.samples:
            self._encode(self.fifo.read())
        self._encode(None)
        self.out.close()
        return self.sink.take()

    def _encode(self, frame) -> None:
        if frame is not None:
            frame.pts = self.pts
            self.pts += frame.samples
        for packet in self.stream.encode(frame):
            self.out.mux(packet)


def encode(pcm: bytes, fmt: str) -> bytes:
    """`pcm` (mono s16 at RATE) in `fmt`, whole (a WAV with its exact length)."""
    if fmt == "wav":
        return wav_header(len(pcm)) + pcm
    enc = Encoder(fmt, streamed=False)
    return enc.feed(pcm) + enc.close()
