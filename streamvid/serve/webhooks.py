"""Alerts POSTed to the operator's webhooks (`streamvid serve --alert-webhook URL`), never blocking the engine.

    sender = WebhookSender(["https://hooks.example/streamvid"])
    sender.offer({"type": "alert", "trigger_id": "w0", ..., "stream_id": "vs-1a2b"})   # returns at once
    sender.offer(alert, thumbnail=lambda max_px, timeout_s: jpeg_bytes)   # with thumbnails=True: "thumbnail" added
    sender.close()

Each URL has a sender of its own (a thread, "streamvid-serve-webhook-N", with its own connection), so a receiver
that is down or never answers delays only its own alerts. `offer` puts the alert, for every URL, on that URL's
queue of the alert's stream (its "stream_id"): each stream's queue holds at most `queue_size` alerts (a full one
drops its own oldest, counted in `dropped`; past `max_queued` over all streams, the longest stream's oldest goes),
and a sender takes the streams in turn (round robin), so one stream's flood neither drops nor delays another
stream's alerts by more than one alert each turn. A POST is one try of at
most `timeout_s`; a failed one (no answer, or an HTTP status of 429 or 5xx) is tried again up to `retries` more
times, each after a wait doubling from `backoff_s[0]` to `backoff_s[1]`: the retry is put aside with its due time
and the sender goes on with the other alerts meanwhile. Other answers (a 3xx, or a 4xx but 429) are failures at
once, never retried. `sent`, `failed` and `dropped` count (alert, URL) pairs over all URLs.
With `thumbnails` (`--webhook-thumbnails`), an alert offered with a `thumbnail` function is sent with
"thumbnail": a base64 JPEG of its snapshot at most THUMBNAIL_PX on its longer side, made once per alert by the
first sender to need it (waiting up to THUMBNAIL_WAIT_S for the snapshot); without one (no frame was held) the
alert goes without it.

The URLs are the operator's own (they may be on a private network), so no address policy applies to them.
Thread contract: `offer`, `close` and the counters from any thread; a URL's queues are guarded by its lock, and
only its own thread POSTs.
"""

from __future__ import annotations

import base64
import heapq
import itertools
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

log = logging.getLogger(__name__)

THUMBNAIL_PX = 160
THUMBNAIL_WAIT_S = 2.0
Thumbnail = Callable[[int, float], bytes | None]  # (max_px, timeout_s) -> a small JPEG, or None


class _Payload:
    """One alert as every URL sends it: its thumbnail made once, by the first sender that needs it."""

    def __init__(self, alert: dict, thumbnail: Thumbnail | None):
        self.alert, self._thumbnail = alert, thumbnail
        self._lock = threading.Lock()

    def body(self) -> dict:
        with self._lock:
            if self._thumbnail is not None:
                self.alert, self._thumbnail = with_thumbnail(self.alert, self._thumbnail), None
            return self.alert


def with_thumbnail(alert: dict, thumbnail: Thumbnail) -> dict:
    """`alert` with "thumbnail" (base64 JPEG) when `thumbnail` gives one; as it is when it gives None or fails."""
    try:
        data = thumbnail(THUMBNAIL_PX, THUMBNAIL_WAIT_S)
    except Exception as e:  # noqa: BLE001 - an alert goes out without its thumbnail rather than not at all
        log.warning("alert webhook: no thumbnail for alert %s: %s", alert.get("alert_id"), e)
        return alert
    return alert if data is None else {**alert, "thumbnail": base64.b64encode(data).decode("ascii")}


@dataclass(order=True)
class _Retry:
    due: float
    seq: int
    payload: _Payload = field(compare=False)
    attempt: int = field(compare=False)  # tries made so far


@dataclass
class _StreamQueue:
    fresh: deque = field(default_factory=deque)  # payloads not tried yet, oldest first
    retries: list = field(default_factory=list)  # a heap of _Retry by due time

    def __len__(self) -> int:
        return len(self.fresh) + len(self.retries)


