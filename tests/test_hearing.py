"""Hearing a stream: its sound decoded on the frames' clock, cut into utterances, transcribed off the scheduler,
laid into the window as speech blocks in time order, kept and found in memory and sessions, and "said" triggers.

References are independent of the code under test: the sound is placed by the test at known times (espeak-ng's
speech, whose voiced part is measured on the samples), decoded back with the standard library's `wave` or with
plain numpy (FFT), and the transcripts are checked for the words spoken. The bundled model runs the pipeline;
its answers about what was said are checked against the recogniser's own transcript (what it was given), and
elsewhere only what it was given is (retrieved blocks, evidence). Tests that speak need espeak-ng (`apt-get install
espeak-ng`): skipped without it, except where STREAMVID_REQUIRE_SPEECH=1 (.ci/run), which makes its absence a
failure.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import wave

import av
import numpy as np
import pytest

from streamvid.assets import demo_clip
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.audio.pcm import RATE, AudioChunk, file_audio, pcm16_samples, wav_samples
from streamvid.audio.vad import WINDOW, Segmenter
from streamvid.config import EngineConfig
from streamvid.language.heard import Heard, heard_condition
from streamvid.language.text import holds, words
from streamvid.media.file_source import FileSource

SPEECH = [(3.0, "where are my keys"), (12.0, "stop"), (20.0, "the keys are on the table")]
CLIP_S = 30.0


def _espeak() -> str:
    exe = shutil.which("espeak-ng")
    if exe is None:
        if os.environ.get("STREAMVID_REQUIRE_SPEECH") == "1":
            raise RuntimeError("STREAMVID_REQUIRE_SPEECH=1 but espeak-ng is not installed")
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    return exe


def _read_wav(path) -> tuple[np.ndarray, int]:
    """A 16-bit mono WAV through the standard library (not the code under test)."""
    with wave.open(str(path)) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768, w.getframerate()


def _spoken(tmp_path, text: str, voice: str = "en-us") -> np.ndarray:
    """espeak-ng's speech of `text`, resampled to RATE by linear interpolation (numpy only)."""
    out = tmp_path / "say.wav"
    subprocess.run([_espeak(), "-v", voice, "-w", str(out), text], check=True, timeout=30)
    x, rate = _read_wav(out)
    t = np.arange(int(len(x) * RATE / rate)) / RATE
    return np.interp(t, np.arange(len(x)) / rate, x).astype(np.float32)


def _voiced(x: np.ndarray) -> tuple[float, float]:
    """Seconds from the start of `x` to its first and last sample above 2% of full scale."""
    loud = np.flatnonzero(np.abs(x) > 0.02)
    return loud[0] / RATE, loud[-1] / RATE


def _mux(video, out, track: np.ndarray | None, end_s: float = CLIP_S) -> None:
    """The video's packets up to end_s, and `track` (mono at RATE) as AAC; no audio stream when None."""
    with av.open(str(video)) as inp, av.open(str(out), "w") as o:
        vs = inp.streams.video[0]
        ov = o.add_stream_from_template(vs)
        oa = o.add_stream("aac", rate=RATE, layout="mono") if track is not None else None
        for pkt in inp.demux(vs):
            if pkt.dts is None or pkt.pts is None:
                continue
            if float(pkt.pts * vs.time_base) >= end_s:
                break
            pkt.stream = ov
            o.mux(pkt)
        if oa is not None:
            frame = av.AudioFrame.from_ndarray((np.clip(track, -1, 1) * 32767).astype(np.int16)[None],
                                               format="s16", layout="mono")
            frame.sample_rate, frame.pts = RATE, 0
            for p in [*oa.encode(frame), *oa.encode(None)]:
                o.mux(p)


