"""Retrieval recall on ShapesWorld episodes: does one of the blocks retrieved for a memory question show what the
question names?

Computed from a trace and the episodes' exact timelines (`meta.timeline`, written by `streamvid synth`), so it can
be recomputed without the model. An answer's `evidence_t_s` lists the retrieved blocks' stream-time spans first
(one per `retrieved_blocks` id, time order), then the window's span. A retrieved span [a, b) "shows" a shape or
colour when some frame k with a <= k / fps < b has an object of that shape or colour; for a question that names
a time, when the span holds that time's frame.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from streamvid.language.spoken_times import stream_times
from streamvid.synth.questions import frames_show, mentions
from streamvid.synth.world import EPS, Timeline

MEMORY_TASKS = ("backward_colour", "backward_shape", "backward_at_time")


def frames_in_span(tl: Timeline, span: tuple[float, float]) -> range:
    """The frame indices k with a <= k / fps < b."""
    a, b = span
    return range(max(0, math.ceil(a * tl.fps - EPS)), min(tl.n_frames, math.ceil(b * tl.fps - EPS)))


def retrieval_recall(episodes: list[dict], trace_path: str | Path) -> dict | None:
    """{task: {"hits", "n", "recall"}} over the memory questions of episodes that carry a timeline; None if none do."""
    answers = {}
    for line in Path(trace_path).read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "answer":
            answers[(rec["episode_id"], rec["event_id"])] = rec
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for ep in episodes:
        name = (ep.get("meta") or {}).get("timeline")
        if not name:
            continue
        path = Path(ep["video"]["path"]).parent / name
        tl = Timeline.from_json(json.loads(path.read_text()))
        for e in ep["events"]:
            if e.get("kind") != "user_query" or e.get("task") not in MEMORY_TASKS:
                continue
            rec = answers.get((ep["episode_id"], e["id"]))
            if rec is None:
                continue
            spans = [tuple(s) for s in rec.get("evidence_t_s", [])[:len(rec.get("retrieved_blocks", []))]]
            if e["task"] == "backward_at_time":
                named = stream_times(e["text"], now_s=e["t"])
                hit = bool(named) and any(a - EPS <= tl.frame_time(named[0]) < b - EPS for a, b in spans)
            else:
                shape, colour = mentions(e["text"])
                hit = any(frames_show(tl, frames_in_span(tl, span), shape, colour) for span in spans)
            counts[e["task"]][0] += hit
            counts[e["task"]][1] += 1
    if not counts:
        return None
    out = {t: {"hits": h, "n": n, "recall": round(h / n, 4)} for t, (h, n) in sorted(counts.items())}
    h, n = sum(h for h, _ in counts.values()), sum(n for _, n in counts.values())
    out["all"] = {"hits": h, "n": n, "recall": round(h / n, 4)}
    return out
