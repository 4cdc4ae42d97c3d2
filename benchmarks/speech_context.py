"""What the engine's answer context does to questions about speech: each speech question of a ShapesWorld
episode (`streamvid synth`) is answered three ways on the same blocks, greedy, with the engine's defaults:

- engine: the context the engine laid out (sinks + retrieved blocks + window, each block's K/V as ingest
  encoded it: a window block on the window of its time, a memory chunk on the sinks alone);
- one forward: the same blocks encoded again in one pass, each on everything before it in the layout (what a
  training forward without a mask computes);
- training mask: each block encoded again on the sinks and the blocks of the layout that `train-tiny`'s
  `engine_mask` lets it see, without the ghosts (the window before the window, which a training sample has and
  this layout does not).

An answer counts as right when it holds the gold (realtime_said: the newest speech block's words, what was
heard). The gap between "engine" and "one forward" is what training on one-forward contexts misses.

    python benchmarks/speech_context.py runs/speechq/s9606/episodes.jsonl [--model DIR]
"""

from __future__ import annotations

import argparse
import json
import types
from collections import defaultdict
from pathlib import Path

import torch

from streamvid.adapters.base import adapter_for
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.engine.ingest import speech_line
from streamvid.media.file_source import FileSource
from streamvid.types import Context

SPEECH = ("realtime_said", "backward_said_at_time", "when_said")
WINDOW_S = 8.0


def _join(encs, next_pos: int) -> Context:
    return Context(tuple(torch.cat([e.keys[i] for e in encs], 2) for i in range(len(encs[0].keys))),
                   tuple(torch.cat([e.values[i] for e in encs], 2) for i in range(len(encs[0].keys))), next_pos)


def _norm(text: str | None) -> str:
    return "".join(c for c in (text or "").lower() if c.isalnum() or c in " :").strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("episodes")
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    ep_path = Path(args.episodes)
    ep = json.loads(ep_path.read_text().splitlines()[0])
    config = EngineConfig() if args.model is None else EngineConfig.from_settings(model=args.model)
    adapter = adapter_for(config)
    events = ep["events"]
    gold = {e["ref"]: e["gold"]["text"] for e in events if e["kind"] == "expected_answer"}
    asked = [e for e in events if e["kind"] == "user_query"]
    family = {e["text"]: e.get("task") for e in asked}
    answers = {e["text"]: gold.get(e["id"]) for e in asked}
    frames: dict[float, object] = {}
    video = ep["video"]
    source = FileSource(str(ep_path.parent / video["path"]), fps=config.fps, t_end_s=video.get("t_end"),
                        size=config.frame_px)
    read = source.read

    def keep_frame():
        f = read()
        if f is not None:
            frames[round(f.t_s, 3)] = f.image
        return f

    source.read = keep_frame
    seen = []
    with StreamingAssistant(config, adapter=adapter) as sa:
        def record(a, snap):
            if family.get(a.question.text) in SPEECH:
                seen.append((a.question.text, a, snap))

        sa.reasoning.on_answering = record
        sa.run_simulated(source, [(e["t"], e["text"]) for e in asked],
                         [(e["t"], e["text"]) for e in events if e["kind"] == "probe"])
    times = sorted(frames)

    def encode(block, past: Context):
        if block.speech is not None:
            return adapter.encode_text(speech_line(types.SimpleNamespace(t_s=block.t_start_s, text=block.speech)),
                                       past)
        k = min(range(len(times)), key=lambda i: abs(times[i] - block.t_start_s))
        return adapter.encode_chunk([frames[times[k + i]] for i in range(config.frames_per_chunk)], past,
                                    config.frames_per_chunk / config.fps, block.t_start_s)

    score = defaultdict(lambda: defaultdict(int))
    for text, a, snap in seen:
        retrieved = sorted(a.retrieved, key=lambda b: b.t_start_s)
        blocks = retrieved + (list(snap.blocks) if a.window else [])
        sinks = adapter.encode_text(adapter.sink_text, None)
        whole, pos = [sinks], sinks.pos_span
        for b in blocks:
            e = encode(b, _join(whole, pos))
            whole.append(e)
            pos += e.pos_span
        masked, pos = [], sinks.pos_span
        for i, b in enumerate(blocks):
            memory_chunk = i < len(retrieved) and b.speech is None
            group = range(len(retrieved)) if i < len(retrieved) else range(len(retrieved), i)
            vis = [masked[j] for j in group if j < i and not memory_chunk
                   and blocks[j].t_start_s >= b.t_start_s - WINDOW_S - 1e-6]
            e = encode(b, _join([sinks, *vis], pos))
            masked.append(e)
            pos += e.pos_span
        want = answers[text]
        if family[text] == "realtime_said":
            said = [b.speech for b in blocks if b.speech]
            want = said[-1] if said else want
        row = {"question": text, "family": family[text], "gold": want}
        for name, ctx in (("engine", a.context), ("one_forward", _join(whole, pos)),
                          ("training_mask", _join([sinks, *masked], pos))):
            row[name] = "".join(adapter.generate(ctx, a.prompt, 24)).strip()
            score[family[text]][name] += _norm(want) in _norm(row[name]) and bool(_norm(want))
        score[family[text]]["n"] += 1
        print(json.dumps(row), flush=True)
    print(json.dumps({f: dict(v) for f, v in score.items()}))


if __name__ == "__main__":
    main()