@pytest.fixture(scope="module")
def talk(tmp_path_factory):
    """A 30-s bundled clip with three utterances: (path, the clip without sound, [(voiced start, end, text)])."""
    tmp = tmp_path_factory.mktemp("talk")
    track = np.zeros(int((CLIP_S + 1) * RATE), np.float32)
    placed = []
    for t, text in SPEECH:
        x = _spoken(tmp, text)
        i = int(t * RATE)
        track[i:i + len(x)] += x
        a, b = _voiced(x)
        placed.append((t + a, t + b, text))
    path, silent = tmp / "talk.mp4", tmp / "silent.mp4"
    _mux(demo_clip("shapes_7"), path, track)
    _mux(demo_clip("shapes_7"), silent, None)
    return path, silent, placed


def _config(**settings) -> EngineConfig:
    return EngineConfig.from_settings(device="cpu", **settings)


# ---- samples ------------------------------------------------------------------------------------------------
def test_wav_of_any_rate_and_channels_becomes_16k_mono(tmp_path):
    rate, seconds = 44100, 1.5
    t = np.arange(int(rate * seconds)) / rate
    left, right = 0.5 * np.sin(2 * np.pi * 440 * t), np.zeros_like(t)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(2), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes((np.stack([left, right], 1) * 32767).astype("<i2").tobytes())
    x = wav_samples(buf.getvalue())
    assert abs(len(x) - seconds * RATE) <= 0.01 * seconds * RATE
    spectrum = np.abs(np.fft.rfft(x[2000:-2000]))
    assert abs(np.argmax(spectrum) * RATE / len(x[2000:-2000]) - 440) < 5  # the tone survives, at its pitch


def test_pcm16_at_24k_is_resampled():
    t = np.arange(24000) / 24000
    raw = (0.3 * np.sin(2 * np.pi * 1000 * t) * 32767).astype("<i2").tobytes()
    x = pcm16_samples(raw, 24000)
    assert abs(len(x) - RATE) <= 64
    assert abs(np.argmax(np.abs(np.fft.rfft(x[1000:-1000]))) * RATE / len(x[1000:-1000]) - 1000) < 10


@pytest.mark.parametrize("raw, rate, message", [(b"\x00\x01\x02", 16000, "even number"),
                                                 (b"\x00\x00", 1000, "rate must be"),
                                                 (b"\x00\x00", 16000.5, "rate must be")])
def test_bad_pcm_is_one_line(raw, rate, message):
    with pytest.raises(ValueError, match=message) as e:
        pcm16_samples(raw, rate)
    assert "\n" not in str(e.value)


def test_not_a_wav_is_one_line():
    with pytest.raises(ValueError, match="not a WAV file") as e:
        wav_samples(b"RIFF\x00\x00\x00\x00garbage" * 3)
    assert "\n" not in str(e.value)


