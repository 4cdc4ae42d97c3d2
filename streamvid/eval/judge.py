"""A pluggable LLM judge for open-ended answers: any model streamvid can load, asked one yes/no question per
answer, text only.

    streamvid score EPISODES.jsonl --out DIR --judge MODEL   (also with --resume, to judge a finished run)

For every reply scored by substring, exact or number matching, the judge model reads the question, the gold
answer and the reply, and its p(yes) for "does the reply match?" is recorded in the trace as a "judge" record
{"episode_id", "event_id", "type": "judge", "judge", "p_yes", "verdict"}. The report then gives judged accuracy
per task next to the matching scores and names the judge; a trace without judge records says that only
exact/substring matching was used. The benchmarks' own judges (GPT-3.5 yes/no with a 0-5 score for RVS, GPT-4
criteria for SVBench) are API models; this judge asks the same kind of yes/no question of a local model.
"""

from __future__ import annotations

import json
from pathlib import Path

from streamvid.config import EngineConfig

OPEN_ENDED = ("substring", "exact", "number")
PROMPT = ("Question: {question}\nCorrect answer: {gold}\nPredicted answer: {reply}\n"
          "Does the predicted answer match the correct answer in meaning? Answer yes or no.")


def judge_name(model: str) -> str:
    from streamvid.config import BUNDLED_MODEL

    return "bundled streamvid-tiny" if model == str(BUNDLED_MODEL) else model


def judge_trace(episodes: list[dict], trace_path: str | Path, config: EngineConfig) -> int:
    """Append judge records for the open-ended replies not yet judged by this model; returns how many."""
    from streamvid.assistant.assistant import StreamingAssistant

    trace_path = Path(trace_path)
    records = [json.loads(x) for x in trace_path.read_text().splitlines() if x.strip()]
    name = judge_name(config.model)
    judged = {(r["episode_id"], r["event_id"]) for r in records if r.get("type") == "judge" and r.get("judge") == name}
    replies = {(r["episode_id"], r["event_id"]): r for r in records if r.get("type") == "answer"}
    todo = []
    for ep in episodes:
        events = {e["id"]: e for e in ep["events"] if "id" in e}
        for e in ep["events"]:
            if e["kind"] != "expected_answer" or e["scorer"] not in OPEN_ENDED:
                continue
            key = (ep["episode_id"], e["ref"])
            if key in replies and key not in judged:
                q = events[e["ref"]]
                todo.append((key, PROMPT.format(question=q["text"], gold=e["gold"].get("text", ""),
                                                reply=replies[key]["text"])))
    if not todo:
        return 0
    with StreamingAssistant(config.replace(memory_top_k=0, dialogue_turns=0)) as sa, open(trace_path, "a") as f:
        for (eid, qid), prompt in todo:
            out = sa.probe(prompt)  # no video: the window holds the sinks only
            p = out.p_yes
            f.write(json.dumps({"episode_id": eid, "event_id": qid, "type": "judge", "judge": name, "p_yes": p,
                                "verdict": p >= 0.5}) + "\n")
    return len(todo)
