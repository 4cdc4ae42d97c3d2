"""When the engine replicas of `streamvid serve --ray` grow and shrink: a target of streams per replica.

    policy = ScalePolicy(min_replicas=1, max_replicas=4, streams_per_replica=8, scale_down_after_s=300.0)
    policy.order({0: 8, 1: 3})                       # [1, 0]: where a new stream goes first (least loaded)
    policy.wants_replica({0: 8, 1: 8}, replicas=2)   # True: every live replica holds its target, and 2 < 4
    empty = EmptyReplicas(policy)
    empty.removable({0: 0, 2: 0}, fixed=range(1), now=t)   # [2] once it has been empty for scale_down_after_s

The policy only decides; ray_engines.py adds and removes the replicas through Ray Serve. A replica is added when a
stream is opened while every live replica holds at least `streams_per_replica` streams (the stream itself goes to
the least loaded replica that takes it, so nobody waits for a model to load unless every replica is full); an
added replica that has held no stream for `scale_down_after_s` is removed, never one of the `min_replicas` that
the application started with.

Thread contract: ScalePolicy is immutable; an EmptyReplicas belongs to one caller (the ingress's event loop).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ScalePolicy:
    min_replicas: int = 1
    max_replicas: int | None = None  # None: min_replicas (no autoscaling)
    streams_per_replica: int | None = None  # None: no autoscaling
    scale_down_after_s: float = 300.0

    def __post_init__(self):
        if isinstance(self.min_replicas, bool) or not isinstance(self.min_replicas, int) or self.min_replicas < 1:
            raise ValueError(f"--replicas must be an integer >= 1, got {self.min_replicas!r}")
        if self.max_replicas is None:
            object.__setattr__(self, "max_replicas", self.min_replicas)
        if not isinstance(self.max_replicas, int) or self.max_replicas < self.min_replicas:
            raise ValueError(f"--max-replicas must be an integer >= --replicas ({self.min_replicas}), got "
                             f"{self.max_replicas!r}")
        target = self.streams_per_replica
        if target is not None and (isinstance(target, bool) or not isinstance(target, int) or target < 1):
            raise ValueError(f"--streams-per-replica must be an integer >= 1, got {target!r}")
        if self.max_replicas > self.min_replicas and target is None:
            raise ValueError("--max-replicas above --replicas needs --streams-per-replica (the target that adds a "
                             "replica)")
        if not self.scale_down_after_s >= 0:
            raise ValueError(f"--scale-down-after-s must be >= 0, got {self.scale_down_after_s!r}")

    @property
    def autoscaling(self) -> bool:
        return self.streams_per_replica is not None and self.max_replicas > self.min_replicas

    @staticmethod
    def order(counts: dict[int, int]) -> list[int]:
        """The live replicas (index: streams held), least loaded first, then by index."""
        return [i for _, i in sorted((c, i) for i, c in counts.items())]

    def wants_replica(self, counts: dict[int, int], replicas: int) -> bool:
        """Whether to add a replica: every live one holds its target and there are fewer than max_replicas
        (`replicas` counts every replica, live or not)."""
        return (self.autoscaling and replicas < self.max_replicas and bool(counts)
                and min(counts.values()) >= self.streams_per_replica)


class EmptyReplicas:
    """How long each replica has held no stream, from the counts seen at each look."""

    def __init__(self, policy: ScalePolicy):
        self.policy = policy
        self._since: dict[int, float] = {}

    def removable(self, counts: dict[int, int], fixed: Iterable[int], now: float) -> list[int]:
        """The replicas that may be removed now: not `fixed`, seen empty at every look for scale_down_after_s.
        A replica missing from `counts` (not answering) is neither empty nor busy: its clock starts over."""
        fixed = set(fixed)
        for i in list(self._since):
            if counts.get(i) != 0:
                del self._since[i]
        for i, c in counts.items():
            if c == 0 and i not in fixed:
                self._since.setdefault(i, now)
        return sorted(i for i, t in self._since.items() if now - t >= self.policy.scale_down_after_s)

    def forget(self, i: int) -> None:
        self._since.pop(i, None)
