"""The routes' backend, one process or Ray: both answer every call of `web.Backend`, and Ray's forwards each call on
one stream (derived from the Backend's list) to the replica holding it, the caller's arguments (keywords too) in the
Backend's order with its defaults."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from streamvid.serve.service import HubService
from streamvid.serve.web import STREAM_CALLS, STREAMED, Backend

pytest.importorskip("ray.serve", reason="needs ray[serve] (pip install -e '.[test]')")
from streamvid.serve.ray_app import RayBackend  # noqa: E402


def calls_of(cls) -> set[str]:
    return {n for n, v in vars(cls).items() if not n.startswith("_") and inspect.isfunction(v)}


def test_both_backends_answer_every_call_the_routes_make():
    wanted = calls_of(Backend)
    assert wanted == {"open", "list", *STREAM_CALLS, *STREAMED}
    for cls in (HubService, RayBackend):
        missing = [n for n in wanted if getattr(cls, n) is getattr(Backend, n)]  # inherited: only the abstract one
        assert not missing and not cls.__abstractmethods__, (cls.__name__, missing)


def test_a_backend_without_every_call_cannot_be_made():
    class Partial(HubService):
        watch = Backend.watch  # one call the routes make, left unimplemented

    with pytest.raises(TypeError, match="abstract method.*watch"):
        Partial(hub=None)


class Replicas:
    """Ray's side, recorded: which replica was called with what (a stand-in for the engine handles)."""

    def __init__(self):
        self.calls, self.streams = [], []

    async def on(self, sid, method, *args):
        self.calls.append((sid, method, args))
        return {"method": method}

    async def stream_from(self, i, method, *args, sid=None):
        self.streams.append((i, method, args, sid))
        yield {"item": 1}


def test_ray_forwards_each_call_on_a_stream_with_its_arguments():
    backend = RayBackend.__new__(RayBackend)
    replicas = Replicas()
    backend.call_on = replicas.on
    backend.stream_from = replicas.stream_from
    backend.index = lambda sid: 3

    async def main():
        got = [await getattr(backend, "push_audio")("r3.ab-x", b"pcm", "audio/pcm", 24000, 1.5),
               await getattr(backend, "watch")("r3.ab-x", "a red circle")]
        items = [i async for i in backend.events("r3.ab-x", deltas=True)]
        got.append(await backend.watch("r3.ab-x", "a star", reset=0.2))
        return got, items

    got, items = asyncio.run(main())
    assert got == [{"method": "push_audio"}, {"method": "watch"}, {"method": "watch"}] and items == [{"item": 1}]
    assert replicas.calls == [("r3.ab-x", "push_audio", (b"pcm", "audio/pcm", 24000, 1.5)),
                              ("r3.ab-x", "watch", ("a red circle", None, None)),
                              ("r3.ab-x", "watch", ("a star", None, 0.2))]
    assert replicas.streams == [(3, "events", ("r3.ab-x", True), "r3.ab-x")]
