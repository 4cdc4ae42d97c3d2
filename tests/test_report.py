"""Benchmark metrics and reports against hand-computed cases: multiple-choice rules, OVO-Bench's aggregation,
StreamingBench proactive timing, system figures, Markdown and PNG timelines."""

from __future__ import annotations

import json

import pytest

from streamvid.eval.metrics import mc_lenient, mc_official, mc_strict, ovo_count, ovo_yes_no, score
from streamvid.eval.report import build_report, markdown, write_reports
from streamvid.eval.score import load_episodes

OPTS = ["A. a red cup", "B. a blue cup", "C. a plate", "D. a spoon"]


@pytest.mark.parametrize("reply,letter,strict,lenient", [
    ("B", "B", True, True), ("B. a blue cup", "B", True, True), ("(B) a blue cup", "B", True, True),
    ("The answer is B.", "B", False, True), ("Because it is blue", "B", False, False),
    ("b", "B", False, True), ("I think a blue cup", "B", False, True),  # no letter: the option text decides
    ("a red cup or a blue cup", "B", False, False),  # two options' texts: no answer
    ("Answer: C", "A", False, False), ("(a) red", "A", False, True), ("", "A", False, False)])
def test_multiple_choice_strict_and_lenient(reply, letter, strict, lenient):
    assert mc_strict(reply, letter) is strict
    assert mc_lenient(reply, letter, OPTS) is lenient


def test_official_multiple_choice_rules():
    # OVO-Bench: the gold letter anywhere in the reply, case-sensitive ("Answer: C" holds an "A")
    assert mc_official("ovo-bench", "Answer: C", "A") is True
    assert mc_official("ovo-bench", "c", "C") is False
    # StreamingBench: the first character
    assert mc_official("streamingbench", "B. blue", "B") is True
    assert mc_official("streamingbench", " B", "B") is False
    assert mc_official("rvs", "B", "B") is None


def test_ovo_forward_rules():
    assert ovo_count("3", "3") and ovo_count("It happened 3 times.", "3")
    assert not ovo_count("2 or 3", "3") and not ovo_count("three", "3")  # digits joined: "23"; words do not count
    assert ovo_yes_no("Yes.", "Yes") and ovo_yes_no("N", "No") and ovo_yes_no("No, not yet", "No")
    assert not ovo_yes_no("yes", "Yes") and not ovo_yes_no("Y.", "Yes")
    assert score("4 times", "4", "ovo_count") and not score("no", "No", "ovo_yes_no")


def _episodes(tmp_path):
    ovo = {"schema": "stream-episode/1", "episode_id": "ovo-bench/v1.mp4", "video": {"path": "v1.mp4"},
           "source": {"benchmark": "ovo-bench", "task": "mixed"},
           "events": [
               {"id": "q0", "t": 4.0, "kind": "user_query", "text": "What?", "task": "EPM", "category": "backward",
                "options": OPTS, "prompt": "ovo-bench"},
               {"id": "a0", "kind": "expected_answer", "ref": "q0", "gold": {"letter": "B"},
                "scorer": "mc_first_letter"},
               {"id": "q1", "t": 2.5, "kind": "user_query", "text": "Sign?", "task": "OCR", "category": "realtime",
                "options": OPTS, "prompt": "ovo-bench"},
               {"id": "a1", "kind": "expected_answer", "ref": "q1", "gold": {"letter": "A"},
                "scorer": "mc_first_letter"},
               {"id": "q2", "t": 1.0, "kind": "user_query", "text": "step", "task": "SSR", "category": "forward"},
               {"id": "a2", "kind": "expected_answer", "ref": "q2", "gold": {"text": "Yes"}, "scorer": "ovo_yes_no"},
               {"id": "q3", "t": 2.0, "kind": "user_query", "text": "step", "task": "SSR", "category": "forward"},
               {"id": "a3", "kind": "expected_answer", "ref": "q3", "gold": {"text": "No"}, "scorer": "ovo_yes_no"},
               {"id": "q4", "t": 3.0, "kind": "user_query", "text": "count", "task": "REC", "category": "forward"},
               {"id": "a4", "kind": "expected_answer", "ref": "q4", "gold": {"text": "1"}, "scorer": "ovo_count"},
               {"id": "q5", "t": 5.0, "kind": "user_query", "text": "count", "task": "REC", "category": "forward"},
               {"id": "a5", "kind": "expected_answer", "ref": "q5", "gold": {"text": "2"}, "scorer": "ovo_count"}]}
    sb = {"schema": "stream-episode/1", "episode_id": "streamingbench/proactive/p1", "video": {"path": "p1.mp4",
          "t_end": 60.0}, "source": {"benchmark": "streamingbench", "task": "proactive"},
          "events": [{"id": "q0", "t": 1.0, "kind": "user_query", "text": 'When X, output "3".',
                      "task": "Proactive Output", "category": "proactive", "gold_output": "3", "poll": [2.0, 8.0]},
                     {"id": "r0_0", "kind": "expected_response", "ref": "q0", "t_gold": 4.0, "window": [2.0, 6.0],
                      "gold": {"text": "3"}}]}
    path = tmp_path / "eps.jsonl"
    path.write_text(json.dumps(ovo) + "\n" + json.dumps(sb) + "\n")
    return load_episodes(path)


