"""ShapesWorld's sound track: short spoken lines from a fixed vocabulary at known times.

A stream's lines are planned from its seed alone, on a random stream of their own (the visuals, and every visual
question, are drawn exactly as without sound): what is said (`FORMS` over `VOCABULARY`: colour and shape names,
numbers zero to ten as words, a few names and commands), when, which voice variant says it and how loud. Each line
is then synthesized (`streamvid.audio.voices`), resampled to the track's rate, cut to its voiced part (10 ms frames
louder than 3% of its loudest frame) and placed so that its voice starts at the planned time. The gold speech
events (`world.Speech`) are those placed samples: `t_s` the first voiced sample, `t_end_s` the end of the last.

Placement rules, so every line is unambiguous in time:
- a line's voice starts ONSET_S past a whole second (so "at 01:23" names the second it starts in);
- planned starts lie at least SLOT_S + GAP_S[0] apart, and a line longer than SLOT_S is left out (none of the
  forms is, in any variant), so lines never overlap and are separated by seconds of silence;
- the first line starts after FIRST_S, the last one ends at least END_GAP_S before the stream does.

The planned times and texts depend on the seed and duration only; the end times depend on the voice that speaks.
`write_speech_mp4` writes the stream's H.264 video (world.write_mp4) with the track as AAC mono beside it: the video
packets are copied unchanged, so the frames decode exactly as without sound.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np

from streamvid.audio.pcm import resample
from streamvid.audio.voices import Voice

from .world import COLOURS, FRAME_PX, SHAPES, Speech, Timeline, write_mp4

SPEECH_RATE = 16_000  # the track's sample rate (that of speech recognisers)
NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
NAMES = ("alice", "bob", "carol", "dave")
COMMANDS = ("stop", "help", "look", "wait")
VOCABULARY = frozenset((*COLOURS, *SHAPES, *NUMBERS, *NAMES, *COMMANDS))  # the words lines are about
# What a line says, with weights; every form ends with a vocabulary word. Mostly short carrier phrases: a lone
# number, colour or name is hard to recognise even for people ("nine" / "I"), a command alone is not.
FORMS = (("{command}", 3), ("please {command}", 3), ("{name} {command}", 2), ("this is {name}", 2),
         ("number {number}", 3), ("look at the {colour} {shape}", 3), ("i see the {colour} {shape}", 2),
         ("{colour} {shape}", 1), ("where is the {shape}", 2))
FIRST_S, SLOT_S, GAP_S, ONSET_S, END_GAP_S = 2.0, 3.0, (2.0, 12.0), (0.1, 0.5), 0.5
GAIN = (0.3, 0.8)  # peak level of a line
AAC_BIT_RATE = 32_000
_SPEECH_STREAM = 5  # the speech plan's random stream: numpy default_rng([seed, _SPEECH_STREAM])


def plan_lines(seed: int, duration_s: float) -> list[tuple[float, str, float, float]]:
    """(voiced start s, text, variant draw in [0, 1), peak gain) for every line a stream may say."""
    rng = np.random.default_rng([seed, _SPEECH_STREAM])
    forms, weights = zip(*FORMS)
    p = np.array(weights, float) / sum(weights)
    pools = {"colour": tuple(COLOURS), "shape": SHAPES, "number": NUMBERS, "name": NAMES, "command": COMMANDS}
    lines, k = [], math.ceil(FIRST_S)
    while k + ONSET_S[1] + END_GAP_S < duration_s:
        form = forms[int(rng.choice(len(forms), p=p))]
        words = [str(pools[w[1:-1]][int(rng.integers(len(pools[w[1:-1]])))]) if w.startswith("{") else w
                 for w in form.split()]
        start = k + float(rng.uniform(*ONSET_S))
        lines.append((start, " ".join(words), float(rng.random()), float(rng.uniform(*GAIN))))
        k += math.ceil(SLOT_S + rng.uniform(*GAP_S))
    return lines


def voiced_span(samples: np.ndarray, rate: int) -> tuple[int, int]:
    """[first, last) sample of the voiced part: 10 ms frames louder (RMS) than 3% of the loudest frame;
    (0, 0) for silence."""
    n = max(1, rate // 100)
    frames = samples[: len(samples) // n * n].reshape(-1, n) if len(samples) >= n else samples.reshape(1, -1)
    rms = np.sqrt((frames.astype(np.float64) ** 2).mean(1)) if frames.size else np.zeros(0)
    loud = np.flatnonzero(rms > max(1e-4, 0.03 * rms.max(initial=0.0)))
    if not len(loud):
        return 0, 0
    return int(loud[0]) * n, min(len(samples), (int(loud[-1]) + 1) * n)


def speak(timeline: Timeline, voices: Voice | Sequence[Voice], rate: int = SPEECH_RATE) -> tuple[Timeline, np.ndarray]:
    """The timeline with its gold speech events, and the mono float32 track at `rate` (duration_s long)."""
    voices = [voices] if isinstance(voices, Voice) else list(voices)
    variants = [(v, name) for v in voices for name in v.variants]
    if not variants:
        raise ValueError("speak needs at least one voice")
    track = np.zeros(round(timeline.duration_s * rate), np.float32)
    events: list[Speech] = []
    for start_s, text, draw, gain in plan_lines(timeline.seed, timeline.duration_s):
        voice, variant = variants[min(len(variants) - 1, int(draw * len(variants)))]
        samples, voice_rate = voice.synthesize(text, variant)
        samples = resample(samples, voice_rate, rate)
        a, b = voiced_span(samples, rate)
        first = round(start_s * rate)
        if b - a <= 0 or b - a > SLOT_S * rate or first + b - a > len(track) - END_GAP_S * rate:
            continue
        line = samples[a:b] * (gain / max(1e-6, float(np.abs(samples[a:b]).max())))
        track[first:first + len(line)] = line
        events.append(Speech(round(first / rate, 4), round((first + len(line)) / rate, 4), text,
                             f"{voice.name}:{variant}"))
    return replace(timeline, speech=events), track


def mux_track(video: str | Path, track: np.ndarray, rate: int, out_path: str | Path) -> Path:
    """Copy `video`'s video packets into out_path, with `track` (mono float samples from t = 0) as AAC beside them,
    interleaved in time."""
    import av

    out_path = Path(out_path)
    track = np.clip(np.asarray(track, np.float32), -1.0, 1.0)
    block = 1024
    with av.open(str(video)) as src, av.open(str(out_path), "w") as out:
        vin = src.streams.video[0]
        vout = out.add_stream_from_template(vin)
        aout = out.add_stream("aac", rate=rate, layout="mono")
        aout.bit_rate = AAC_BIT_RATE
        pos = 0

        def audio_until(t_s: float) -> None:
            nonlocal pos
            while pos < len(track) and pos < t_s * rate:
                frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(track[None, pos:pos + block]), format="flt",
                                                   layout="mono")
                frame.sample_rate, frame.pts, frame.time_base = rate, pos, Fraction(1, rate)
                out.mux(aout.encode(frame))
                pos += block

        for packet in src.demux(vin):
            if packet.dts is None:  # the demuxer's flush packet
                continue
            audio_until(float(packet.dts * packet.time_base) + 1.0)  # audio a second ahead of the video
            packet.stream = vout
            out.mux(packet)
        audio_until(len(track) / rate)
        out.mux(aout.encode(None))
    return out_path


def write_speech_mp4(timeline: Timeline, path: str | Path, track: np.ndarray, rate: int = SPEECH_RATE,
                     size: int = FRAME_PX, fps: float | None = None) -> Path:
    """world.write_mp4's stream, with the speech track as an AAC mono audio stream in sync."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="streamvid-synth-", dir=path.parent) as tmp:
        video = write_mp4(timeline, Path(tmp) / path.name, size=size, fps=fps)
        return mux_track(video, track, rate, path)
