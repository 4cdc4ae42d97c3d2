"""The outputs a stream says, one class per kind, and their one JSON form (what `streamvid run` prints)."""

from __future__ import annotations

import json

from streamvid.types import Alert, Answer, Narration, ProbeResult, Status, Token


def test_each_kind_serialises_to_the_documented_object():
    answer = Answer("q3", "square", "What shape is blue?", 20.0, 20.0, 36.9, 1, None, [[12.0, 20.5]], [])
    assert json.loads(json.dumps(answer.to_json())) == {
        "type": "answer", "id": "q3", "text": "square", "question": "What shape is blue?", "t_s": 20.0,
        "input_t_s": 20.0, "ttft_ms": 36.9, "tokens": 1, "tokens_per_s": None, "evidence_t_s": [[12.0, 20.5]],
        "retrieved_blocks": []}
    ack = Answer("q4", "I'll tell you.", "Tell me when a star appears", 3.0, 3.0, 0.2, 0, None, [], [],
                 trigger_id="q4")
    assert ack.to_json()["trigger_id"] == "q4" and ack.data["trigger_id"] == "q4"
    alert = Alert("w0", "a red circle", 17.5, 0.9885, [[16.0, 18.0]], "There is a red circle now.")
    assert alert.to_json() == {"type": "alert", "trigger_id": "w0", "condition": "a red circle", "t_s": 17.5,
                               "score": 0.9885, "evidence_t_s": [[16.0, 18.0]], "text": "There is a red circle now."}
    assert alert.id == "w0" and "trigger_id" not in alert.data and alert.data["score"] == 0.9885
    assert Narration(4.5, "A blue square.").to_json() == {"type": "say", "t_s": 4.5, "text": "A blue square."}
    assert Narration(4.5, "x").id == ""
    assert Status("source_lost", 12.0, {"error": "timeout"}).to_json() == {
        "type": "status", "event": "source_lost", "t_s": 12.0, "error": "timeout"}
    assert Token("q3", "squ").to_json() == {"type": "token", "id": "q3", "text": "squ"}
    assert ProbeResult("p0", "yes", "Is there a star?", 2.0, 0.7).to_json() == {
        "type": "probe", "id": "p0", "text": "yes", "question": "Is there a star?", "t_s": 2.0, "p_yes": 0.7}
    assert [o.kind for o in (answer, alert, Narration(0.0, ""), Status("e", 0.0), Token("", ""))] == [
        "answer", "alert", "say", "status", "token"]
