"""The async face of a `Hub`: what the HTTP routes call in one process, and what each Ray Serve replica runs.

    service = HubService(hub)
    info = await service.open("push", 2.0)
    async for item in service.ask(info["id"], "What colour is the circle?"):
        ...   # {"type": "question", "id"}, then {"type": "answer.delta", ...} pieces, then {"type": "answer", ...}
    async for item in service.events(info["id"]):
        ...   # None first (subscribed) and on every idle tick, then every output of the stream as JSON

Every method raises the hub's errors (streamvid.errors; errors.py gives their HTTP statuses) for what a client did
wrong. A generator checks the stream before its first item, so a caller can answer 404 before it starts a streamed
response. Blocking work runs on worker threads; the event loop only queues. Opening a URL source (its host lookup
here, then its connect and probe after `open` has answered with state "opening") runs on the hub's open pool
(`Hub.opener`); everything else (opening a clip, a file or "push", decoding an image, a question or condition put in
the chat template and tokenised, a status read, stopping a stream) on asyncio's default executor, so no request
waits behind another stream's network; pushed sound and spoken questions, which may wait for the shared speech
recogniser, on the sound pool (audio/recognition.py), so they never hold the default executor.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from streamvid.audio import recognition
from streamvid.errors import StreamFailed, Timeout
from streamvid.hub.hub import Hub
from streamvid.hub.subscriber import CLOSED
from streamvid.serve.web import Backend

OPEN_GRACE_S = 1.0  # past the open deadline, before a create whose host lookup has not returned gives up


class HubService(Backend):
    def __init__(self, hub: Hub):
        self.hub = hub
        self.options = hub.options

    async def open(self, source: object, fps: float | None = None, session_dir: str | None = None,
                   resume: bool = False) -> dict:
        """The new stream's info: "live" for a clip, a file or "push"; "opening" for a URL (see Hub.open).
        Unavailable (503) when too many sources are opening; Timeout (504) when a URL's host does not resolve within
        options.source_open_timeout_s."""
        if not self.hub.policy.is_url(source):
            return await asyncio.to_thread(self.hub.open, source, fps, session_dir, resume)
        loop = asyncio.get_running_loop()
        listed = loop.create_future()

        def tell(info: dict) -> None:  # on the open pool's thread, as soon as the stream is listed
            loop.call_soon_threadsafe(lambda: listed.done() or listed.set_result(info))

        # the host lookup, then the connect and probe, on one of the hub's open threads (Unavailable: none free)
        job = asyncio.wrap_future(self.hub.opener.submit(self.hub.open, source, fps, session_dir, resume, tell))
        job.add_done_callback(lambda f: f.cancelled() or f.exception())  # read even when nobody waits any more
        timeout = self.options.source_open_timeout_s
        # (Hub.open gives up itself past the deadline; this only bounds a host lookup that never returns)
        done, _ = await asyncio.wait({listed, job}, timeout=timeout + OPEN_GRACE_S,
                                     return_when=asyncio.FIRST_COMPLETED)
        if listed in done:
            return listed.result()
        if job in done:
            return job.result()  # the refusal (a bad source, a full engine, ...)
        raise Timeout(f"the source did not open within {timeout:g} s (--source-open-timeout-s): its host name did "
                      f"not resolve in time")

    async def list(self) -> list[dict]:
        return self.hub.list()

    async def count(self) -> int:
        return len(self.hub)

    async def status(self, sid: str) -> dict:
        return await asyncio.to_thread(self.hub.status, sid)

    async def close(self, sid: str) -> dict:
        return await asyncio.to_thread(self.hub.close, sid)

    async def push(self, sid: str, data: bytes, content_type: str | None, t_s: float | None = None) -> dict:
        return await asyncio.to_thread(self.hub.push, sid, data, content_type, t_s)

    async def spoken_question(self, sid: str, data: bytes, fmt: object) -> str:
        # (waits for the stream's turn at the recogniser: on the sound pool, never on the loop's default executor)
        return await recognition.off_loop(self.hub.spoken_question, sid, data, fmt)

    async def push_audio(self, sid: str, data: bytes, content_type: str | None, rate: int | None = None,
                         t_s: float | None = None) -> dict:
        return await recognition.off_loop(self.hub.push_audio, sid, data, content_type, rate, t_s)

    async def set_silence(self, sid: str, silence_s: float) -> None:
        return await asyncio.to_thread(self.hub.set_silence, sid, silence_s)

    async def question(self, sid: str, text: object) -> dict:
        """Queue a question without waiting for its answer (the realtime socket's); {"id": qid}."""
        return {"id": await asyncio.to_thread(self.hub.ask, sid, text)}  # (templated and tokenised: off the loop)

    async def watch(self, sid: str, condition: object, fire: float | None = None, reset: float | None = None) -> dict:
        return await asyncio.to_thread(self.hub.watch, sid, condition, fire=fire, reset=reset)

    async def watches(self, sid: str) -> list[dict]:
        return self.hub.watches(sid)

    async def unwatch(self, sid: str, wid: str) -> dict:
        return await asyncio.to_thread(self.hub.unwatch, sid, wid)

    async def alerts(self, sid: str) -> list[dict]:
        return await asyncio.to_thread(self.hub.alerts, sid)

    async def alert(self, sid: str, alert_id: str) -> dict:
        return await asyncio.to_thread(self.hub.alert, sid, alert_id)

    async def alert_snapshot(self, sid: str, alert_id: str) -> bytes:
        return await asyncio.to_thread(self.hub.alert_snapshot, sid, alert_id)

    async def alert_clip(self, sid: str, alert_id: str) -> bytes:
        return await asyncio.to_thread(self.hub.alert_clip, sid, alert_id)

    async def frame_jpeg(self, sid: str, t_s: float) -> bytes:
        return await asyncio.to_thread(self.hub.frame_jpeg, sid, t_s)

    async def ask(self, sid: str, text: object, dialogue: list[tuple[str, str]] | None = None) -> AsyncIterator[dict]:
        """{"type": "question", "id"} once the question is queued, then its answer.delta pieces, then the answer
        (for "tell me when ..." the acknowledgement, with "trigger_id"). Unavailable when the stream stops or
        fails first, Timeout after options.answer_timeout_s."""
        sub = self.hub.subscribe(sid, deltas=True, loop=asyncio.get_running_loop())
        try:
            qid = await asyncio.to_thread(self.hub.ask, sid, text, dialogue)
            yield {"type": "question", "id": qid, "stream_id": sid}
            deadline = time.monotonic() + self.options.answer_timeout_s
            while True:
                item = await sub.get(max(0.0, deadline - time.monotonic()))
                if item is None:
                    raise Timeout(f"no answer to {qid} on stream {sid} within {self.options.answer_timeout_s:g} s")
                if item is CLOSED:
                    raise StreamFailed(f"stream {sid} was closed before the answer to {qid} was complete")
                if item.get("type") == "status" and item.get("event") == "error":
                    raise StreamFailed(f"stream {sid} stopped with an error: {item.get('message')}")
                if item.get("id") == qid and item.get("type") in ("answer.delta", "answer"):
                    yield item
                    if item["type"] == "answer":
                        return
        finally:
            self.hub.unsubscribe(sid, sub)

    async def events(self, sid: str, deltas: bool = False) -> AsyncIterator[dict | None]:
        """None at once (the stream exists: subscribed), then every output of the stream as its JSON object
        (answer.delta pieces too with `deltas`), and None after each options.heartbeat_s without one; ends
        when the stream is closed."""
        sub = self.hub.subscribe(sid, deltas=deltas, loop=asyncio.get_running_loop())
        try:
            yield None
            while True:
                item = await sub.get(self.options.heartbeat_s)
                if item is CLOSED:
                    return
                yield item
        finally:
            self.hub.unsubscribe(sid, sub)

    async def shutdown(self) -> None:
        await asyncio.to_thread(self.hub.shutdown)
