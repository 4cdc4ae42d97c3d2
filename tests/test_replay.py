"""Replay clips (decord and PyAV) end exactly at the question time; batch runs native and replay with a tiny
random model; --from-trace and --resume reproduce the report."""

from __future__ import annotations

import json
import platform
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from streamvid.config import EngineConfig
from streamvid.eval import batch
from streamvid.eval.batch import run_episode, score_files
from streamvid.eval.replay import ClipSource, grid_times
from streamvid.eval.report import write_reports
from streamvid.eval.score import load_all

VIDEO_FPS, LEVEL = 10, 3  # frame k is a flat grey of level 3k


@pytest.fixture(scope="module")
def grey_video(tmp_path_factory) -> Path:
    import av

    path = tmp_path_factory.mktemp("video") / "grey.mp4"
    with av.open(str(path), "w") as out:
        st = out.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=Fraction(VIDEO_FPS))
        st.width = st.height = 56
        st.pix_fmt = "yuv420p"
        for k in range(8 * VIDEO_FPS):
            img = np.full((56, 56, 3), LEVEL * k, np.uint8)
            for p in st.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(p)
        for p in st.encode():
            out.mux(p)
    return path


def test_grid_times():
    assert grid_times(0.0, 2.5, 2.0) == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert grid_times(1.0, 2.7, 2.0) == [1.0, 1.5, 2.0, 2.5]
    assert grid_times(0.0, 0.3, 1 / 0.3) == [0.0, 0.3]  # the end point survives float steps
    with pytest.raises(ValueError):
        grid_times(2.0, 1.0, 2.0)


def needs_decord() -> None:
    """decord is in the test extras where it has wheels (x86_64): skipped only on other machines."""
    if platform.machine() != "x86_64":
        pytest.skip(f"decord has no wheel for {platform.machine()}")
    import decord  # noqa: F401  (missing on x86_64: the test extras were not installed)


@pytest.mark.parametrize("backend", ["decord", "pyav"])
@pytest.mark.parametrize("t0,t,last", [(0.0, 2.5, 2.5), (1.0, 2.7, 2.5), (3.0, 3.0, 3.0), (0.0, 7.9, 7.5)])
def test_clip_ends_at_question_time_and_shows_that_frame(grey_video, backend, t0, t, last):
    if backend == "decord":
        needs_decord()
    clip = ClipSource(grey_video, t0, t, fps=2.0, backend=backend)
    frames = []
    while (f := clip.read()) is not None:
        frames.append(f)
    assert clip.backend == backend
    assert [f.t_s for f in frames] == grid_times(t0, t, 2.0) and frames[-1].t_s == last <= t
    # the frame shown at grid time g is video frame round(g * 10): grey level 3 * that (H.264 keeps it within 2)
    for f in frames:
        assert abs(float(f.image.mean()) - LEVEL * round(f.t_s * VIDEO_FPS)) <= 2.0, (f.t_s, f.image.mean())
    assert [f.index for f in frames] == list(range(len(frames)))


@pytest.mark.parametrize("backend", ["decord", "pyav"])
def test_clip_past_the_end_stops_at_the_last_frame(grey_video, backend):
    if backend == "decord":
        needs_decord()
    clip = ClipSource(grey_video, 0.0, 12450.0, fps=2.0, backend=backend)  # a question hours after the 8-s video
    frames = []
    while (f := clip.read()) is not None:
        frames.append(f)
    assert len(frames) == 16 and frames[-1].t_s == 7.5 and clip.times == grid_times(0.0, 7.5, 2.0)


def test_clip_errors(tmp_path):
    with pytest.raises(ValueError, match="video file not found"):
        ClipSource(tmp_path / "none.mp4", 0.0, 1.0, 2.0)
    bad = tmp_path / "bad.mp4"
    bad.write_text("not a video")
    with pytest.raises(ValueError, match=f"cannot read video {bad}: Invalid data found"):
        ClipSource(bad, 0.0, 1.0, 2.0)