def test_eight_channels_at_192k(tmp_path):
    rate = 192000
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(8), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(np.zeros((rate // 2, 8), "<i2").tobytes())
    assert abs(len(wav_samples(buf.getvalue())) - RATE // 2) <= 64


# ---- the voice activity detector, on given probabilities ---------------------------------------------------
def test_segmenter_cuts_where_its_probabilities_say():
    # 32-ms windows: silence, 0.64 s of speech from window 25 (0.8 s), silence to 3 s
    probs = np.zeros(int(3 * RATE) // WINDOW)
    probs[25:45] = 0.9
    seen = iter(probs)
    seg = Segmenter(silence_s=0.5, pad_s=0.0, probabilities=lambda x: np.array([next(seen) for _ in range(len(x) // WINDOW)]))
    x = np.zeros(len(probs) * WINDOW, np.float32)
    out = []
    for i in range(0, len(x), 8000):
        out += seg.feed(AudioChunk(i / RATE, x[i:i + 8000]))
    out += seg.flush()
    assert [(u.t_s, u.t_end_s) for u in out] == [(round(25 * WINDOW / RATE, 3), round(45 * WINDOW / RATE, 3))]
    assert seg.heard_until_s == pytest.approx(len(x) / RATE)
    # its edges: started at the first speech window; stopped at the end of the last, and for a stretch too short
    # to be an utterance (window 70: 32 ms) as well
    assert seg.take_events() == [("speech_started", round(25 * WINDOW / RATE, 3)),
                                 ("speech_stopped", round(45 * WINDOW / RATE, 3))]
    assert seg.take_events() == []
    probs2 = np.zeros(40)
    probs2[10] = 0.9
    seen2 = iter(probs2)
    short = Segmenter(silence_s=0.5, pad_s=0.0, probabilities=lambda x: np.array([next(seen2) for _ in range(len(x) // WINDOW)]))
    assert short.feed(AudioChunk(0.0, np.zeros(40 * WINDOW, np.float32))) == []
    assert short.take_events() == [("speech_started", round(10 * WINDOW / RATE, 3)),
                                   ("speech_stopped", round(11 * WINDOW / RATE, 3))]


# ---- conditions and words ----------------------------------------------------------------------------------
@pytest.mark.parametrize("condition, heard", [
    ("said: stop", Heard("stop")), ("someone says 'help me'", Heard("help me")), ("someone speaks", Heard(None)),
    ("anyone says something", Heard(None)), ("the word seven is said", Heard("seven")),
    ("a blue star appears", None), ("the circle turns red", None)])
def test_heard_conditions(condition, heard):
    assert heard_condition(condition) == heard


def test_words_match_across_number_forms_and_case():
    assert words("Twenty-one, STOP!") == ["21", "stop"]
    assert holds("I said 7 times.", "seven") and holds("Stop it now", "stop it") and not holds("stopping", "stop")


# ---- a file's sound through the whole pipeline -------------------------------------------------------------
def test_file_sound_is_on_the_frames_clock(talk):
    path, _, placed = talk
    chunks = list(file_audio(str(path)))
    assert chunks[0].t_s == pytest.approx(0.0, abs=0.05)
    for start, end, _ in placed:
        loud = [c for c in chunks if np.sqrt(np.mean(c.samples ** 2)) > 0.01]
        assert any(c.t_s <= start + 0.5 and c.t_end_s >= start for c in loud)
    quiet = [c for c in chunks if all(c.t_end_s < s - 0.1 or c.t_s > e + 0.3 for s, e, _ in placed)]
    assert quiet and max(float(np.abs(c.samples).max()) for c in quiet) < 0.01


def _replay(path, asks=(), watches=(), **settings):
    sa = StreamingAssistant(_config(**settings))
    try:
        outs = sa.run_simulated(FileSource(str(path), fps=2.0), list(asks), watches_at=list(watches))
        transcripts = []
        while not sa.stream.outputs.empty():
            transcripts.append(sa.stream.outputs.get_nowait())
        blocks = [b for b in sa.window.snapshot().blocks]
        kept = [sa.memory.load(i) for i in sa.memory.ids_at(CLIP_S / 2, pad_s=CLIP_S)] if sa.memory else []
        return outs, sa.stats(), sorted([*kept, *blocks], key=lambda b: b.id)
    finally:
        sa.stop()


def test_replay_hears_each_utterance_in_time_order(talk):
    path, _, placed = talk
    outs, stats, blocks = _replay(path, asks=[(28.0, "When did someone say 'stop'?")],
                                  watches=[(0.0, "said: stop"), (0.0, "someone says 'table'")])
    transcripts = [o for o in outs if o.kind == "transcript"]
    assert [w for o in transcripts for w in words(o.text)][:1] == ["where"]
    assert len(transcripts) == len(placed) == stats["utterances"] == stats["speech_blocks"]
    for o, (start, end, text) in zip(transcripts, placed):
        assert abs(o.t_s - start) < 0.5 and abs(o.t_end_s - end) < 0.6  # the utterance's own times
        assert set(words(text)) & set(words(o.text)) - {"the", "are", "my", "on"}
    assert stats["audio_s_in"] == pytest.approx(CLIP_S, abs=1.5)
    # each speech block sits between the chunk before its end and the chunk after it
    for i, b in enumerate(blocks):
        if b.speech is None:
            continue
        before = [v for v in blocks[:i] if v.speech is None]
        after = [v for v in blocks[i + 1:] if v.speech is None]
        assert before[-1].t_start_s < b.t_end_s <= after[0].t_start_s
    alerts = {o.id: o for o in outs if o.kind == "alert"}
    assert alerts["w0"].heard == transcripts[1].text and alerts["w0"].t_s == transcripts[1].t_end_s
    assert "table" in alerts["w1"].heard.lower()
    # the question quoting a word that left the window (8 s) gets that utterance's block from memory
    answer = next(o for o in outs if o.kind == "answer")
    stop_block = next(b for b in blocks if b.speech == transcripts[1].text)
    assert stop_block.id in answer.retrieved_blocks
    assert [round(stop_block.t_start_s, 2), round(stop_block.t_end_s, 2)] in answer.evidence_t_s


def test_replay_is_reproducible_and_off_means_no_sound(talk):
    path, silent, _ = talk
    asks = [(9.0, "What colour is the star?"), (25.0, "What shape was blue?")]
    first, _, _ = _replay(path, asks)
    again, _, _ = _replay(path, asks)
    strip = ("ttft_ms", "tokens_per_s")
    same = lambda outs: [{k: v for k, v in o.to_json().items() if k not in strip} for o in outs]  # noqa: E731
    assert same(first) == same(again)
    off, stats, _ = _replay(path, asks, audio="off")
    none, _, _ = _replay(silent, asks)
    assert stats["utterances"] == 0 and not [o for o in off if o.kind == "transcript"]
    assert same(off) == same(none)  # sound off: exactly as the same video without a sound track


def _asked_about_stop(talk):
    """The replay's answers to three questions about the "stop" said at 12 s, and that utterance's transcript."""
    path, _, _ = talk
    outs, _, _ = _replay(path, [(16.0, "What did someone just say?"), (28.0, "What was said at 00:12?"),
                                (28.0, "When did someone say 'stop'?")])
    stop = [o for o in outs if o.kind == "transcript"][1]
    assert int(stop.t_s) == 12
    return stop, sorted((o for o in outs if o.kind == "answer"), key=lambda o: o.id)


def test_the_bundled_model_answers_what_was_said_at_a_named_time(talk):
    """Asked what was said at a second that left the window, the bundled model answers with the words of the
    speech block memory keeps for that second: the recogniser's own transcript."""
    stop, (_, at_time, _) = _asked_about_stop(talk)
    assert words(at_time.text) == words(stop.text), (at_time, stop)


def test_the_bundled_model_answers_what_was_just_said_and_when(talk):
    """Asked what was just said (answered from the window alone: scope.about_now), the bundled model copies the
    newest line; asked when a quoted word was said, it names the second of the line that says it."""
    stop, (just, _, when) = _asked_about_stop(talk)
    assert words(just.text) == words(stop.text) and "00:12" in when.text, (just, when, stop)


def test_speech_survives_a_saved_session(talk, tmp_path):
    path, _, _ = talk
    sa = StreamingAssistant(_config())
    sa.run_simulated(FileSource(str(path), fps=2.0), [])
    said = {b.id: b.speech for b in sa.window.snapshot().blocks if b.speech}
    said |= {i: sa.memory.speech.text(i) for i in sa.memory.ids_at(CLIP_S / 2, pad_s=CLIP_S) if i in sa.memory.speech}
    sa.stop(save_to=tmp_path / "s")
    assert len(said) == len(SPEECH)
    back = StreamingAssistant.resume(tmp_path / "s", _config())
    try:
        got = {b.id: b.speech for b in back.window.snapshot().blocks if b.speech}
        got |= {i: back.memory.speech.text(i) for i in back.memory.ids_at(CLIP_S / 2, pad_s=CLIP_S)
                if i in back.memory.speech}
        assert got == said
    finally:
        back.stop()


# ---- the command line ----------------------------------------------------------------------------------------
def _run(*args):
    import json
    import sys

    proc = subprocess.run([sys.executable, "-m", "streamvid.cli", "run", *map(str, args)], capture_output=True,
                          text=True, timeout=600)
    return proc, [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_run_prints_transcripts_and_said_alerts(talk):
    path, _, placed = talk
    proc, lines = _run(path, "--watch", "0:said: stop", "--ask", "14:Tell me when someone says 'table'")
    assert proc.returncode == 0, proc.stderr
    transcripts = [o for o in lines if o["type"] == "transcript"]
    assert [round(o["t_s"]) for o in transcripts] == [round(s) for s, _, _ in placed]
    alerts = [o for o in lines if o["type"] == "alert"]
    assert [(a["trigger_id"], "stop" in words(a["heard"]) or "table" in words(a["heard"])) for a in alerts] == [
        ("w0", True), ("q0", True)]
    ack = next(o for o in lines if o["type"] == "answer")
    assert ack["text"] == "OK, I will tell you when someone says 'table'."
    assert lines[-1]["type"] == "stats" and lines[-1]["utterances"] == len(placed)


def test_a_recogniser_that_does_not_load_is_one_line(talk, tmp_path):
    path, _, _ = talk
    proc, lines = _run(path, "--asr", tmp_path / "missing", "--ask", "3:What is on screen?")
    assert proc.returncode == 2 and not lines
    assert proc.stderr.strip().splitlines()[-1] == (f"streamvid run: error: speech recogniser "
                                                    f"'{tmp_path / 'missing'}': no such directory")


# ---- recognition is off the scheduler ---------------------------------------------------------------------
class _Stuck:
    """A recogniser that does not return until released (a unit-test double for a slow model)."""

    name = "stuck"

    def __init__(self):
        import threading

        self.entered, self.release = threading.Event(), threading.Event()

    def transcribe(self, samples, hint=None):
        self.entered.set()
        self.release.wait(60)
        return "hello there"


def test_a_stuck_recogniser_holds_up_no_stream(adapter):
    from conftest import random_frames, wait_until
    from streamvid.assistant.hearing import Hearing
    from streamvid.engine.engine import Engine
    from streamvid.types import Frame

    engine = Engine(EngineConfig.from_settings(device="cpu", frame_px=56), adapter)
    talking, other = engine.open(), engine.open()
    stuck = _Stuck()
    hearing = Hearing(talking, stuck)
    engine.start()
    try:
        rng = np.random.default_rng(0)
        loud = np.concatenate([np.zeros(RATE // 2), 0.5 * rng.standard_normal(RATE), np.zeros(RATE)]).astype(np.float32)
        speech_probs = lambda x: np.array([float(np.abs(x[i:i + WINDOW]).mean() > 0.1)  # noqa: E731
                                           for i in range(0, len(x), WINDOW)])
        hearing.listener.segmenter = Segmenter(probabilities=speech_probs)
        hearing.feed(AudioChunk(0.0, loud))
        assert stuck.entered.wait(30)  # the talking stream's recogniser is busy and stays so
        frames = random_frames(6, seed=3, px=56)
        for i, image in enumerate(frames):
            assert other.insert(Frame(image, i / 2.0, i), timeout_s=30)
            assert talking.insert(Frame(image, i / 2.0, i), timeout_s=30)
        qid = other.ask("What is on screen?")
        got = []
        assert wait_until(lambda: got.extend(_drain(other)) or any(o.kind == "answer" and o.id == qid for o in got))
        assert wait_until(lambda: talking.ingest.blocks_encoded == 3)  # the talking stream's own frames too
        assert not stuck.release.is_set() and talking.utterances == 0
        stuck.release.set()
        assert wait_until(lambda: talking.ingest.speech_blocks == 1)
    finally:
        stuck.release.set()
        hearing.close()
        engine.close()


class _Hints:
    """A recogniser double that records what it was told for each utterance."""

    name = "hints"

    def __init__(self):
        self.told: list[str | None] = []

    def transcribe(self, samples, hint=None):
        self.told.append(hint)
        return "hello there"


def test_the_recogniser_is_told_the_phrases_asked_to_hear_from_when_they_were_asked(adapter):
    from conftest import wait_until
    from streamvid.assistant.hearing import Hearing
    from streamvid.engine.engine import Engine

    engine = Engine(EngineConfig.from_settings(device="cpu", frame_px=56), adapter)
    stream = engine.open()
    told = _Hints()
    hearing = Hearing(stream, told)
    try:
        stream.schedule(5.0, "Tell me when someone says 'table'.")  # a question, known ahead
        stream.watch("said: keys", t_s=15.0)
        stream.schedule(16.0, "What colour is the star?")  # asks to hear nothing
        stream.schedule(30.0, "Let me know when someone says 'stop'.")  # after every utterance below
        rng = np.random.default_rng(0)
        x = np.zeros(25 * RATE, np.float32)
        for t in (3.0, 12.0, 20.0):  # three utterances of 1 s
            x[int(t * RATE):int((t + 1) * RATE)] = 0.5 * rng.standard_normal(RATE)
        hearing.listener.segmenter = Segmenter(probabilities=lambda v: np.array(
            [float(np.abs(v[i:i + WINDOW]).mean() > 0.1) for i in range(0, len(v), WINDOW)]))
        hearing.feed(AudioChunk(0.0, x))
        hearing.finish()
        assert wait_until(lambda: len(told.told) == 3)
        assert told.told == ["assistant", "assistant, table", "assistant, keys, table"]
    finally:
        hearing.close()
        engine.close()


def _drain(stream):
    import queue

    out = []
    while True:
        try:
            out.append(stream.outputs.get_nowait())
        except queue.Empty:
            return out


def test_a_live_source_demuxes_its_sound_beside_the_frames(talk):
    import threading

    from streamvid.media.live_source import LiveSource

    path, _, placed = talk
    src = LiveSource(str(path), fps=2.0)
    chunks = []
    reader = threading.Thread(target=lambda: chunks.extend(src.sound()))
    reader.start()
    frames = 0
    while src.read(timeout_s=5.0) is not None:
        frames += 1
    reader.join(10)
    assert frames >= 55 and sum(len(c.samples) for c in chunks) / RATE == pytest.approx(CLIP_S, abs=1.5)
    loud = [c for c in chunks if np.sqrt(np.mean(c.samples ** 2)) > 0.02]
    assert loud and all(any(s - 0.3 <= c.t_s <= e + 0.3 for s, e, _ in placed) for c in loud)
    assert all(any(s - 0.3 <= c.t_s <= e for c in loud) for s, e, _ in placed)


def test_pushed_sound_is_heard_and_going_back_is_one_line(adapter, tmp_path):
    from conftest import wait_until
    from streamvid.assistant.hearing import Hearing
    from streamvid.audio.asr import load_recognizer
    from streamvid.engine.engine import Engine

    engine = Engine(EngineConfig.from_settings(device="cpu", frame_px=56), adapter)
    stream = engine.open()
    hearing = Hearing(stream, load_recognizer())
    engine.start()  # the scheduler lays what is heard into the stream (and says it) in time order
    try:
        x = _spoken(tmp_path, "stop")
        silence = np.zeros(RATE, np.float32)
        body = io.BytesIO()
        with wave.open(body, "wb") as w:  # a WAV as a client sends it, at 24 kHz
            w.setnchannels(1), w.setsampwidth(2), w.setframerate(24000)
            t = np.arange(int((len(x) + 2 * RATE) * 24000 / RATE)) / 24000
            y = np.interp(t, np.arange(len(x) + 2 * RATE) / RATE, np.concatenate([silence, x, silence]))
            w.writeframes((y * 32767).astype("<i2").tobytes())
        assert hearing.push(wav_samples(body.getvalue()), t_s=5.0) == 5.0
        with pytest.raises(ValueError, match="goes back in time") as e:
            hearing.push(silence, t_s=6.0)
        assert "\n" not in str(e.value)
        hearing.finish()
        assert wait_until(lambda: stream.utterances == 1)
        out = stream.outputs.get(timeout=5)
        a, b = _voiced(x)
        assert out.kind == "transcript" and "stop" in words(out.text) and abs(out.t_s - (6.0 + a)) < 0.5
    finally:
        hearing.close()
        engine.close()


def test_words_after_the_wake_word_are_a_question(tmp_path):
    x = _spoken(tmp_path, "hey assistant, what colour is the star?")  # (a bare robotic "assistant" is misheard)
    track = np.zeros(int(16 * RATE), np.float32)
    track[4 * RATE:4 * RATE + len(x)] = x
    path = tmp_path / "ask.mp4"
    _mux(demo_clip("shapes_7"), path, track, end_s=15.0)
    outs, stats, blocks = _replay(path)
    transcript = next(o for o in outs if o.kind == "transcript")
    answer = next(o for o in outs if o.kind == "answer")
    assert words(transcript.text)[:2] == ["hey", "assistant"]
    assert words(answer.question)[:3] == ["what", "colour", "is"] or words(answer.question)[:3] == ["what", "color", "is"]
    assert answer.t_s == transcript.t_end_s  # asked when the speaker stopped
    assert stats["speech_blocks"] == 0 and not any(b.speech for b in blocks)  # a question, not the stream's speech
    off, stats, _ = _replay(path, wake_word="")
    assert not [o for o in off if o.kind == "answer"] and stats["speech_blocks"] == 1


def test_an_hf_speech_recogniser_from_a_directory(tmp_path):
    """`--asr DIR`: a transformers checkpoint (a tiny random Whisper from make-tiny) through the library, compared
    with HF's own pipeline on the same samples."""
    import sys

    from transformers import pipeline

    from streamvid.audio.asr import load_recognizer

    out = tmp_path / "whisper"
    subprocess.run([sys.executable, "-m", "streamvid.cli", "make-tiny", "--arch", "whisper", "--out", str(out)],
                   check=True, capture_output=True, timeout=300)
    x = (0.1 * np.random.default_rng(0).standard_normal(RATE)).astype(np.float32)
    reference = pipeline("automatic-speech-recognition", model=str(out), device="cpu")(
        {"raw": x, "sampling_rate": RATE})["text"]
    assert load_recognizer(str(out)).transcribe(x) == " ".join(reference.split())


def test_run_asks_a_recorded_question(tmp_path):
    x = _spoken(tmp_path, "what colour is the star?")
    wav = tmp_path / "q.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(RATE)
        w.writeframes((x * 32767).astype("<i2").tobytes())
    proc, lines = _run("shapes_7", "--ask-audio", f"20:{wav}", "--audio", "off")
    assert proc.returncode == 0, proc.stderr
    answer = next(o for o in lines if o["type"] == "answer")
    assert words(answer["question"])[:2] == ["what", "color"] or words(answer["question"])[:2] == ["what", "colour"]
    assert answer["t_s"] == 20.0
    proc, lines = _run("shapes_7", "--ask-audio", f"20:{tmp_path / 'none.wav'}")
    assert proc.returncode == 2 and "no such file" in proc.stderr.strip().splitlines()[-1]
    (tmp_path / "bad.wav").write_bytes(b"RIFF....not a wav")
    proc, lines = _run("shapes_7", "--ask-audio", f"20:{tmp_path / 'bad.wav'}")
    assert proc.returncode == 2 and "not a WAV file" in proc.stderr.strip().splitlines()[-1]
