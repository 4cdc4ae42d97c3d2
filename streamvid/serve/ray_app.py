"""`streamvid serve --ray [ADDRESS] --replicas R`: the same FastAPI app as the ingress of a Ray Serve application,
over R engines.

    app = application(EngineConfig(), ServeOptions(...), replicas=2)
    serve.start(http_options={"host": "127.0.0.1", "port": 8000})
    serve.run(app, name="streamvid", route_prefix="/")

Layout. Ray Serve has no public way to send a request to one chosen replica of a deployment (a handle picks the
replica; its consistent-hash router maps a session key by hashing, not to the replica that opened a stream), so the
R engines are R separately named deployments, `engine0` ... `engine{R-1}`, each with exactly one replica holding
one `Engine` and a streams hub (hub.py). One ingress deployment (`StreamvidIngress`, `@serve.ingress` with the app
of routes.py) holds a handle to each and routes every request:

- a new stream goes to the engine with the fewest streams (the next one when it is full: 429 only when all are);
- a stream's id carries its engine and that replica's incarnation, `r{i}.{incarnation}-{token}`, so every later
  request for it (frames, chat completions, watches, events, the realtime socket) goes to `engine{i}` for the
  stream's whole life;
- replies and errors cross the handle as plain data (`{"ok": ...}` / `{"err": [status, message, type, code]}`);
  answers and events stream back through the handle's streaming calls.

When a replica dies, Ray Serve starts a new one under the same deployment, with a new incarnation and no streams:
a request for a stream of the dead replica is answered 503 with a message saying that the replica holding it died
or restarted and the stream is lost, both while the deployment has no replica (the handle fails) and after the new
one is up (the incarnation in the id no longer matches). Streams on the other replicas go on.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import AsyncIterator

from ray import serve
from ray.exceptions import RayError
from ray.serve.exceptions import RayServeException

from streamvid.serve.errors import Busy, NotFound, ServeError, Unavailable, wire_error
from streamvid.serve.hub import Hub, ServeOptions
from streamvid.serve.routes import create_app
from streamvid.serve.service import HubService

log = logging.getLogger(__name__)

CALLS = ("open", "list", "count", "status", "close", "push", "question", "watch", "watches", "unwatch")
STREAMS = ("ask", "events")
_ID = re.compile(r"^r(\d+)\.([0-9a-f]+)-")
RAY_ERRORS = (RayError, RayServeException)


@serve.deployment(max_ongoing_requests=10_000, graceful_shutdown_timeout_s=5)
class EngineReplica:
    """One engine and its streams hub: one replica of deployment `engine{index}`."""

    def __init__(self, config, options: ServeOptions, index: int, threads: int | None = None):
        if threads:
            import torch

            torch.set_num_threads(threads)
        from streamvid.engine import Engine
        from streamvid.serve.webhooks import WebhookSender

        self.index = index
        self.prefix = f"r{index}.{secrets.token_hex(3)}-"  # this incarnation's stream ids
        webhooks = (WebhookSender(options.webhook_urls, options.webhook_queue, options.webhook_retries)
                    if options.webhook_urls else None)
        self.engine = Engine(config)
        self.service = HubService(Hub(self.engine, options, prefix=self.prefix, webhooks=webhooks))
        log.info("engine replica %s ready (streams %s*)", index, self.prefix)

    def _check(self, method: str, args: tuple, allowed: tuple) -> None:
        if method not in allowed:
            raise NotFound(f"no method {method!r}")
        sid = args[0] if args and method not in ("open",) else None
        if isinstance(sid, str) and sid.startswith(f"r{self.index}.") and not sid.startswith(self.prefix):
            raise Unavailable(f"stream {sid[:60]} was on replica r{self.index}, which died or restarted since: the "
                              f"stream is lost; open a new one")

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


class RayBackend:
    """The ingress's backend: each call forwarded to the engine replica that holds the stream (see module doc)."""

    def __init__(self, handles: list, options: ServeOptions):
        self.handles = handles
        self.options = options

    def _index(self, sid: str) -> int:
        m = _ID.match(sid) if isinstance(sid, str) else None
        if m is None or int(m.group(1)) >= len(self.handles):
            raise NotFound(f"no stream {str(sid)[:100]!r} on this server (it was never opened, or was deleted)")
        return int(m.group(1))

    def _unavailable(self, i: int, sid: str | None, e: BaseException) -> Unavailable:
        what = f"the replica holding stream {sid} (r{i})" if sid else f"replica r{i}"
        lost = "; the stream is lost: open a new one" if sid else ""
        return Unavailable(f"{what} is unavailable: it died or is restarting ({type(e).__name__}){lost}")

    async def _call(self, i: int, method: str, *args, sid: str | None = None):
        try:
            reply = await self.handles[i].call.remote(method, *args)
        except RAY_ERRORS as e:
            raise self._unavailable(i, sid, e) from None
        if "err" in reply:
            raise ServeError.from_wire(reply["err"])
        return reply["ok"]

    async def _stream(self, i: int, method: str, *args, sid: str | None = None) -> AsyncIterator:
        gen = self.handles[i].options(stream=True).stream.remote(method, *args)
        try:
            async for reply in gen:
                if "err" in reply:
                    raise ServeError.from_wire(reply["err"])
                yield reply["ok"]
        except RAY_ERRORS as e:
            raise self._unavailable(i, sid, e) from None
        finally:
            gen.cancel()

    async def _on(self, sid: str, method: str, *args):
        return await self._call(self._index(sid), method, sid, *args, sid=sid)

    async def open(self, source: object, fps: float | None = None) -> dict:
        counts = await asyncio.gather(*(self._call(i, "count") for i in range(len(self.handles))),
                                      return_exceptions=True)
        order = sorted((c, i) for i, c in enumerate(counts) if isinstance(c, int))
        last: ServeError = Unavailable("no engine replica is available: all of them died or are restarting")
        for _, i in order:
            try:
                return await self._call(i, "open", source, fps)
            except (Busy, Unavailable) as e:  # full or gone: the next replica may take it
                last = e
            except ServeError as e:
                if e.status not in (429, 503):
                    raise
                last = e
        raise last

    async def list(self) -> list[dict]:
        found = await asyncio.gather(*(self._call(i, "list") for i in range(len(self.handles))),
                                     return_exceptions=True)
        return [s for streams in found if isinstance(streams, list) for s in streams]

    async def status(self, sid: str) -> dict:
        return await self._on(sid, "status")

    async def close(self, sid: str) -> dict:
        return await self._on(sid, "close")

    async def push(self, sid: str, data: bytes, content_type: str | None, t_s: float | None = None) -> dict:
        return await self._on(sid, "push", data, content_type, t_s)

    async def question(self, sid: str, text: object) -> dict:
        return await self._on(sid, "question", text)

    async def watch(self, sid: str, condition: object, fire=None, reset=None) -> dict:
        return await self._on(sid, "watch", condition, fire, reset)

    async def watches(self, sid: str) -> list[dict]:
        return await self._on(sid, "watches")

    async def unwatch(self, sid: str, wid: str) -> dict:
        return await self._on(sid, "unwatch", wid)

    async def ask(self, sid: str, text: object, dialogue=None) -> AsyncIterator[dict]:
        async for item in self._stream(self._index(sid), "ask", sid, text, dialogue, sid=sid):
            yield item

    async def events(self, sid: str, deltas: bool = False) -> AsyncIterator[dict | None]:
        async for item in self._stream(self._index(sid), "events", sid, deltas, sid=sid):
            yield item