def replay_episode(video: Path, eid: str = "e1", window_s: float | None = None) -> dict:
    return {"schema": "stream-episode/1", "episode_id": eid, "source": {"benchmark": "ovo-bench", "task": "mixed"},
            "video": {"path": str(video), "t_start": 0.0, "t_end": None},
            "protocol": {"context": "prefix", "context_window_s": window_s, "decision_hz": None},
            "events": [
                {"id": "q0", "t": 1.5, "kind": "user_query", "text": "What colour?", "task": "EPM",
                 "category": "backward", "options": ["A. grey", "B. red"], "prompt": "ovo-bench"},
                {"id": "a0", "kind": "expected_answer", "ref": "q0", "gold": {"letter": "A", "text": "grey"},
                 "scorer": "mc_first_letter"},
                {"id": "q1", "t": 2.7, "kind": "user_query", "text": "step", "task": "SSR", "category": "forward",
                 "prompt": "ovo-bench-ssr"},
                {"id": "a1", "kind": "expected_answer", "ref": "q1", "gold": {"text": "Yes"}, "scorer": "ovo_yes_no"}]}


def test_replay_feeds_each_question_its_clip(grey_video, tiny_model_dir, adapter, monkeypatch):
    clips = []

    class Recording(ClipSource):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            clips.append(list(self.times))

    monkeypatch.setattr(batch, "ClipSource", Recording)
    cfg = EngineConfig.from_settings(model=str(tiny_model_dir), fps=2.0, max_new_tokens=3)
    recs = run_episode(replay_episode(grey_video, window_s=1.0), cfg, adapter, "replay")
    # one fresh clip per question, ending at the question time (2.7 s: the grid point 2.5 s), starting at
    # t - context_window_s
    assert clips == [[0.5, 1.0, 1.5], [1.7, 2.2, 2.7]]
    answers = [r for r in recs if r["type"] == "answer"]
    assert [(r["event_id"], r["t_s"]) for r in answers] == [("q0", 1.5), ("q1", 2.7)]
    assert answers[0]["question"].startswith("\nQuestion: What colour?\nOptions:\nA. grey; B. red;\n\nRespond only")
    assert "currently performing this step" in answers[1]["question"]
    stats = recs[-1]
    assert stats["type"] == "stats" and stats["runs"] == 2 and stats["frames_in"] == 6 and stats["mode"] == "replay"
    assert all(end <= r["t_s"] + 0.5 + 1e-6 for r in answers for _, end in r["evidence_t_s"])


def _timing_free(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in ("system", "ttft_ms_median")}


