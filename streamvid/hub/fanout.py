"""A stream's one fan-out of outputs: the thread ("streamvid-hub-fanout") that is the only consumer of its
assistant's `outputs()`, each output as the JSON object `streamvid run` prints, offered to every reader.

    publish(s, {"type": "status", "event": "closed", "t_s": 3.5})   # to every subscriber and the listener
    deliver(s, output, webhooks)          # one assistant output: a token piece as {"type": "answer.delta", ...}
    run(s, webhooks, fail_open_late)      # the thread's body, until the stream stops

A subscriber's queue is bounded (subscriber.py): a slow one loses its oldest items and never holds up the others or
the engine. The listener (a web page's transcript) is called on this thread. An alert or answer carries the URLs of
its media when the stream keeps them and the hub has `links` (alert_access.annotate); the webhooks get each alert
with a function that gives its thumbnail (`offer(alert, thumbnail=...)`), called on their own thread.

Thread contract: `publish` and `deliver` from any thread (they take the stream's lock only to copy its readers).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from streamvid.hub.alert_access import annotate
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
    obj = annotate(s, finite(out.to_json()))
    if out.kind == "status":  # a live source's loss and return: its reason may name the URL
        obj = {k: redact(v) for k, v in obj.items()}
    publish(s, obj)
    if out.kind == "alert" and webhooks is not None:
        alert_id, media = obj.get("alert_id"), getattr(s.sa, "alert_media", None)
        thumbnail = (None if alert_id is None or media is None
                     else lambda max_px, timeout_s: media.thumbnail(alert_id, max_px, timeout_s))
        webhooks.offer({**obj, "stream_id": s.id}, thumbnail=thumbnail)


def publish(s: HubStream, obj: dict, delta: bool = False) -> None:
    with s.lock:
        subscribers, listener = list(s.subscribers), s.listener
    for sub in subscribers:
        if sub.deltas or not delta:
            sub.offer(obj)
    if listener is not None:
        listener(obj)
