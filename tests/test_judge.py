"""The pluggable LLM judge: judge records for open-ended answers only, once per judge; the report's judged
accuracy from them."""

from __future__ import annotations

import json

from streamvid.config import EngineConfig
from streamvid.eval.judge import judge_trace
from streamvid.eval.report import build_report, markdown
from streamvid.eval.score import load_episodes


def _files(tmp_path):
    ep = {"schema": "stream-episode/1", "episode_id": "rvs/e", "video": {"path": "v.mp4"},
          "source": {"benchmark": "rvs", "task": "rvs-ego"},
          "events": [{"id": "q0", "t": 2.0, "kind": "user_query", "text": "What is held?", "task": "open-ended",
                      "category": "rvs-ego"},
                     {"id": "a0", "kind": "expected_answer", "ref": "q0", "gold": {"text": "a knife"},
                      "scorer": "substring"},
                     {"id": "q1", "t": 3.0, "kind": "user_query", "text": "Which?", "task": "mc", "category": "rvs-ego",
                      "options": ["A. x", "B. y"]},
                     {"id": "a1", "kind": "expected_answer", "ref": "q1", "gold": {"letter": "A"},
                      "scorer": "mc_first_letter"},
                     {"id": "q2", "t": 4.0, "kind": "user_query", "text": "And now?", "task": "open-ended",
                      "category": "rvs-ego"},
                     {"id": "a2", "kind": "expected_answer", "ref": "q2", "gold": {"text": "an onion"},
                      "scorer": "substring"}]}
    eps = tmp_path / "eps.jsonl"
    eps.write_text(json.dumps(ep) + "\n")
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in [
        {"episode_id": "rvs/e", "event_id": "q0", "type": "answer", "text": "A kitchen knife.", "ttft_ms": 5.0},
        {"episode_id": "rvs/e", "event_id": "q1", "type": "answer", "text": "A", "ttft_ms": 5.0},
        {"episode_id": "rvs/e", "event_id": "q2", "type": "answer", "text": "onions", "ttft_ms": 5.0}]))
    return load_episodes(eps), trace


def test_report_without_judge_says_so(tmp_path):
    eps, trace = _files(tmp_path)
    report = build_report(eps, trace)
    assert report["judge"].startswith("no LLM judge: open-ended answers are scored by substring/exact matching only")
    assert "judged" not in report and report["tasks"]["open-ended"] == {"correct": 0, "n": 2, "accuracy": 0.0}


def test_judged_accuracy_from_judge_records(tmp_path):
    eps, trace = _files(tmp_path)
    with open(trace, "a") as f:
        f.writelines(json.dumps({"episode_id": "rvs/e", "event_id": qid, "type": "judge", "judge": "j", "p_yes": p,
                                "verdict": p >= 0.5}) + "\n" for qid, p in (("q0", 0.9), ("q2", 0.3)))
    report = build_report(eps, trace)
    assert report["judge"] == {"model": "j", "n": 2,
                               "rule": "the judge's p(yes) >= 0.5 that the reply matches the gold answer"}
    assert report["judged"] == {"rvs/rvs-ego/open-ended": {"correct": 1, "n": 2, "accuracy": 0.5}}
    assert report["tasks"]["open-ended"]["correct"] == 0  # the judge records do not replace the answers
    assert "| rvs/rvs-ego/open-ended | 2 | 0.5 |" in markdown(report)


def test_judge_trace_with_a_model(tmp_path, tiny_model_dir):
    eps, trace = _files(tmp_path)
    cfg = EngineConfig.from_settings(model=str(tiny_model_dir))
    assert judge_trace(eps, trace, cfg) == 2  # the two open-ended answers, not the multiple-choice one
    recs = [json.loads(x) for x in trace.read_text().splitlines()]
    judged = [r for r in recs if r["type"] == "judge"]
    assert [r["event_id"] for r in judged] == ["q0", "q2"]
    assert all(r["judge"] == str(tiny_model_dir) and 0.0 <= r["p_yes"] <= 1.0 and r["verdict"] == (r["p_yes"] >= 0.5)
               for r in judged)
    assert judge_trace(eps, trace, cfg) == 0  # judged once per judge
    assert build_report(eps, trace)["judge"]["n"] == 2