def test_native_run_from_trace_and_resume(grey_video, tiny_model_dir, tmp_path):
    eps = tmp_path / "eps.jsonl"
    eps.write_text("".join(json.dumps(replay_episode(grey_video, e)) + "\n" for e in ("e1", "e2")))
    cfg = EngineConfig.from_settings(model=str(tiny_model_dir), fps=2.0, max_new_tokens=3)
    out = tmp_path / "run"
    report = score_files([eps], cfg, out, mode="native")
    assert report["n"] == 4 and report["run"]["mode"] == "native"
    assert sorted(p.name for p in (out / "timelines").glob("*.png")) == ["e1.png", "e2.png"]
    # --from-trace: the same report from the trace alone
    again = write_reports(load_all([eps]), out / "trace.jsonl", tmp_path / "again", [str(eps)])
    assert again == report == json.loads((out / "report.json").read_text())
    # an interrupted run: e1 closed, e2 cut off after its first record
    lines = (out / "trace.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    e1_end = next(i for i, r in enumerate(recs) if r["type"] == "stats" and r["episode_id"] == "e1")
    cut = lines[:e1_end + 2]
    assert json.loads(cut[-1])["episode_id"] == "e2" and json.loads(cut[-1])["type"] != "stats"
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    (resumed_dir / "trace.jsonl").write_text("\n".join(cut) + '\n{"episode_id": "e2", "trunc')
    resumed = score_files([eps], cfg, resumed_dir, mode="native", resume=True)
    new_lines = (resumed_dir / "trace.jsonl").read_text().splitlines()
    assert new_lines[:e1_end + 1] == lines[:e1_end + 1]  # e1 kept as it was, not run again
    assert sum(json.loads(x)["type"] == "stats" for x in new_lines) == 2
    assert _timing_free(resumed) == _timing_free(report)
    with pytest.raises(ValueError, match="--resume: the trace was run with --mode native, not replay"):
        score_files([eps], cfg, resumed_dir, mode="replay", resume=True)


def test_replay_polls_streamingbench_proactive(grey_video, tiny_model_dir, adapter, monkeypatch):
    clips = []

    class Recording(ClipSource):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            clips.append((self.times[0], self.times[-1]))

    monkeypatch.setattr(batch, "ClipSource", Recording)
    ep = {"schema": "stream-episode/1", "episode_id": "p", "source": {"benchmark": "streamingbench"},
          "video": {"path": str(grey_video), "t_start": 0.0, "t_end": None}, "protocol": {},
          "events": [{"id": "q0", "t": 1.0, "kind": "user_query", "text": 'When it turns white, output "white".',
                      "task": "Proactive Output", "category": "proactive", "prompt": "streamingbench-proactive",
                      "gold_output": "white", "poll": [2.0, 6.0]},
                     {"id": "r0_0", "kind": "expected_response", "ref": "q0", "t_gold": 2.0, "window": [0.0, 4.0],
                      "gold": {"text": "white"}}]}
    cfg = EngineConfig.from_settings(model=str(tiny_model_dir), fps=2.0, max_new_tokens=3)
    recs = run_episode(ep, cfg, adapter, "replay")
    stats = recs[-1]
    assert stats["polls"] == 5  # once a second over [2, 6], on one pass
    alerts = [r for r in recs if r["type"] == "alert"]
    assert len(alerts) <= 1 and stats["runs"] == 1 + len(alerts)
    # the polls' pass runs from the question time (1 s) to the last poll; after the first "yes" the question is
    # answered on the clip from the question time to that poll
    assert clips == [(1.0, 6.0)] + [(1.0, a["t_s"]) for a in alerts]
    for a in alerts:
        assert a["event_id"] == "q0" and a["t_s"] in (2.0, 3.0, 4.0, 5.0, 6.0) and isinstance(a["text"], str)


def test_cli_score_replay_and_from_trace(grey_video, tiny_model_dir, tmp_path):
    import subprocess
    import sys

    eps = tmp_path / "eps.jsonl"
    eps.write_text(json.dumps(replay_episode(grey_video, "e1")) + "\n")
    base = [sys.executable, "-m", "streamvid.cli", "score", str(eps), "--model", str(tiny_model_dir),
            "--max-new-tokens", "3", "--no-plots"]
    run = subprocess.run([*base, "--mode", "replay", "--out", str(tmp_path / "a")], check=False, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    assert "[1/1] e1: 2/2 questions" in run.stderr
    again = subprocess.run([*base, "--from-trace", str(tmp_path / "a" / "trace.jsonl"), "--out", str(tmp_path / "b")],
                           check=False, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(run.stdout)
    assert (tmp_path / "b" / "report.md").read_text() == (tmp_path / "a" / "report.md").read_text()
    bad = subprocess.run([*base, "--from-trace", str(tmp_path / "none.jsonl")], check=False, capture_output=True,
                         text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip() == f"streamvid score: error: trace not found: {tmp_path / 'none.jsonl'}"


def test_replay_keeps_a_dialogue_chain_on_one_clip(grey_video, tiny_model_dir, adapter):
    ep = replay_episode(grey_video)
    ep["protocol"]["dialogue_turns"] = 6
    ep["events"] = [{"id": f"q{i}", "t": t, "kind": "user_query", "text": f"turn {i}?", "task": "qa-chain",
                     "prompt": "svbench"} for i, t in enumerate((2.0, 2.0, 3.0))]
    cfg = EngineConfig.from_settings(model=str(tiny_model_dir), fps=2.0, max_new_tokens=2)
    recs = run_episode(ep, cfg, adapter, "replay")
    assert [(r["event_id"], r["t_s"], r["question"]) for r in recs if r["type"] == "answer"] == [
        ("q0", 2.0, "turn 0?"), ("q1", 2.0, "turn 1?"), ("q2", 3.0, "turn 2?")]
    assert recs[-1]["runs"] == 2  # the two turns at 2 s share one clip (and the dialogue), 3 s gets its own
