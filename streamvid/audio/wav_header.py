"""What a WAV's header claims, read and checked before a sample is decoded (pcm.wav_samples decodes with PyAV).

    head = wav_header(body)           # WavHeader(rate, channels, bits, is_float, data_bytes); ValueError otherwise
    head.duration_s                   # from the data chunk's size (or the bytes there, for a streamed WAV)
    check_rate(24000, "PCM16")        # a sample rate the resampler takes cheaply: 8-192 kHz

Only what resamples cheaply is taken: 8 to 192 kHz (PyAV's resampler costs about the same per input byte across
this range, ~10-25 ms a MB on one core, so a body's work is bounded by its size and its 10 minutes), 1 to 8
channels, integer PCM of 8, 16, 24 or 32 bits or IEEE float of 32 or 64 bits (WAVE_FORMAT_EXTENSIBLE with either
subformat included). Anything else is a one-line ValueError that names the value and the range, so a 144-byte
body claiming 2^30 Hz, or one whose data chunk claims hours, is refused without building a resampler or allocating
its samples.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

MIN_RATE, MAX_RATE = 8000, 192000  # Hz
MAX_CHANNELS = 8
PCM, FLOAT, EXTENSIBLE = 1, 3, 0xFFFE
INT_BITS, FLOAT_BITS = (8, 16, 24, 32), (32, 64)
UNKNOWN_SIZES = (0, 0xFFFFFFFF)  # a data size a streaming writer leaves when it cannot seek back: the bytes there


@dataclass(frozen=True)
class WavHeader:
    rate: int
    channels: int
    bits: int
    is_float: bool
    data_bytes: int  # the data chunk's size as the header says it (or the bytes present, for an unknown size)

    @property
    def frame_bytes(self) -> int:
        return self.channels * self.bits // 8

    @property
    def duration_s(self) -> float:
        return self.data_bytes / self.frame_bytes / self.rate


def check_rate(rate: object, what: str = "audio") -> int:
    """`rate` as an int when it is a whole number of Hz from 8000 to 192000; ValueError naming it otherwise."""
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or int(rate) != rate:
        raise ValueError(f"the {what} sample rate must be a whole number of Hz, got {str(rate)[:20]!r}")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise ValueError(f"the {what} sample rate must be {MIN_RATE}-{MAX_RATE} Hz, got {int(rate)} Hz")
    return int(rate)


def wav_header(body: bytes) -> WavHeader:
    """The checked header of a RIFF/WAVE body (see the module docstring); ValueError (one line) otherwise."""
    if len(body) < 12 or body[:4] != b"RIFF" or body[8:12] != b"WAVE":
        kind = " (RF64 is not taken)" if body[:4] == b"RF64" else ""
        raise ValueError(f"not a WAV file: no RIFF/WAVE header{kind}")
    fmt = None
    at = 12
    while at + 8 <= len(body):
        chunk, size = body[at:at + 4], struct.unpack_from("<I", body, at + 4)[0]
        if chunk == b"fmt ":
            fmt = _fmt(body[at + 8:at + 8 + size])
        elif chunk == b"data":
            if fmt is None:
                raise ValueError("not a WAV file: its data chunk comes before a fmt chunk")
            present = len(body) - at - 8
            data_bytes = present if size in UNKNOWN_SIZES else size
            head = WavHeader(*fmt, data_bytes=data_bytes)
            return head
        at += 8 + size + (size & 1)
    raise ValueError("not a WAV file: no fmt chunk" if fmt is None else "not a WAV file: no data chunk")


def _fmt(raw: bytes) -> tuple[int, int, int, bool]:
    if len(raw) < 16:
        raise ValueError("not a WAV file: its fmt chunk is too short")
    code, channels, rate, _byte_rate, block_align, bits = struct.unpack_from("<HHIIHH", raw)
    if code == EXTENSIBLE and len(raw) >= 26:
        code = struct.unpack_from("<H", raw, 24)[0]  # the first two bytes of the subformat GUID
    if code not in (PCM, FLOAT):
        raise ValueError(f"WAV sample format {code:#06x} is not taken: only integer PCM (8, 16, 24 or 32 bits) or "
                         f"IEEE float (32 or 64 bits)")
    allowed = INT_BITS if code == PCM else FLOAT_BITS
    if bits not in allowed:
        raise ValueError(f"WAV {'float' if code == FLOAT else 'integer PCM'} samples of {bits} bits are not taken: "
                         f"{' or '.join(map(str, allowed))} bits")
    if not 1 <= channels <= MAX_CHANNELS:
        raise ValueError(f"a WAV of {channels} channels is not taken: 1 to {MAX_CHANNELS}")
    check_rate(rate, "WAV")
    if block_align != channels * bits // 8:
        raise ValueError(f"not a WAV file: its block align of {block_align} bytes does not match {channels} channels "
                         f"of {bits} bits")
    return rate, channels, bits, code == FLOAT
