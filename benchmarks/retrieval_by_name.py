"""Which names long-term memory finds: the retrieval of a ShapesWorld score run, per name, recomputed offline.

    python benchmarks/retrieval_by_name.py TRACE EPISODES... [--model DIR] [--top-k 4] [--fit-on EPISODES...]

For every backward_colour / backward_shape answer in TRACE (a `streamvid score` trace of EPISODES), the blocks
that had left the window by the question's time are scored as memory scores them (the engine's embedder rows, a
block by its best row) and the top k compared:
- with the trace's `retrieved_blocks` (agreement: the recomputation is the engine's, or the run used other
  settings);
- with the episode's timeline: recall (one of the k shows what the question names) and precision (the share of
  the k that do), per name. A question names a shape ("what colour was the hexagon?") or a colour.

`--fit-on EPISODES...` also fits, per name, one free unit query vector on the memory questions of other episodes
(Adam on the multi-positive InfoNCE of train-tiny's contrastive loss, scale 20, from the engine's mean query) and
reports its recall there and on EPISODES: how far any question vector, whatever the question side is trained to,
can take retrieval with these block vectors. Fitted on EPISODES themselves, it is an in-sample bound.

Settings are the engine's defaults (window, chunking, index layer, memory encoding) for `--model`; block j covers
stream time [j, j + 1) x the chunk's seconds.

The recall itself (`RecallTally`, `scores`, `recall`) is `streamvid/training/retrieval_recall.py`, which train-tiny's
held-out check uses too (`streamvid.training.retrieval.retrieval_check`, on block rows made from the training
tokens, the same as the engine's).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from streamvid.adapters.base import adapter_for
from streamvid.adapters.embedders import make_embedder
from streamvid.config import BUNDLED_MODEL, EngineConfig
from streamvid.eval.recall import frames_in_span
from streamvid.eval.score import load_episodes
from streamvid.media.file_source import FileSource
from streamvid.synth.questions import frames_show, mentions
from streamvid.synth.world import Timeline
from streamvid.training.retrieval_recall import RecallTally, recall
from streamvid.types import Context

TASKS = ("backward_colour", "backward_shape")


def block_rows(adapter, embedder, config: EngineConfig, video: Path) -> list[np.ndarray]:
    """The memory rows of every chunk of the video, each chunk encoded after the sinks."""
    sinks = adapter.encode_text(adapter.sink_text, None)
    past = Context(sinks.keys, sinks.values, sinks.pos_span)
    source = FileSource(video, fps=config.fps, size=config.frame_px)
    frames = [f.image for f in iter(source.read, None)]
    source.close()
    fpc, chunk_s = config.frames_per_chunk, config.frames_per_chunk / config.fps
    rows = []
    for c in range(len(frames) // fpc):
        chunk = frames[c * fpc:(c + 1) * fpc]
        encoded = adapter.encode_chunk(chunk, past, chunk_s, c * chunk_s)
        rows.append(np.atleast_2d(embedder.chunk_vector(chunk, encoded)))
    return rows


def collect(paths: list[Path], adapter, embedder, config: EngineConfig, k: int,
            answers: dict | None = None) -> tuple[RecallTally, dict, list[int]]:
    """Over the memory questions of the episodes (those answered in `answers`, a trace's, when given): the tally per
    (task, name) (`RecallTally.stats`: [questions whose top k show the name, blocks of the top k that show it,
    questions]); per name the questions as (block rows, which blocks show the name, engine query); [top k equal to
    the trace's, compared]."""
    chunk_s = config.frames_per_chunk / config.fps
    window_blocks = round(config.window.seconds / chunk_s)  # the default window: window_s of blocks
    tally = RecallTally(k)
    items: dict[str, list] = defaultdict(list)
    agree = [0, 0]
    for path in paths:
        for ep in load_episodes(path):
            video = Path(ep["video"]["path"])
            tl = Timeline.from_json(json.loads((video.parent / ep["meta"]["timeline"]).read_text()))
            rows = None
            for e in ep["events"]:
                rec = None if answers is None else answers.get((ep["episode_id"], e["id"]))
                if e.get("task") not in TASKS or (answers is not None and rec is None):
                    continue
                rows = rows or block_rows(adapter, embedder, config, video)
                n = int(e["t"] // chunk_s) - window_blocks  # blocks out of the window
                shape, colour = mentions(e["text"])
                shows = np.array([frames_show(tl, frames_in_span(tl, (j * chunk_s, (j + 1) * chunk_s)), shape, colour)
                                  for j in range(n)])
                q = embedder.question_vector(e["text"])
                top = tally.add(e["task"], shape or colour, rows[:n], shows, q)
                if rec is not None:
                    agree[0] += sorted(top.tolist()) == sorted(rec["retrieved_blocks"])
                    agree[1] += 1
                if shows.any() and not shows.all():
                    items[shape or colour].append((rows[:n], shows, q))
    return tally, items, agree


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path)
    p.add_argument("episodes", nargs="+", type=Path)
    p.add_argument("--model", default=str(BUNDLED_MODEL))
    p.add_argument("--top-k", type=int, default=4)
    p.add_argument("--fit-on", nargs="+", type=Path, default=[], metavar="EPISODES")
    args = p.parse_args()
    config = EngineConfig.from_settings(model=args.model)
    adapter = adapter_for(config)
    embedder = make_embedder(config, adapter)
    answers = {}
    for line in args.trace.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "answer" and rec.get("retrieved_blocks") is not None:
            answers[(rec["episode_id"], rec["event_id"])] = rec
    tally, items, agree = collect(args.episodes, adapter, embedder, config, args.top_k, answers)
    stats = tally.stats
    fitted = {}
    if args.fit_on:
        _, fit_items, _ = collect(args.fit_on, adapter, embedder, config, args.top_k)
        for name, its in fit_items.items():
            q = fit_query(its)
            fitted[name] = (recall(its, q, args.top_k), recall(items.get(name, []), q, args.top_k))
    print(f"{'task':16s} {'name':9s} {'questions':>9s} {'recall':>7s} {'precision':>9s}"
          + (f" {'fitted: on fit set':>19s} {'on these':>9s}" if fitted else ""))
    for (task, name), (hits, shown, n) in sorted(stats.items()):
        extra = f" {fitted[name][0]:19.2f} {fitted[name][1]:9.2f}" if name in fitted else ""
        print(f"{task:16s} {name:9s} {n:9d} {hits / n:7.2f} {shown / (n * args.top_k):9.2f}{extra}")
    totals = {t: tally.totals(t) for t in TASKS}
    print(json.dumps({"model": args.model, "top_k": args.top_k, "agreement_with_trace": agree,
                      "recall": {t: round(h / max(1, n), 3) for t, (h, _, n) in totals.items()},
                      "precision": {t: round(s / max(1, n * args.top_k), 3) for t, (_, s, n) in totals.items()},
                      "fitted_query_recall": {k: [round(a, 3), round(b, 3)] for k, (a, b) in fitted.items()}}))


def fit_query(items: list, steps: int = 300) -> np.ndarray:
    """One free unit query fitted on `items` ((rows, shows, engine query) per question), started from the engine's
    mean query for them."""
    padded = [_padded(rows) for rows, _, _ in items]
    q = torch.tensor(np.mean([qv for _, _, qv in items], 0), requires_grad=True)
    opt = torch.optim.Adam([q], lr=0.02)
    for _ in range(steps):
        qn = F.normalize(q, dim=0)
        losses = []
        for (r, mask), (_, shows, _) in zip(padded, items):
            sim = 20 * (r @ qn).masked_fill(~mask, -1e9).amax(1)
            losses.append(torch.logsumexp(sim, 0) - torch.logsumexp(sim[torch.from_numpy(shows)], 0))
        opt.zero_grad()
        torch.stack(losses).mean().backward()
        opt.step()
    return F.normalize(q.detach(), dim=0).numpy()


def _padded(rows: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """(blocks, most rows, dim) rows, zero-padded, and which are real."""
    m = max(len(r) for r in rows)
    out, mask = torch.zeros(len(rows), m, rows[0].shape[1]), torch.zeros(len(rows), m, dtype=torch.bool)
    for i, r in enumerate(rows):
        out[i, :len(r)], mask[i, :len(r)] = torch.from_numpy(r), True
    return out, mask


if __name__ == "__main__":
    main()
