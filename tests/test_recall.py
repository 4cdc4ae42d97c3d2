"""Retrieval recall on ShapesWorld: a retrieved span counts when the timeline shows the named thing in it."""

from __future__ import annotations

import json

from streamvid.eval.recall import retrieval_recall
from streamvid.synth.world import generate


def test_recall_counts_spans_that_show_what_is_named(tmp_path):
    tl = generate(4, 120.0)
    (tmp_path / "tl.json").write_text(json.dumps(tl.to_json()))
    tr = tl.tracks[0]
    inside = (tr.enter_s, tr.enter_s + 1.0)  # shows track 0
    empty = [(k / 2, k / 2 + 1.0) for k in range(0, 238, 2)  # shows neither its shape nor its colour
             if not any(o.shape == tr.shape or o.colour == tr.colours[0][1]
                        for f in (k, k + 1) for o in tl.objects_at(f / 2))][0]
    events = [
        {"id": "q0", "t": 110.0, "kind": "user_query", "text": f"What colour was the {tr.shape}?", "task": "backward_colour"},
        {"id": "q1", "t": 110.0, "kind": "user_query", "text": f"Which shape was {tr.colours[0][1]}?", "task": "backward_shape"},
        {"id": "q2", "t": 110.0, "kind": "user_query", "text": "What was on screen at 00:30?", "task": "backward_at_time"},
        {"id": "q3", "t": 110.0, "kind": "user_query", "text": "What was on screen at 00:30?", "task": "backward_at_time"},
    ]
    ep = {"episode_id": "e", "video": {"path": str(tmp_path / "v.mp4")}, "events": events, "meta": {"timeline": "tl.json"}}
    answers = {"q0": [empty, inside], "q1": [empty], "q2": [(29.0, 30.0), (30.0, 31.0)], "q3": [(31.0, 32.0)]}
    with open(tmp_path / "trace.jsonl", "w") as f:
        for qid, spans in answers.items():
            rec = {"episode_id": "e", "event_id": qid, "type": "answer", "text": "",
                   "evidence_t_s": [list(s) for s in spans] + [[100.0, 110.0]],  # the window's span comes last
                   "retrieved_blocks": list(range(len(spans)))}
            f.write(json.dumps(rec) + "\n")
    got = retrieval_recall([ep], tmp_path / "trace.jsonl")
    assert got["backward_colour"] == {"hits": 1, "n": 1, "recall": 1.0}
    assert got["backward_shape"] == {"hits": 0, "n": 1, "recall": 0.0}
    assert got["backward_at_time"] == {"hits": 1, "n": 2, "recall": 0.5}
    assert got["all"]["recall"] == 0.5
    assert retrieval_recall([{**ep, "meta": {}}], tmp_path / "trace.jsonl") is None
