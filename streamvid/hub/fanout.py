"""A stream's one fan-out of outputs: the thread ("streamvid-hub-fanout") that is the only consumer of its
assistant's `outputs()`, each output as the JSON object `streamvid run` prints, offered to every reader.

    publish(s, {"type": "status", "event": "closed", "t_s": 3.5})   # to every subscriber and the listener
    deliver(s, output, webhooks)          # one assistant output: a token piece as {"type": "answer.delta", ...}
    run(s, webhooks, fail_open_late)      # the thread's body, until the stream stops

A subscriber's queue is bounded (subscriber.py): a slow one loses its oldest items and never holds up the others or
the engine. The listener (a web page's transcript) is called on this thread. Thread contract: `publish` and
`deliver` from any thread (they take the stream's lock only to copy its readers).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from streamvid.hub.shown import finite, redact
from streamvid.hub.stream import HubStream

WAIT_S = 0.25  # how long the thread blocks on the outputs before it looks at the stream's state


def run(s: HubStream, webhooks, fail_open_late: Callable[[HubStream], None]) -> None:
    """Each output to every reader until the stream stops, once its source has opened (a source still opening
    past its deadline: `fail_open_late(s)`). "ended" when a clip or URL ends; "error" when its work failed."""
    while s.opening and not s.done.is_set():
        left = s.open_deadline - time.monotonic()
        if left <= 0:
            fail_open_late(s)
            break
        s.opened.wait(min(WAIT_S, left))
    with s.lock:
        if not s.started or s.done.is_set():
            return
    try:
        while not s.done.is_set():
            for out in s.sa.outputs(timeout_s=WAIT_S):
                deliver(s, out, webhooks)
            if s.sa.ended and not s.ended_sent and not s.done.is_set():
                s.ended_sent = True
                publish(s, {"type": "status", "event": "ended", "t_s": round(s.sa.latest_t_s, 3)})
    except RuntimeError as e:  # the stream's work failed: it is over, the hub is not
        s.error = redact(str(e))
        publish(s, {"type": "status", "event": "error", "t_s": round(s.sa.latest_t_s, 3), "message": s.error})


def deliver(s: HubStream, out, webhooks) -> None:
    if out.kind == "token":
        publish(s, {"type": "answer.delta", "id": out.id, "text": out.text}, delta=True)
        return
    obj = finite(out.to_json())
    if out.kind == "status":  # a live source's loss and return: its reason may name the URL
        obj = {k: redact(v) for k, v in obj.items()}
    publish(s, obj)
    if out.kind == "alert" and webhooks is not None:
        webhooks.offer({**obj, "stream_id": s.id})


def publish(s: HubStream, obj: dict, delta: bool = False) -> None:
    with s.lock:
        subscribers, listener = list(s.subscribers), s.listener
    for sub in subscribers:
        if sub.deltas or not delta:
            sub.offer(obj)
    if listener is not None:
        listener(obj)