_backend: RayBackend | None = None  # the ingress replica's (set by its constructor, read by the routes)


def current_backend() -> RayBackend:
    return _backend


def ingress_app():
    """The FastAPI app of routes.py over this ingress replica's RayBackend (built on the replica by Ray Serve)."""
    return create_app(current_backend)


@serve.deployment(max_ongoing_requests=10_000, ray_actor_options={"num_cpus": 0})
@serve.ingress(ingress_app)
class StreamvidIngress:
    def __init__(self, options: ServeOptions, *engines):
        # through the imported module: Ray Serve ships this class by value, with globals of its own
        import streamvid.serve.ray_app as this

        this._backend = this.RayBackend(list(engines), options)


def application(config, options: ServeOptions, replicas: int = 2, cpus_per_replica: float = 1.0,
                gpus_per_replica: float = 0.0, threads: int | None = None):
    """The Ray Serve application: `replicas` engine deployments behind the ingress."""
    if replicas < 1:
        raise ValueError(f"--replicas must be >= 1, got {replicas}")
    engines = [EngineReplica.options(name=f"engine{i}", num_replicas=1,
                                     ray_actor_options={"num_cpus": cpus_per_replica, "num_gpus": gpus_per_replica})
               .bind(config, options, i, threads) for i in range(replicas)]
    return StreamvidIngress.bind(options, *engines)
