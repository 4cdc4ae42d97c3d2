"""Timeliness-F1, precision/recall at ±d, delays and false alerts against hand-computed cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from streamvid.eval.score import load_episodes, score_trace
from streamvid.eval.timeliness import Gold, Question, credit, delays, match, precision_recall_at, report, timeliness_f1

W1 = Gold(10.0, (9.0, 13.0), sigma_early=1.5, sigma_late=0.75)
W2 = Gold(15.0, (14.0, 18.0), sigma_early=1.5, sigma_late=0.75)


def f1(p, r):
    return 2 * p * r / (p + r) if p + r else 0.0


@pytest.mark.parametrize("t,expected", [
    (9.0, 1.0), (11.0, 1.0), (13.0, 1.0),
    (7.5, math.exp(-0.5)),  # 1.5 s early = one sigma_early
    (14.5, math.exp(-2.0)),  # 1.5 s late = two sigma_late
    (6.0, math.exp(-2.0)),  # 3 s early = two sigma_early
])
def test_credit_is_one_inside_and_gaussian_outside(t, expected):
    assert credit(t, W1) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("replies,k,p,r", [
    ([11.0], 1, 1.0, 1.0),  # on time
    ([7.5], 1, math.exp(-0.5), math.exp(-0.5)),  # early: partial credit
    ([14.5], 1, math.exp(-2.0), math.exp(-2.0)),  # late: partial credit, a steeper decay
    ([16.0], 1, 0.0, 0.0),  # 3 s late = 4 sigma_late: beyond 3 widths, a false reply and a miss
    ([], 1, 0.0, 0.0),  # a miss
    ([10.0, 11.0], 1, 0.5, 1.0),  # a duplicate counts as a false reply with K=1 ...
    ([10.0, 11.0], 5, 1.0, 1.0),  # ... and is absorbed with K=5
    ([10.0, 11.0, 12.0], 2, 0.5, 1.0),  # K=2: the third is false
])
def test_one_window(replies, k, p, r):
    got = timeliness_f1([Question([W1], replies)], k=k)
    assert got["precision"] == pytest.approx(p, abs=1e-4)
    assert got["recall"] == pytest.approx(r, abs=1e-4)
    assert got["f1"] == pytest.approx(f1(p, r), abs=1e-4)


def test_one_reply_near_two_windows_goes_where_it_earns_most():
    # 13.5 s: 0.5 s late for W1 (exp(-0.5^2 / (2 * 0.75^2)) = 0.8007), 0.5 s early for W2 (exp(-0.5^2 / 4.5) = 0.9460)
    to_w1, to_w2 = math.exp(-0.25 / 1.125), math.exp(-0.25 / 4.5)
    assert (credit(13.5, W1), credit(13.5, W2)) == pytest.approx((to_w1, to_w2))
    m = match([13.5], [W1, W2], k=1)
    assert m.window_replies == [[], [13.5]] and m.window_score == pytest.approx([0.0, to_w2])
    got = timeliness_f1([Question([W1, W2], [13.5])])
    assert (got["precision"], got["recall"]) == pytest.approx((to_w2, to_w2 / 2), abs=1e-4)
    # a second reply finds W2 full (K=1) and goes to W1: 0.6 s late = exp(-0.36 / 1.125)
    m = match([13.6, 13.5], [W1, W2], k=1)
    assert m.window_replies == [[13.6], [13.5]]
    assert m.window_score == pytest.approx([math.exp(-0.36 / 1.125), to_w2])
    # a tie goes to the earlier window: 11 s is inside both of two overlapping windows
    assert match([11.0], [Gold(10.0, (9.0, 13.0)), Gold(11.0, (10.0, 14.0))]).window_replies == [[11.0], []]


def test_pooled_over_questions():
    qs = [Question([W1], [10.0]), Question([W1, W2], [])]  # one hit, two misses
    got = timeliness_f1(qs)
    assert (got["precision"], got["recall"], got["f1"]) == pytest.approx((1.0, 1 / 3, 0.5), abs=1e-4)


def test_precision_recall_at_tolerance():
    qs = [Question([W1, W2], [11.5, 13.5, 30.0])]  # gold times 10 and 15
    assert precision_recall_at(qs, 1) == {"precision": 0.0, "recall": 0.0}  # both 1.5 s off
    assert precision_recall_at(qs, 2) == {"precision": round(2 / 3, 4), "recall": 1.0}
    # one-to-one: two replies near one gold time hit once
    assert precision_recall_at([Question([W1], [10.2, 10.4])], 1) == {"precision": 0.5, "recall": 1.0}


def test_delays_and_report():
    qs = [Question([Gold(10.0, (9.0, 13.0))], [10.5]), Question([Gold(20.0, (19.0, 23.0))], [21.0]),
          Question([Gold(30.0, (29.0, 33.0))], [31.5, 31.6]), Question([Gold(40.0, (39.0, 43.0))], [44.0]),
          Question([Gold(50.0, (49.0, 53.0))], []), Question([Gold(60.0, (59.0, 63.0))], [100.0])]
    d = delays(qs)
    assert d == pytest.approx([0.5, 1.0, 1.5, 4.0])  # 44 s is 1 s late (exp(-0.89) >= exp(-4.5)); 100 s matches none
    rep = report(qs, stream_s=300.0)
    assert rep["delay_s_median"] == pytest.approx(float(np.median(d)))
    assert rep["delay_s_p90"] == pytest.approx(float(np.percentile(d, 90)))
    assert rep["missed_windows"] == 2 and rep["false_alerts"] == 2  # the duplicate at 31.6 and the one at 100 s
    assert rep["false_alerts_per_10min"] == pytest.approx(4.0)  # 2 in 5 minutes
    k1 = (1 + 1 + 1 + math.exp(-1 / 1.125)) / (4 + 2), (3 + math.exp(-1 / 1.125)) / 6
    assert (rep["timeliness_f1_k1"]["precision"], rep["timeliness_f1_k1"]["recall"]) == pytest.approx(k1, abs=1e-4)
    assert rep["timeliness_f1_k5"]["precision"] == pytest.approx((3 + math.exp(-1 / 1.125)) / 5, abs=1e-4)


def test_score_trace_reads_alerts_for_forward_questions(tmp_path):
    ep = {"schema": "stream-episode/1", "episode_id": "e1", "video": {"path": "v.mp4", "t_start": 0.0, "t_end": 60.0},
          "events": [
              {"id": "q0", "t": 5.0, "kind": "user_query", "text": "Tell me when a blue star appears.",
               "task": "forward"},
              {"id": "r0", "kind": "expected_response", "ref": "q0", "t_gold": 10.0, "window": [9.0, 13.0],
               "timing": {"sigma_early": 1.5, "sigma_late": 0.75}},
              {"id": "q1", "t": 20.0, "kind": "user_query", "text": "Let me know when a red circle appears.",
               "task": "forward"},
              {"id": "r1", "kind": "expected_response", "ref": "q1", "t_gold": 30.0, "window": [29.0, 33.0],
               "timing": {"sigma_early": 1.5, "sigma_late": 0.75}}]}
    eps = tmp_path / "eps.jsonl"
    eps.write_text(json.dumps(ep) + "\n")
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps(r) for r in [
        {"episode_id": "e1", "event_id": "q0", "type": "answer", "text": "OK", "t_s": 5.0, "ttft_ms": None},
        {"episode_id": "e1", "event_id": "q0", "type": "alert", "trigger_id": "q0", "t_s": 11.0, "text": "."},
        {"episode_id": "e1", "event_id": "q1", "type": "answer", "text": "OK", "t_s": 20.0, "ttft_ms": None},
        {"episode_id": "e1", "event_id": "q1", "type": "alert", "trigger_id": "q1", "t_s": 45.0, "text": "."},
    ]) + "\n")
    rep = score_trace(load_episodes(eps), trace)["proactive"]  # one on time, one 12 s late (false and a miss)
    assert rep["timeliness_f1_k1"] == {"f1": round(f1(0.5, 0.5), 4), "precision": 0.5, "recall": 0.5}
    assert rep["false_alerts"] == 1 and rep["false_alerts_per_10min"] == pytest.approx(10.0)
    assert rep["delay_s_median"] == pytest.approx(1.0) and rep["missed_windows"] == 1
