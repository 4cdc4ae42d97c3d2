"""`streamvid serve --ray [ADDRESS] --replicas R`: the same FastAPI app as the ingress of a Ray Serve application,
over R engines (or from R up to `max_replicas`, on streams per replica).

    app = application(EngineConfig(), ServeOptions(...), replicas=2)
    app = application(config, options, replicas=1, max_replicas=4, streams_per_replica=8)   # autoscaling
    serve.start(http_options={"host": "127.0.0.1", "port": 8000})
    serve.run(app, name="streamvid", route_prefix="/")

Layout. Ray Serve has no public way to send a request to one chosen replica of a deployment (a handle picks the
replica; its consistent-hash router maps a session key by hashing, not to the replica that opened a stream), so the
R engines are R separately named deployments, `engine0` ... `engine{R-1}`, each with exactly one replica holding
one `Engine` and a hub (streamvid/hub/). One ingress deployment (`StreamvidIngress`, `@serve.ingress` with the app
of routes.py) holds a handle to each and routes every request:

- a new stream goes to the engine with the fewest streams (the next one when it is full: 429 only when all are);
  with `streams_per_replica`, opening one while every engine holds that many adds an engine, and an added engine
  left without streams for `scale_down_after_s` is removed (ray_engines.py: how, and why not Ray Serve's own
  autoscaler);
- a stream's id carries its engine and that replica's incarnation, `r{i}.{incarnation}-{token}`, so every later
  request for it (frames, chat completions, watches, events, the realtime socket and calls) goes to `engine{i}` for the
  stream's whole life; the token ends with a MAC of the id under the application's key (`id_tag`), so an id no
  replica issued (made up, or malformed) is 404 at the ingress, not taken for a stream of a dead replica;
- replies and errors cross the handle as plain data (`{"ok": ...}` / `{"err": [status, message, type, code]}`;
  an alert's snapshot or clip as bytes);
  answers and events stream back through the handle's streaming calls.

When a replica dies, Ray Serve starts a new one under the same deployment, with a new incarnation and no streams:
a request for a stream of the dead replica is answered 503 with a message saying that the replica holding it died
or restarted, both while the deployment has no replica (the handle fails) and after the new one is up (the
incarnation in the id no longer matches). The message says the stream is lost, or, for a stream opened with a
`session_dir` (its id says so: streamvid/hub/session_folders.py), that it can be resumed from its last save with
`POST /v1/streams {"session_dir": ..., "resume": true}`, which opens it on a live replica. Streams on the other
replicas go on. A session folder must be reachable from every replica (a shared filesystem on a multi-node cluster).
"""

from __future__ import annotations

import abc
import asyncio
import functools
import hashlib
import hmac
import inspect
import logging
import re
import secrets
from collections.abc import AsyncIterator

from ray import serve
from ray.exceptions import RayError
from ray.serve.exceptions import RayServeException

from streamvid.errors import NotFound, Unavailable
from streamvid.hub.hub import Hub
from streamvid.hub.session_folders import resumable
from streamvid.serve.errors import ServeError, wire_error
from streamvid.serve.front_door import Door
from streamvid.serve.options import ServeOptions
from streamvid.serve.ray_engines import EngineSet
from streamvid.serve.realtime_ga import mount as mount_realtime
from streamvid.serve.routes import create_app
from streamvid.serve.scaling import ScalePolicy
from streamvid.serve.service import HubService
from streamvid.serve.web import STREAM_CALLS, STREAMED, Backend

log = logging.getLogger(__name__)

CALLS = ("open", "list", "count", *STREAM_CALLS)
STREAMS = STREAMED
_ID = re.compile(r"^r(\d+)\.([0-9a-f]+)-")
RAY_ERRORS = (RayError, RayServeException)
TAG_HEX = 12  # the MAC at the end of a stream id


def id_tag(key: bytes, sid: str) -> str:
    """What an id issued by a replica of the application with `key` ends with (Hub's `tag`)."""
    return hmac.new(key, sid.encode(), hashlib.sha256).hexdigest()[:TAG_HEX]


def issued(key: bytes, sid: str) -> bool:
    """Whether `sid` is a stream id that a replica of the application with `key` issued (the replica may have died
    since)."""
    if not isinstance(sid, str) or len(sid) <= TAG_HEX or _ID.match(sid) is None:
        return False
    return hmac.compare_digest(sid[-TAG_HEX:], id_tag(key, sid[:-TAG_HEX]))


def lost_hint(sid: str) -> str:
    """What a client can do about a stream whose replica died: resume it, or open a new one."""
    if resumable(sid):
        return ('; it was opened with a session_dir, so it can be resumed on a live replica: POST /v1/streams '
                '{"session_dir": <the same folder>, "resume": true}')
    return "; the stream is lost: open a new one"