def _trace(tmp_path):
    def ans(ep, ev, text, ttft, t):
        return {"episode_id": ep, "event_id": ev, "type": "answer", "text": text, "ttft_ms": ttft, "t_s": t}
    o = "ovo-bench/v1.mp4"
    recs = [{"episode_id": None, "event_id": None, "type": "run", "mode": "replay", "model": "m"},
            ans(o, "q0", "The answer is B.", 10.0, 4.0), ans(o, "q1", "Answer: C", 20.0, 2.5),
            ans(o, "q2", "Yes.", 30.0, 1.0), ans(o, "q3", "yes", 40.0, 2.0),
            ans(o, "q4", "1", 50.0, 3.0), ans(o, "q5", "2 times, maybe 3", 60.0, 5.0),
            {"episode_id": o, "event_id": None, "type": "stats", "frames_in": 20, "encode_s": 2.0, "wall_s": 5.0,
             "stream_s": 10.0, "peak_memory_mb": 100.0, "frames_dropped": 1},
            {"episode_id": "streamingbench/proactive/p1", "event_id": "q0", "type": "alert", "trigger_id": "q0",
             "t_s": 5.0, "text": "It is 3 now", "ttft_ms": 70.0},
            {"episode_id": "streamingbench/proactive/p1", "event_id": None, "type": "stats", "frames_in": 10,
             "encode_s": 3.0, "wall_s": 5.0, "stream_s": 10.0, "peak_memory_mb": 150.0, "frames_dropped": 0}]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_report_by_hand(tmp_path):
    report = build_report(_episodes(tmp_path), _trace(tmp_path))
    # the episodes' own scorers: EPM right (first letter b), OCR wrong, SSR 1/2 ("yes" lacks "No"), REC 1/2 ("23")
    assert report["tasks"] == {"EPM": {"correct": 1, "n": 1, "accuracy": 1.0},
                               "OCR": {"correct": 0, "n": 1, "accuracy": 0.0},
                               "REC": {"correct": 1, "n": 2, "accuracy": 0.5},
                               "SSR": {"correct": 1, "n": 2, "accuracy": 0.5}}
    assert report["overall"] == 0.5 and report["categories"]["ovo-bench/forward"] == {
        "correct": 2, "n": 4, "accuracy": 0.5}
    assert report["multiple_choice"] == {"ovo-bench": {
        "backward": {"EPM": {"n": 1, "strict": 0.0, "lenient": 1.0, "official": 1.0}},
        "realtime": {"OCR": {"n": 1, "strict": 0.0, "lenient": 0.0, "official": 1.0}}}}
    # OVO: task means (official MC rule), category = mean of tasks, overall = mean of categories
    assert report["ovo_bench"] == {"tasks": {"EPM": 100.0, "OCR": 100.0, "REC": 50.0, "SSR": 50.0},
                                   "categories": {"backward": 100.0, "forward": 50.0, "realtime": 100.0},
                                   "overall": 83.33}
    # reply at 5 s for gold 4 s: within ±2 s and holds "3"
    assert report["streamingbench_proactive"] == {"Proactive Output": {"n": 1, "time_accuracy": 1.0,
                                                                       "answer_accuracy": 1.0}}
    assert report["proactive"]["timeliness_f1_k1"] == {"f1": 1.0, "precision": 1.0, "recall": 1.0}
    # TTFT over answers and alerts 10..70 ms: p50 40, p90 60 + 0.4 * 10; 30 frames in 5 s of encoding;
    # 10 wall s for 20 stream s
    assert report["system"] == {"ttft_ms_p50": 40.0, "ttft_ms_p90": 64.0, "ingest_frames_per_s": 6.0,
                                "real_time_factor": 0.5, "frames_in": 30, "frames_dropped": 1,
                                "peak_memory_mb": 150.0, "peak_memory_kind": None}
    assert report["run"] == {"mode": "replay", "model": "m"}
    md = markdown(report)
    assert "| backward | EPM | 1 | 0 | 1 | 1 |" in md and "| 100 | 100 | 50 | 50 | 100 | 50 | 100 | 83.33 |" in md


def test_reports_written_and_timeline_png(tmp_path):
    eps = _episodes(tmp_path)
    report = write_reports(eps, _trace(tmp_path), tmp_path / "out", ["eps.jsonl"])
    assert json.loads((tmp_path / "out" / "report.json").read_text()) == report
    assert (tmp_path / "out" / "report.md").read_text().startswith("# streamvid score report")
    pngs = sorted((tmp_path / "out" / "timelines").glob("*.png"))
    assert [p.name for p in pngs] == ["ovo-bench_v1.mp4.png", "streamingbench_proactive_p1.png"]
    for p in pngs:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
