"""What compact long-term KV costs: logit error, answers and accuracy on ShapesWorld memory questions, bytes per hour.

    python benchmarks/compact_kv.py [CLIP_DIR ...] [--choices float:1 int8:1 int4:1 int8:0.75 ...]

(default clips: the demo clips shapes_7, shapes_8, shapes_9). For each storage choice (memory_kv float / int8 / int4,
memory_keep 1 / 0.75 / 0.5) the bundled model replays each
demo clip and answers its memory questions (backward colour / shape / at-time) at their stream times; the report
gives accuracy, answers equal to the full-precision run, and memory bytes per hour of stream. The logit error is
measured at the end of each clip: for every memory question, the top-k blocks retrieved from full-precision memory
are laid out before the window as the engine does, once as stored (float) and once after int8 quantisation (and
pruning); the answer position's logits are compared (max |Δ| and the share of questions whose top token agrees).
Bytes per hour for Qwen2.5-VL-7B (bfloat16, 448 px, 2 fps) are computed from its config (budget.py).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from streamvid.adapters.base import load_adapter
from streamvid.assets import DEMO_VIDEOS
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import BUNDLED_MODEL, EngineConfig
from streamvid.eval.metrics import score
from streamvid.eval.score import load_episodes
from streamvid.kv.budget import KVShape, budgets
from streamvid.kv.memory import StoredBlock
from streamvid.kv.positions import layout
from streamvid.media.file_source import FileSource
from streamvid.language.asked import Question

CHOICES = [("float", 1.0), ("int8", 1.0), ("int4", 1.0), ("int8", 0.75), ("int8", 0.5), ("float", 0.5)]
QWEN25_VL_7B = {"hidden_size": 3584, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4}


def memory_questions(clip: Path) -> tuple[str, list[tuple[float, str, dict]]]:
    episode = load_episodes(clip / "episodes.jsonl")[0]
    gold = {e["ref"]: e for e in episode["events"] if e["kind"] == "expected_answer"}
    qs = [(e["t"], e["text"], gold[e["id"]]) for e in episode["events"]
          if e["kind"] == "user_query" and e.get("task", "").startswith("backward")]
    return episode["video"]["path"], qs


def logit_errors(adapter, sa: StreamingAssistant, qs, kind: str, keep: float) -> list[tuple[float, bool]]:
    """(max |Δlogit|, same top token) per question at the end of the clip: full-precision retrieved blocks vs the
    same blocks stored as (kind, keep)."""
    snap = sa.window.snapshot()
    out = []
    for t, text, _ in qs:
        blocks, _ = sa.reasoning.retrieve(Question("q", text, t), snap)
        if not blocks:
            continue
        compact = [StoredBlock.of(b, kind, keep).to_block() for b in blocks]
        ids = adapter.token_ids(adapter.prompt(text))
        logits = []
        for retrieved in (blocks, compact):
            ctx = layout(snap.sinks, retrieved, snap.blocks, adapter.positions)
            with torch.inference_mode():
                logits.append(adapter.forward(ids, adapter.text_positions(ctx.next_pos, ids.shape[1]), ctx)[0][0, -1])
        out.append((float((logits[0] - logits[1]).abs().max()), int(logits[0].argmax()) == int(logits[1].argmax())))
    return out


def main(clips: list[Path], choices: list[tuple[str, float]] = CHOICES) -> dict:
    adapter = load_adapter(str(BUNDLED_MODEL))
    answers: dict[tuple[str, float], list[str]] = {}
    report = {"choices": []}
    choices = [("float", 1.0)] + [c for c in choices if c != ("float", 1.0)]  # the reference comes first
    for kind, keep in choices:
        cfg = EngineConfig.from_settings(max_new_tokens=12, memory_kv=kind, memory_keep=keep)
        texts, right, errors, stored, seconds = [], [], [], 0, 0.0
        t0 = time.perf_counter()
        for clip in clips:
            video, qs = memory_questions(clip)
            with StreamingAssistant(cfg, adapter=adapter) as sa:
                outs = [o for o in sa.run_simulated(FileSource(video, fps=cfg.fps), [(t, q) for t, q, _ in qs])
                        if o.kind == "answer"]
                texts += [o.text for o in outs]
                right += [score(o.text, g["gold"]["text"], g["scorer"]) for o, (_, _, g) in zip(outs, qs)]
                mem = sa.memory.stats()
                stored += mem.ram_mb * 2**20 + mem.disk_mb * 2**20
                seconds += sa.window.snapshot().blocks[0].t_start_s  # stream time that left the window
                if (kind, keep) != ("float", 1.0):
                    cfg_f = cfg.replace(memory_kv="float", memory_keep=1.0)
                    with StreamingAssistant(cfg_f, adapter=adapter) as full:
                        full.run_simulated(FileSource(video, fps=cfg.fps), [])
                        errors += logit_errors(adapter, full, qs, kind, keep)
        answers[kind, keep] = texts
        shape = adapter.kv_shape
        b7 = budgets(KVShape.from_config(QWEN25_VL_7B, "bfloat16"), 258, cfg)
        row = {"memory_kv": kind, "memory_keep": keep, "questions": len(texts),
               "accuracy": round(sum(right) / len(right), 3),
               "answers_equal_to_float": sum(a == b for a, b in zip(texts, answers["float", 1.0])),
               "bundled_mb_per_hour": round(stored / seconds * 3600 / 2**20, 2),
               "bundled_mb_per_hour_from_budget": round(budgets(shape, 18, cfg).memory_bytes_per_hour() / 2**20, 2),
               "qwen25vl_7b_448px_gb_per_hour": round(b7.memory_bytes_per_hour() / 2**30, 1),
               "wall_s": round(time.perf_counter() - t0, 1)}
        if errors:
            row["logit_max_abs_err_p50"] = round(sorted(e for e, _ in errors)[len(errors) // 2], 4)
            row["logit_max_abs_err_max"] = round(max(e for e, _ in errors), 4)
            row["top_token_agrees"] = f"{sum(a for _, a in errors)}/{len(errors)}"
        report["choices"].append(row)
        print(json.dumps(row), flush=True)
    return report


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clips", nargs="*", type=Path)
    ap.add_argument("--choices", nargs="+", default=[f"{k}:{p:g}" for k, p in CHOICES],
                    help="memory_kv:memory_keep pairs (float:1 is always run first, as the reference)")
    args = ap.parse_args()
    root = DEMO_VIDEOS
    chosen = [(c.split(":")[0], float(c.split(":")[1])) for c in args.choices]
    main(args.clips or [root / "shapes_7", root / "shapes_8", root / "shapes_9"], chosen)
