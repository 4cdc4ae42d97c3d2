"""Standing triggers: what a stream watches for, each a yes/no probe asked on every decided chunk (or a condition on
what is heard, decided on each utterance) with the firing rule that turns its scores into alerts; and the set of a
stream's active triggers, capped at `max_watches` (limits.py).

    triggers = TriggerSet()
    triggers.add(Trigger("w0", "a blue star appears", probe, FiringRule(thresholds), once=False, created_t_s=3.0))
    [t.describe() for t in triggers.active()]          # what GET .../watches lists

Thread contract: a Trigger is made on any thread; once added, its score and rule are written by the scheduler's
thread only (reasoning.py). The set's `add`, `remove`, `active` and `in` run on any thread under one lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from streamvid.engine.proactive import FiringRule
from streamvid.language.future import Probe
from streamvid.language.heard import Heard


@dataclass
class Trigger:
    """A standing trigger: a yes/no probe asked on each decided chunk, and the rule that turns its scores into
    alerts. Made on any thread; once added to a TriggerSet its state is written by the engine's scheduler thread
    only."""

    id: str  # "w0", ... from watch(); the question's id ("q3") for a trigger made from a question
    condition: str  # as the user phrased it
    probe: Probe
    rule: FiringRule
    once: bool  # retired after its first alert (a "tell me when" question is answered once)
    created_t_s: float
    score: float | None = None  # the condition's score at the last decided chunk: p(yes), or 1 - p(yes) if negated
    score_t_s: float | None = None
    alerts: int = 0
    streak_start_s: float | None = None  # start of the first chunk of the current positive streak
    tokens: int = 0  # its probe prompt's tokens: what a probe of it costs a step's token budget
    heard: Heard | None = None  # a condition on what is heard: decided on each utterance, never probed

    def describe(self) -> dict:
        th = self.rule.thresholds
        return {"trigger_id": self.id, "condition": self.condition, "probe": self.probe.question,
                "negate": self.probe.negate, "once": self.once, "fire": th.fire, "reset": th.reset, "k": th.k,
                "cooldown_s": th.cooldown_s, "created_t_s": round(self.created_t_s, 3),
                "score": None if self.score is None else round(self.score, 4),
                "score_t_s": None if self.score_t_s is None else round(self.score_t_s, 3),
                "armed": self.rule.armed, "alerts": self.alerts}


class TriggerSet:
    """The active triggers, in the order they were added. Thread contract: `add`, `remove`, `active` and `in` from
    any thread; one lock, held for the dict operations only."""

    def __init__(self):
        self._lock = threading.Lock()
        self._items: dict[str, Trigger] = {}

    def add(self, trigger: Trigger, limit: int | None = None) -> None:
        """Add `trigger`; ValueError when its id is taken, or when `limit` triggers are active already."""
        with self._lock:
            if trigger.id in self._items:
                raise ValueError(f"trigger id {trigger.id!r} is already watching")
            if limit is not None:
                self._check_room(limit)
            self._items[trigger.id] = trigger

    def check_room(self, limit: int) -> None:
        """ValueError (one line) when `limit` triggers are active: no room for one more."""
        with self._lock:
            self._check_room(limit)

    def _check_room(self, limit: int) -> None:
        if len(self._items) >= limit:
            raise ValueError(f"this stream watches {len(self._items)} conditions, at most {limit} (--max-watches); "
                             f"stop watching one first")

    def remove(self, trigger_id: str) -> bool:
        with self._lock:
            return self._items.pop(trigger_id, None) is not None

    def active(self) -> list[Trigger]:
        with self._lock:
            return list(self._items.values())

    def __contains__(self, trigger_id: str) -> bool:
        with self._lock:
            return trigger_id in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
