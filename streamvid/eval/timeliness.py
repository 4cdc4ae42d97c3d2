"""Timing metrics for proactive replies (alerts) against gold response windows.

Pure functions over times in stream seconds; no model. Used by `streamvid score` on the alerts a run recorded.

Timeliness credit of a reply at time t for a gold window [a, b] (the SPOT-Bench rule): 1 inside the window;
outside it a Gaussian of the distance to the window, with separate widths before and after:
    credit = exp(-(a - t)^2 / (2 sigma_early^2))   for t < a
    credit = exp(-(t - b)^2 / (2 sigma_late^2))    for t > b
A reply may match a window only while its credit is at least `min_credit` (default exp(-4.5): within three
widths of the window); further out it is a false reply.

Matching (per question, which has one or more gold windows and its own replies): replies are taken in time
order; each goes to the window, among those that still take replies (fewer than K so far) and credit it at least
`min_credit`, where its credit is highest (the earlier window on a tie). A window scores the best credit among its
replies; its 2nd..Kth replies are absorbed (neither credit nor false); a reply no window takes is false.

    precision = sum of window scores / (matched windows + false replies)
    recall    = sum of window scores / gold windows
    Timeliness-F1 = 2PR / (P + R)
Sums are pooled over all questions (micro average). K=1 counts every repeat as false; K=5 forgives repeats.

Also: precision/recall at ±d seconds (a reply hits an unmatched gold time within d, one-to-one, replies in time
order, nearest gold first), the delay after the event (first reply matched to a window minus the gold time; K=1
matching), and false replies per 10 minutes of stream.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIN_CREDIT = math.exp(-4.5)


@dataclass(frozen=True)
class Gold:
    t_gold: float
    window: tuple[float, float]
    sigma_early: float = 1.5
    sigma_late: float = 0.75

    def __post_init__(self):
        a, b = self.window
        if not a <= b:
            raise ValueError(f"gold window must have start <= end, got {self.window}")
        if self.sigma_early <= 0 or self.sigma_late <= 0:
            raise ValueError(f"sigmas must be positive, got {self.sigma_early}, {self.sigma_late}")


def credit(t: float, gold: Gold) -> float:
    a, b = gold.window
    if t < a:
        return math.exp(-((a - t) ** 2) / (2 * gold.sigma_early ** 2))
    if t > b:
        return math.exp(-((t - b) ** 2) / (2 * gold.sigma_late ** 2))
    return 1.0


@dataclass
class Match:
    """The outcome of matching one question's replies to its gold windows."""

    window_score: list[float]  # per gold window: best credit of its replies (0 if none)
    window_replies: list[list[float]]  # per gold window: the times of the replies it took, in time order
    false_replies: list[float]  # replies no window took

    @property
    def counted_replies(self) -> int:
        """Replies that count in the precision denominator: one per matched window, plus every false reply."""
        return sum(1 for r in self.window_replies if r) + len(self.false_replies)


def match(replies: Sequence[float], golds: Sequence[Gold], k: int = 1, min_credit: float = MIN_CREDIT) -> Match:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    taken: list[list[float]] = [[] for _ in golds]
    best = [0.0] * len(golds)
    false: list[float] = []
    for t in sorted(replies):
        options = [(credit(t, g), -i) for i, g in enumerate(golds) if len(taken[i]) < k]
        options = [o for o in options if o[0] >= min_credit]
        if not options:
            false.append(t)
            continue
        c, neg_i = max(options)
        taken[-neg_i].append(t)
        best[-neg_i] = max(best[-neg_i], c)
    return Match(best, taken, false)


@dataclass
class Question:
    """One scored question: its gold windows and the times of the replies (alerts) given to it."""

    golds: list[Gold]
    replies: list[float]


def timeliness_f1(questions: Sequence[Question], k: int = 1, min_credit: float = MIN_CREDIT) -> dict:
    score = counted = n_gold = 0.0
    for q in questions:
        m = match(q.replies, q.golds, k, min_credit)
        score += sum(m.window_score)
        counted += m.counted_replies
        n_gold += len(q.golds)
    p = score / counted if counted else 0.0
    r = score / n_gold if n_gold else 0.0
    f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return {"f1": round(f1, 4), "precision": round(p, 4), "recall": round(r, 4)}


def precision_recall_at(questions: Sequence[Question], tolerance_s: float) -> dict:
    hits = n_replies = n_gold = 0
    for q in questions:
        free = sorted(g.t_gold for g in q.golds)
        n_gold += len(free)
        n_replies += len(q.replies)
        for t in sorted(q.replies):
            near = [g for g in free if abs(t - g) <= tolerance_s + 1e-9]
            if near:
                free.remove(min(near, key=lambda g: (abs(t - g), g)))
                hits += 1
    return {"precision": round(hits / n_replies, 4) if n_replies else 0.0,
            "recall": round(hits / n_gold, 4) if n_gold else 0.0}


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def delays(questions: Sequence[Question], min_credit: float = MIN_CREDIT) -> list[float]:
    """Per matched gold window (K=1 matching): its reply's time minus the gold time."""
    out = []
    for q in questions:
        m = match(q.replies, q.golds, 1, min_credit)
        out += [taken[0] - g.t_gold for g, taken in zip(q.golds, m.window_replies) if taken]
    return out


def report(questions: Sequence[Question], stream_s: float, min_credit: float = MIN_CREDIT) -> dict:
    """Every timing metric at once, as `streamvid score` reports them."""
    d = delays(questions, min_credit)
    false = sum(len(match(q.replies, q.golds, 1, min_credit).false_replies) for q in questions)
    med, p90 = percentile(d, 0.5), percentile(d, 0.9)
    return {
        "questions": len(questions),
        "gold_windows": sum(len(q.golds) for q in questions),
        "replies": sum(len(q.replies) for q in questions),
        "timeliness_f1_k1": timeliness_f1(questions, 1, min_credit),
        "timeliness_f1_k5": timeliness_f1(questions, 5, min_credit),
        **{f"at_{s}s": precision_recall_at(questions, s) for s in (1, 2, 3)},
        "delay_s_median": None if med is None else round(med, 3),
        "delay_s_p90": None if p90 is None else round(p90, 3),
        "missed_windows": sum(len(q.golds) for q in questions) - len(d),
        "false_alerts": false,
        "false_alerts_per_10min": round(false / (stream_s / 600.0), 3) if stream_s > 0 else None,
        "stream_minutes": round(stream_s / 60.0, 2),
    }