@serve.deployment(max_ongoing_requests=10_000, graceful_shutdown_timeout_s=5)
class EngineReplica:
    """One engine and its hub: one replica of deployment `engine{index}`."""

    def __init__(self, config, options: ServeOptions, index: int, threads: int | None, key: bytes):
        if threads:
            import torch

            torch.set_num_threads(threads)
        from streamvid.engine.engine import Engine
        from streamvid.serve.alert_routes import links
        from streamvid.serve.webhooks import WebhookSender

        self.index = index
        self.prefix = f"r{index}.{secrets.token_hex(3)}-"  # this incarnation's stream ids
        webhooks = WebhookSender.of(options)
        self.engine = Engine(config)
        self.service = HubService(Hub(self.engine, options, prefix=self.prefix, webhooks=webhooks,
                                      tag=functools.partial(id_tag, key), links=links))
        log.info("engine replica %s ready (streams %s*)", index, self.prefix)

    def _check(self, method: str, args: tuple, allowed: tuple) -> None:
        if method not in allowed:
            raise NotFound(f"no method {method!r}")
        sid = args[0] if args and method not in ("open",) else None
        if isinstance(sid, str) and sid.startswith(f"r{self.index}.") and not sid.startswith(self.prefix):
            raise Unavailable(f"stream {sid[:60]} was on replica r{self.index}, which died or restarted since"
                              f"{lost_hint(sid)}")

    async def call(self, method: str, *args):
        try:
            self._check(method, args, CALLS)
            return {"ok": await getattr(self.service, method)(*args)}
        except Exception as e:  # noqa: BLE001 - every error goes back as data, with its status
            return {"err": wire_error(e).to_wire()}

    async def stream(self, method: str, *args):
        try:
            self._check(method, args, STREAMS)
            async for item in getattr(self.service, method)(*args):
                yield {"ok": item}
        except Exception as e:  # noqa: BLE001
            yield {"err": wire_error(e).to_wire()}

    async def __del__(self):
        await self.service.shutdown()
        await asyncio.to_thread(self.engine.close)


class RayBackend(Backend):
    """The ingress's backend: each call forwarded to the engine replica that holds the stream (see module doc)."""

    def __init__(self, engines: EngineSet, options: ServeOptions, key: bytes):
        self.engines = engines
        self.options = options
        self.key = key  # the application's: ids its replicas issued end with their MAC (id_tag)

    def index(self, sid: str) -> int:
        """The replica that issued the stream id; NotFound for an id no replica issued, or one of a replica that
        was removed."""
        m = _ID.match(sid) if issued(self.key, sid) else None
        if m is None or int(m.group(1)) not in self.engines.indices():
            raise NotFound(f"no stream {str(sid)[:100]!r} on this server (it was never opened, or was deleted)")
        return int(m.group(1))

    def _unavailable(self, i: int, sid: str | None, e: BaseException) -> Unavailable:
        what = f"the replica holding stream {sid} (r{i})" if sid else f"replica r{i}"
        return Unavailable(f"{what} is unavailable: it died or is restarting ({type(e).__name__})"
                           f"{lost_hint(sid) if sid else ''}")

    async def _call(self, i: int, method: str, *args, sid: str | None = None):
        try:
            reply = await self.engines.handle(i).call.remote(method, *args)
        except RAY_ERRORS as e:
            raise self._unavailable(i, sid, e) from None
        if "err" in reply:
            raise ServeError.from_wire(reply["err"])
        return reply["ok"]

    async def stream_from(self, i: int, method: str, *args, sid: str | None = None) -> AsyncIterator:
        gen = self.engines.handle(i).options(stream=True).stream.remote(method, *args)
        try:
            async for reply in gen:
                if "err" in reply:
                    raise ServeError.from_wire(reply["err"])
                yield reply["ok"]
        except RAY_ERRORS as e:
            raise self._unavailable(i, sid, e) from None
        finally:
            gen.cancel()

    async def call_on(self, sid: str, method: str, *args):
        return await self._call(self.index(sid), method, sid, *args, sid=sid)

    async def open(self, source: object, fps: float | None = None, session_dir: str | None = None,
                   resume: bool = False) -> dict:
        """On the least loaded replica that takes it; adds a replica when every one holds its target (then waits
        for it only when no replica takes the stream)."""
        engines = self.engines
        engines.start()
        counts = await engines.counts()
        growing = engines.grow() if engines.policy.wants_replica(counts, len(engines)) else engines.growing()
        last = wire_error(Unavailable("no engine replica is available: all of them died or are restarting"))
        for i in engines.policy.order(counts):
            try:
                return await self._open_on(i, source, fps, session_dir, resume)
            except Exception as e:  # noqa: BLE001 - full or gone: the next replica may take it
                last = wire_error(e)
                if last.status not in (429, 503):
                    raise
        if growing is not None and (i := await asyncio.shield(growing)) is not None and i not in counts:
            return await self._open_on(i, source, fps, session_dir, resume)
        raise last

    async def _open_on(self, i: int, *args) -> dict:
        async with self.engines.opening(i):
            return await self._call(i, "open", *args)

    async def list(self) -> list[dict]:
        self.engines.start()
        found = await asyncio.gather(*(self._call(i, "list") for i in self.engines.indices()),
                                     return_exceptions=True)
        return [s for streams in found if isinstance(streams, list) for s in streams]


