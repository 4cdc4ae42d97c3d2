"""Speaking up on ShapesWorld episodes: what the trigger machinery and the change gate do when the probes are right.

    python benchmarks/speaking_up.py EPISODES.jsonl... [--model M] [--gate-min-novelty G]

For each episode (a ShapesWorld stream with its timeline file), two measurements through the real engine:

1. The "tell me when" questions, run natively as `streamvid score` runs them, with the yes/no probes answered
   from the timeline (p(yes) 0.95 when the asked colour-shape pair is on screen at the chunk's last frame, else
   0.05) and everything else real: chunking, decisions per chunk, the firing rule, one-shot triggers, and the
   change gate on the model's own chunk features. This is the timing a model with perfect probes gets: the
   upper bound of the machinery (Timeliness-F1, delay, false alerts, probes run and skipped).
2. The change gate against the timeline: the share of chunks it skips (overall, and on chunks whose visible
   set did not change since the last look), and how late it looks after a real change.

The probes of the real model are measured by `streamvid score` (report.json, "proactive").
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import torch

from streamvid.adapters.base import load_adapter
from streamvid.adapters.row_by_row import RowByRow
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.engine.proactive import ChangeGate
from streamvid.engine.proactive import scene_features
from streamvid.eval.score import load_episodes
from streamvid.eval.timeliness import Gold, Question, report
from streamvid.media.file_source import FileSource

_PAIR = re.compile(r"Is there an? (\w+) (\w+) now\?")


class Timeline:
    """The visible (colour, shape) pairs of a ShapesWorld timeline file at a stream time."""

    def __init__(self, path: Path):
        d = json.loads(path.read_text())
        self.fps, self.tracks = d["fps"], d["tracks"]

    def pairs(self, t: float) -> frozenset[tuple[str, str]]:
        tf = math.floor(t * self.fps + 1e-6) / self.fps
        return frozenset(([c for s, c in tr["colours"] if s <= tf + 1e-6][-1], tr["shape"]) for tr in self.tracks
                         if tr["enter_s"] - 1e-6 <= tf < tr["leave_s"] - 1e-6)


class TimelineProbes(RowByRow):
    """The real adapter, except that probes answer from the timeline at the last frame of the newest chunk of the
    context (found by its KV values, which carry no position; its time by its last frame)."""

    def __init__(self, real, timeline: Timeline, frame_times: dict[bytes, float]):
        self._real, self._timeline, self._frame_times = real, timeline, frame_times
        self._chunks: list[tuple[torch.Tensor, float]] = []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def encode_chunk(self, frames, past, seconds_per_chunk, **kw):
        enc = self._real.encode_chunk(frames, past, seconds_per_chunk, **kw)
        self._chunks.append((enc.values[0], self._frame_times[np.ascontiguousarray(frames[-1]).tobytes()]))
        return enc

    def probe(self, context, question):
        tail = context.values[0]
        t = next(t for v, t in reversed(self._chunks) if torch.equal(tail[:, :, -v.shape[2]:], v))
        visible = self._timeline.pairs(t)
        return 0.95 if (m := _PAIR.match(question)) and m.groups() in visible else 0.05


def timing(ep: dict, adapter, timeline: Timeline, cfg: EngineConfig) -> dict:
    video = ep["video"]["path"]
    frame_times = {}
    src = FileSource(video, fps=cfg.fps)
    while (f := src.read()) is not None:
        frame_times.setdefault(f.image.tobytes(), f.t_s)
    events = {e["id"]: e for e in ep["events"] if "id" in e}
    forward = [(events[e["ref"]], e) for e in ep["events"] if e["kind"] == "expected_response"]
    cfg = cfg.replace(decision_hz=(ep.get("protocol") or {}).get("decision_hz"))
    sa = StreamingAssistant(cfg, adapter=TimelineProbes(adapter, timeline, frame_times))
    outputs = sa.run_simulated(FileSource(video, fps=cfg.fps), [(q["t"], q["text"]) for q, _ in forward])
    order = sorted(range(len(forward)), key=lambda i: forward[i][0]["t"])
    index = {a.id: i for i, a in zip(order, [o for o in outputs if o.kind == "answer"])}
    replies: dict[int, list[float]] = {i: [] for i in range(len(forward))}
    for o in outputs:
        if o.kind == "alert":
            replies[index[o.id]].append(o.data["t_s"])
    questions = [Question([Gold(g["t_gold"], tuple(g["window"]), **g.get("timing", {}))], replies[i])
                 for i, (_, g) in enumerate(forward)]
    st = sa.reasoning.stats()
    return {**report(questions, ep["video"]["t_end"]), "probes_run": st["probes_run"],
            "probes_skipped": st["probes_skipped"]}


def gate(ep: dict, adapter, timeline: Timeline, cfg: EngineConfig) -> dict:
    sa = StreamingAssistant(cfg, adapter=adapter)
    src = FileSource(ep["video"]["path"], fps=cfg.fps)
    g = ChangeGate(cfg.triggers.gate_min_novelty, cfg.triggers.gate_max_skip_s, cfg.triggers.gate_follow_up)
    ref, unchanged, skipped_unchanged, changes, late, lag, pending = None, 0, 0, 0, 0, [], None
    prev = None
    while (f := src.read()) is not None:
        n = sa.ingest.blocks_encoded
        sa.feed([f])
        if sa.ingest.blocks_encoded == n:
            continue
        scene, seen = scene_features(sa.window.snapshot().blocks[-1]), timeline.pairs(f.t_s)
        changes += prev is not None and seen != prev
        prev = seen
        same = ref is not None and seen == ref
        unchanged += same
        if g.should_look(scene, f.t_s):
            g.look(scene, f.t_s)
            ref = seen
            if pending is not None:
                lag.append(f.t_s - pending)
                pending = None
        else:
            g.skip()
            skipped_unchanged += same
            if not same and pending is None:
                pending, late = f.t_s, late + 1
    chunks = g.looked + g.skipped
    return {"chunks": chunks, "skipped": g.skipped, "skipped_share": round(g.skipped / chunks, 3),
            "skipped_share_unchanged": round(skipped_unchanged / max(1, unchanged), 3),
            "scene_changes": changes, "changes_seen_late": late,
            "late_by_s_median": float(np.median(lag)) if lag else 0.0, "late_by_s_max": max(lag, default=0.0)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("episodes", type=Path, nargs="+")
    p.add_argument("--model", default=EngineConfig().model)
    p.add_argument("--gate-min-novelty", type=float, default=EngineConfig().triggers.gate_min_novelty)
    args = p.parse_args(argv)
    cfg = EngineConfig.from_settings(model=args.model, gate_min_novelty=args.gate_min_novelty)
    adapter = load_adapter(cfg.model, cfg.device, cfg.dtype, cfg.memory.index_layer)
    for path in args.episodes:
        for ep in load_episodes(path):
            timeline = Timeline(path.parent / ep["meta"]["timeline"])
            print(json.dumps({"episode_id": ep["episode_id"], "gate_min_novelty": cfg.triggers.gate_min_novelty,
                              "timing_with_timeline_probes": timing(ep, adapter, timeline, cfg),
                              "change_gate": gate(ep, adapter, timeline, cfg)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
