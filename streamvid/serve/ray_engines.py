"""The engine replicas behind the Ray Serve ingress of `streamvid serve --ray` (ray_app.py): the ones the application
starts with, and the ones added and removed on streams per replica (scaling.py).

    engines = EngineSet({0: handle0, 1: handle1}, ScalePolicy(...), deploy=lambda i: <app of engine i>,
                        app="streamvid")
    counts = await engines.counts()              # {index: streams} of the replicas that answer
    async with engines.opening(i):               # a stream being opened on replica i: it is not removed meanwhile
        ...
    task = engines.grow()                        # add a replica (in the background); awaiting it gives its index
    handle = engines.handle(i)                   # NotFound when there is no replica i

Each engine is a Ray Serve deployment with exactly one replica. Ray Serve's own autoscaling (`num_replicas="auto"`,
also with a custom policy) sets how many replicas one deployment has, but it chooses by itself which replica a
request goes to and which replicas to stop when it scales down (by node and age, not by what they hold), while a
stream lives in one replica's memory for its whole life. So scaling here changes the number of single-replica
deployments instead: the fixed ones, `engine0` ... `engine{min-1}`, are deployments of the main application; an
added one is deployment `engine{i}` of an application of its own, `{app}-engine{i}`, deployed with
`serve.run_many` and removed with `serve.delete`. Ray Serve places, starts, health-checks and restarts every one
of them; this module decides when, and removes only a replica that holds no stream. The ingress must run as one
replica (its default): this table and its clocks live in its memory, and are found again from `serve.status()`
when it restarts.

Thread contract: everything runs on the ingress replica's event loop; blocking Ray Serve calls go to threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable

from ray import serve

from streamvid.errors import NotFound
from streamvid.serve.scaling import EmptyReplicas, ScalePolicy

log = logging.getLogger(__name__)

COUNT_TIMEOUT_S = 5.0  # a replica that does not say how many streams it holds within this is left out
GROW_TIMEOUT_S = 900.0  # an added replica not running after this (no room on the cluster, a failing start) is removed


def added_app(app: str, i: int) -> str:
    """The name of the application that holds added engine replica `i`."""
    return f"{app}-engine{i}"


class EngineSet:
    def __init__(self, fixed: dict, policy: ScalePolicy, deploy: Callable[[int], object], app: str,
                 clock: Callable[[], float] = time.monotonic, grow_timeout_s: float = GROW_TIMEOUT_S):
        self.policy = policy
        self.fixed = frozenset(fixed)
        self.app = app
        self.clock = clock
        self.grow_timeout_s = grow_timeout_s
        self._deploy = deploy
        self._handles: dict = dict(fixed)
        self._pending: dict[int, int] = {}  # streams being opened, by replica
        self._draining: set[int] = set()  # being removed: no new streams
        self._empty = EmptyReplicas(policy)
        self._growing: asyncio.Task | None = None
        self._loop_task: asyncio.Task | None = None
        self._next = max(self._handles) + 1
        if policy.autoscaling:
            self._find_added()

    def __len__(self) -> int:
        return len(self._handles)

    def indices(self) -> list[int]:
        return sorted(self._handles)

    def handle(self, i: int):
        h = self._handles.get(i)
        if h is None:
            raise NotFound(f"no engine replica r{i} on this server (it was removed after it held no stream)")
        return h

    def _find_added(self) -> None:
        """The added replicas of an earlier ingress incarnation (from serve.status)."""
        pattern = re.compile(re.escape(self.app) + r"-engine(\d+)$")
        for name, app in serve.status().applications.items():
            m = pattern.match(name)
            if m and _status_name(app.status) == "RUNNING":
                i = int(m.group(1))
                self._handles[i] = serve.get_deployment_handle(f"engine{i}", app_name=name)
                self._next = max(self._next, i + 1)

    # ---- streams per replica ------------------------------------------------------------------------------
    async def count(self, i: int) -> int | None:
        """The streams replica i holds; None when it does not answer in time (dead, restarting, removed)."""
        h = self._handles.get(i)
        if h is None:
            return None
        try:
            reply = await asyncio.wait_for(h.call.remote("count"), COUNT_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - any failure means: not live now
            return None
        return reply.get("ok") if isinstance(reply, dict) and isinstance(reply.get("ok"), int) else None

    async def counts(self) -> dict[int, int]:
        """{index: streams} of the replicas that answer and take new streams (not being removed)."""
        indices = self.indices()
        found = await asyncio.gather(*(self.count(i) for i in indices))
        return {i: c for i, c in zip(indices, found, strict=True) if c is not None and i not in self._draining}

    @contextlib.asynccontextmanager
    async def opening(self, i: int):
        self._pending[i] = self._pending.get(i, 0) + 1
        try:
            yield self.handle(i)
        finally:
            self._pending[i] -= 1

    # ---- growing ------------------------------------------------------------------------------------------
    def grow(self) -> asyncio.Task:
        """Add a replica in the background (unless one is being added already); the task, whose result is the
        new replica's index once it runs (None when adding it failed)."""
        if self._growing is None or self._growing.done():
            self._growing = asyncio.ensure_future(self._grow())
        return self._growing

    def growing(self) -> asyncio.Task | None:
        """The replica being added now, if any (see `grow`)."""
        return self._growing if self._growing is not None and not self._growing.done() else None

    async def _grow(self) -> int | None:
        i, self._next = self._next, self._next + 1
        name = added_app(self.app, i)
        log.info("adding engine replica r%d (application %s): every replica holds %d streams or more", i, name,
                 self.policy.streams_per_replica)
        try:
            await asyncio.to_thread(serve.run_many, [serve.RunTarget(self._deploy(i), name=name, route_prefix=None)],
                                    wait_for_applications_running=False)
            deadline = self.clock() + self.grow_timeout_s
            while (status := await asyncio.to_thread(_app_status, name)) != "RUNNING":
                if status in ("DEPLOY_FAILED", "UNHEALTHY", None) or self.clock() > deadline:
                    raise RuntimeError(f"application {name} is {status or 'gone'}"
                                       f"{' after ' + format(self.grow_timeout_s, 'g') + ' s' if status else ''}")
                await asyncio.sleep(0.25)
        except Exception as e:  # noqa: BLE001 - the streams go on on the replicas there are
            log.warning("could not add engine replica r%d: %s", i, e)
            with contextlib.suppress(Exception):
                await asyncio.to_thread(serve.delete, name)
            return None
        self._handles[i] = serve.get_deployment_handle(f"engine{i}", app_name=name)
        log.info("engine replica r%d is up (%d replicas)", i, len(self._handles))
        return i

    # ---- shrinking ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start looking for empty added replicas to remove (once; on the running event loop)."""
        if self.policy.autoscaling and (self._loop_task is None or self._loop_task.done()):
            self._loop_task = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        every = min(10.0, max(0.25, self.policy.scale_down_after_s / 4))
        while True:
            await asyncio.sleep(every)
            try:
                await self.shrink()
            except Exception as e:  # noqa: BLE001 - the next look tries again
                log.warning("looking for empty engine replicas failed: %s: %s", type(e).__name__, e)

    async def shrink(self, now: float | None = None) -> list[int]:
        """Remove the added replicas that have held no stream for scale_down_after_s; the ones removed."""
        counts = await self.counts()
        removed = []
        for i in self._empty.removable(counts, self.fixed, self.clock() if now is None else now):
            if self._pending.get(i) or i not in self._handles:
                continue
            self._draining.add(i)  # from here no stream is placed on it; then make sure it is still empty
            try:
                if await self.count(i) != 0:
                    continue
                del self._handles[i]
                self._empty.forget(i)
                await asyncio.to_thread(serve.delete, added_app(self.app, i))
                log.info("removed engine replica r%d: it held no stream for %g s (%d replicas)", i,
                         self.policy.scale_down_after_s, len(self._handles))
                removed.append(i)
            finally:
                self._draining.discard(i)
        return removed


def _app_status(name: str) -> str | None:
    app = serve.status().applications.get(name)
    return None if app is None else _status_name(app.status)


def _status_name(status) -> str:
    return status.value if hasattr(status, "value") else str(status)