class _Receiver:
    """One URL: its streams' queues, taken in turn, and the thread that POSTs them."""

    def __init__(self, url: str, index: int, owner: WebhookSender):
        self.url, self.owner = url, owner
        self.sent = self.failed = self.dropped = 0
        self._streams: OrderedDict[object, _StreamQueue] = OrderedDict()  # in turn order: the next one first
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self.thread = threading.Thread(target=self._run, name=f"streamvid-serve-webhook-{index}", daemon=True)

    def put(self, stream, payload: _Payload) -> None:
        with self._cond:
            queue = self._streams.get(stream)
            if queue is None:
                queue = self._streams[stream] = _StreamQueue()
            if len(queue) >= self.owner.queue_size:  # the stream's own oldest goes
                self._drop_oldest(queue)
            queue.fresh.append(payload)
            if sum(len(q) for q in self._streams.values()) > self.owner.max_queued:  # the longest stream's oldest
                self._drop_oldest(max(self._streams.values(), key=len))
            self._cond.notify()

    def _drop_oldest(self, queue: _StreamQueue) -> None:
        """The oldest alert waiting in `queue`, fresh ones first; counted in `dropped`. With the lock held."""
        if queue.fresh:
            queue.fresh.popleft()
        else:
            queue.retries.remove(min(queue.retries, key=lambda r: r.seq))
            heapq.heapify(queue.retries)
        self.dropped += 1

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _next(self, now: float) -> tuple[_Payload, int] | float | None:
        """The next (payload, tries made) in turn, or the time the earliest retry is due, or None when all is empty.
        Called with the lock held."""
        due = None
        for stream in list(self._streams):
            queue = self._streams[stream]
            if queue.retries and queue.retries[0].due <= now:
                retry = heapq.heappop(queue.retries)
                item = (retry.payload, retry.attempt)
            elif queue.fresh:
                item = (queue.fresh.popleft(), 0)
            else:
                if not queue:
                    del self._streams[stream]
                else:
                    due = queue.retries[0].due if due is None else min(due, queue.retries[0].due)
                continue
            self._streams.move_to_end(stream)  # its turn is taken: the other streams come first next time
            return item
        return due

    def _run(self) -> None:
        stop = self.owner.stopping
        with httpx.Client(timeout=self.owner.timeout_s, follow_redirects=False) as client:
            while not stop.is_set():
                with self._cond:
                    got = self._next(time.monotonic())
                    if not isinstance(got, tuple):
                        self._cond.wait(0.5 if got is None else min(0.5, max(0.0, got - time.monotonic())))
                        continue
                payload, attempt = got
                self._try(client, payload, attempt)

    def _try(self, client: httpx.Client, payload: _Payload, attempt: int) -> None:
        try:
            r = client.post(self.url, json=payload.body())
            if r.status_code < 300:
                with self._cond:
                    self.sent += 1
                return
            retry = r.status_code == 429 or r.status_code >= 500
            why = f"HTTP {r.status_code}"
        except httpx.HTTPError as e:
            retry, why = True, f"{type(e).__name__}: {e}"
        retries, (first, most) = self.owner.retries, self.owner.backoff_s
        if retry and attempt < retries:
            wait = min(first * 2 ** attempt, most)
            log.info("alert webhook %s failed (%s); retrying in %.1f s", self.url, why, wait)
            stream = payload.alert.get("stream_id")
            with self._cond:
                queue = self._streams.get(stream)
                if queue is None:
                    queue = self._streams[stream] = _StreamQueue()
                heapq.heappush(queue.retries, _Retry(time.monotonic() + wait, next(self._seq), payload, attempt + 1))
            return
        with self._cond:
            self.failed += 1
        log.warning("alert webhook %s: gave up on an alert (%s)", self.url, why)


class WebhookSender:
    def __init__(self, urls, queue_size: int = 256, retries: int = 5, backoff_s: tuple[float, float] = (0.5, 8.0),
                 timeout_s: float = 5.0, thumbnails: bool = False, max_queued: int | None = None):
        urls = self.check(urls)
        self.thumbnails = thumbnails
        self.queue_size = max(1, queue_size)  # per stream and URL
        self.max_queued = max_queued or 16 * self.queue_size  # per URL over all streams
        self.retries, self.backoff_s, self.timeout_s = retries, backoff_s, timeout_s
        self.stopping = threading.Event()
        self._receivers = [_Receiver(url, i, self) for i, url in enumerate(urls)]
        for receiver in self._receivers:
            receiver.thread.start()

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(r.url for r in self._receivers)

    @property
    def sent(self) -> int:
        return sum(r.sent for r in self._receivers)

    @property
    def failed(self) -> int:
        return sum(r.failed for r in self._receivers)

    @property
    def dropped(self) -> int:
        return sum(r.dropped for r in self._receivers)

    def counts(self, url: str) -> dict:
        """{"sent", "failed", "dropped"} for one of the URLs."""
        receiver = next(r for r in self._receivers if r.url == url)
        return {"sent": receiver.sent, "failed": receiver.failed, "dropped": receiver.dropped}

    @classmethod
    def of(cls, options) -> WebhookSender | None:
        """The sender a server's options ask for (ServeOptions: webhook_urls, ...), or None without URLs."""
        if not options.webhook_urls:
            return None
        return cls(options.webhook_urls, options.webhook_queue, options.webhook_retries,
                   thumbnails=options.webhook_thumbnails)

    @staticmethod
    def check(urls) -> tuple[str, ...]:
        urls = tuple(urls)
        for url in urls:
            if not url.lower().startswith(("http://", "https://")):
                raise ValueError(f"--alert-webhook must be an http(s) URL, got {url[:100]!r}")
        return urls

    def offer(self, alert: dict, thumbnail: Thumbnail | None = None) -> None:
        """Queue `alert` for every URL (on its stream's queue there); returns at once."""
        if self.stopping.is_set():
            return
        payload = _Payload(alert, thumbnail if self.thumbnails else None)
        for receiver in self._receivers:
            receiver.put(alert.get("stream_id"), payload)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop after the POSTs under way (alerts still queued are dropped); joins within `timeout_s` in all."""
        self.stopping.set()
        for receiver in self._receivers:
            receiver.wake()
        deadline = time.monotonic() + timeout_s
        for receiver in self._receivers:
            receiver.thread.join(timeout=max(0.0, deadline - time.monotonic()))
