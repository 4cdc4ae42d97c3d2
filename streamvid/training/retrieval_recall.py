"""Per-name retrieval recall, as long-term memory retrieves: shared by `benchmarks/retrieval_by_name.py` (block rows
from a score run's stream, through the engine's adapter) and train-tiny's held-out check (block rows from the
training tokens, the same numbers: layer 0's keys of a vision token do not depend on its context).

A block's rows are the engine's (`embedders.ModelEmbedder`): (unit mean key + REGION_WEIGHT x each distinct unit
region key) / (1 + REGION_WEIGHT); a block scores by its best row against the unit question vector. A question
names a shape ("what colour was the hexagon?") or a colour; it is a hit when one of the top k blocks shows it."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from streamvid.adapters.embedders import REGION_WEIGHT, distinct_rows
from streamvid.adapters.vectors import region_keys, unit


def engine_rows(keys: torch.Tensor, grid: tuple[int, int, int] | None) -> np.ndarray:
    """(rows, dim) float32: a block's memory rows from its video tokens' (n_video, dim) pre-RoPE keys, as
    `ModelEmbedder.chunk_vector` makes them from the adapter's `Encoded`."""
    vector = unit(keys.float().mean(0))
    regions = distinct_rows(region_keys(keys, grid))
    return ((vector[None] + REGION_WEIGHT * regions) / (1 + REGION_WEIGHT)).astype(np.float32)


def scores(rows: list[np.ndarray], q: np.ndarray) -> np.ndarray:
    """Each block's score for the question vector q: its best row's inner product."""
    return np.array([float((r @ q).max()) for r in rows])


def recall(items: list, q: np.ndarray, k: int) -> float:
    """Share of items ((block rows, which blocks show the name, ...) per question) whose top k under the query q
    hold a block that shows the name."""
    if not items:
        return 0.0
    return float(np.mean([shows[np.argsort(-scores(rows, q))[:k]].any() for rows, shows, *_ in items]))


class RecallTally:
    """Per (task, name): questions whose top k show the name, blocks of the top k that show it, questions."""

    def __init__(self, k: int):
        self.k = k
        self.stats: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])

    def add(self, task: str, name: str, rows: list[np.ndarray], shows: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Score one question against its blocks; returns the top k block indices, best first."""
        top = np.argsort(-scores(rows, q))[:self.k]
        s = self.stats[(task, name)]
        s[0], s[1], s[2] = s[0] + bool(shows[top].any()), s[1] + int(shows[top].sum()), s[2] + 1
        return top

    def totals(self, task: str) -> tuple[int, int, int]:
        return tuple(sum(v[i] for (t, _), v in self.stats.items() if t == task) for i in range(3))

    def summary(self) -> dict:
        """{"recall": {task: r}, "precision": {task: p}, "by_name": {task: {name: [recall, questions]}}}."""
        tasks = sorted({t for t, _ in self.stats})
        by_name: dict[str, dict] = {t: {} for t in tasks}
        for (t, name), (hits, _, n) in sorted(self.stats.items()):
            by_name[t][name] = [round(hits / n, 3), n]
        totals = {t: self.totals(t) for t in tasks}
        return {"recall": {t: round(h / max(1, n), 3) for t, (h, _, n) in totals.items()},
                "precision": {t: round(s / max(1, n * self.k), 3) for t, (_, s, n) in totals.items()},
                "by_name": by_name}