def _positional(method: str, self, sid: str, args: tuple, kwargs: dict) -> tuple:
    """A call's arguments after the stream id, all positional and in the Backend's order (defaults filled in), as
    the replica's service method takes them."""
    bound = inspect.signature(getattr(Backend, method)).bind(self, sid, *args, **kwargs)
    bound.apply_defaults()
    return bound.args[2:]


def _forwarded(method: str):
    """Backend.`method` on one stream, called on the replica that holds it."""
    async def forward(self: RayBackend, sid: str, *args, **kwargs):
        return await self.call_on(sid, method, *_positional(method, self, sid, args, kwargs))

    forward.__name__ = forward.__qualname__ = method
    return forward


def _streamed(method: str):
    """Backend.`method` on one stream, its items streamed from the replica that holds it."""
    async def stream(self: RayBackend, sid: str, *args, **kwargs) -> AsyncIterator:
        rest = _positional(method, self, sid, args, kwargs)
        async for item in self.stream_from(self.index(sid), method, sid, *rest, sid=sid):
            yield item

    stream.__name__ = stream.__qualname__ = method
    return stream


for _name in STREAM_CALLS:  # derived from the Backend's list, so a new call on a stream is forwarded by itself
    setattr(RayBackend, _name, _forwarded(_name))
for _name in STREAMED:
    setattr(RayBackend, _name, _streamed(_name))
abc.update_abstractmethods(RayBackend)  # implemented now: a call left out of the lists above still fails at creation


_backend: RayBackend | None = None  # the ingress replica's (set by its constructor, read by the routes)


_door: Door | None = None  # its front door, made from the backend's options on the first request


def current_backend() -> RayBackend:
    return _backend


def set_backend(backend: RayBackend) -> None:
    """The ingress replica's backend (its constructor's)."""
    global _backend
    _backend = backend


def current_door() -> Door:
    global _door
    if _door is None:
        _door = Door.of(_backend.options)
    return _door


def ingress_app():
    """The FastAPI app of routes.py and the realtime API (realtime_ga.py: the socket, WebRTC calls, client secrets,
    the /realtime page) over this ingress replica's RayBackend (built on the replica by Ray Serve), behind the same
    front door as one process (front_door.py). A realtime session's work (its events, speech synthesis, a call's
    media) runs on the ingress; its stream's on the stream's engine replica."""
    app = create_app(current_backend, door=current_door)
    mount_realtime(app, current_backend)
    return app


@serve.deployment(max_ongoing_requests=10_000, ray_actor_options={"num_cpus": 0})
@serve.ingress(ingress_app)
class StreamvidIngress:
    def __init__(self, options: ServeOptions, policy: ScalePolicy, engine_args: tuple, *engines):
        # through the imported module: Ray Serve ships this class by value, with globals of its own
        import streamvid.serve.ray_app as this

        app = serve.get_replica_context().app_name
        engine_set = this.EngineSet(dict(enumerate(engines)), policy, lambda i: this.engine(i, *engine_args), app)
        this.set_backend(this.RayBackend(engine_set, options, key=engine_args[-1]))


def engine(i: int, config, options: ServeOptions, cpus: float, gpus: float, threads: int | None, key: bytes):
    """Deployment `engine{i}`: one replica, one engine; `key`: the application's, for its stream ids."""
    return (EngineReplica.options(name=f"engine{i}", num_replicas=1,
                                  ray_actor_options={"num_cpus": cpus, "num_gpus": gpus})
            .bind(config, options, i, threads, key))


def application(config, options: ServeOptions, replicas: int = 2, cpus_per_replica: float = 1.0,
                gpus_per_replica: float = 0.0, threads: int | None = None, max_replicas: int | None = None,
                streams_per_replica: int | None = None, scale_down_after_s: float = 300.0):
    """The Ray Serve application: `replicas` engine deployments behind the ingress; with `streams_per_replica`,
    from `replicas` up to `max_replicas` of them (scaling.py)."""
    policy = ScalePolicy(replicas, max_replicas, streams_per_replica, scale_down_after_s)
    key = secrets.token_bytes(16)  # the stream ids' MAC key: kept with the application's arguments by Ray Serve
    engine_args = (config, options, cpus_per_replica, gpus_per_replica, threads, key)
    return StreamvidIngress.bind(options, policy, engine_args,
                                 *(engine(i, *engine_args) for i in range(replicas)))
