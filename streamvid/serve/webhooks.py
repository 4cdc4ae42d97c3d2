"""Alerts POSTed to the operator's webhooks (`streamvid serve --alert-webhook URL`), never blocking the engine.

    sender = WebhookSender(["https://hooks.example/streamvid"])
    sender.offer({"type": "alert", "trigger_id": "w0", ..., "stream_id": "vs-1a2b"})   # returns at once
    sender.offer(alert, thumbnail=lambda max_px, timeout_s: jpeg_bytes)   # with thumbnails=True: "thumbnail" added
    sender.close()

`offer` puts the alert on a bounded queue (the oldest waiting one is dropped when it is full, counted in
`dropped`); one thread ("streamvid-serve-webhooks") POSTs each alert as JSON to every URL with httpx, retrying a
failed POST (no answer, or an HTTP status of 429 or 5xx) up to `retries` more times with waits doubling from
`backoff_s[0]` to `backoff_s[1]`; other 4xx answers are not retried. `sent`, `failed` and `dropped` count.
With `thumbnails` (`--webhook-thumbnails`), an alert offered with a `thumbnail` function is sent with
"thumbnail": a base64 JPEG of its snapshot at most THUMBNAIL_PX on its longer side, made on the sender's thread
(waiting up to THUMBNAIL_WAIT_S for the snapshot); without one (no frame was held) the alert goes without it.

The URLs are the operator's own (they may be on a private network), so no address policy applies to them.
Thread contract: `offer` and `close` from any thread; everything else on the sender's thread.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections import deque
from collections.abc import Callable

import httpx

log = logging.getLogger(__name__)

THUMBNAIL_PX = 160
THUMBNAIL_WAIT_S = 2.0
Thumbnail = Callable[[int, float], bytes | None]  # (max_px, timeout_s) -> a small JPEG, or None


class WebhookSender:
    def __init__(self, urls, queue_size: int = 256, retries: int = 5, backoff_s: tuple[float, float] = (0.5, 8.0),
                 timeout_s: float = 5.0, thumbnails: bool = False):
        self.urls = self.check(urls)
        self.thumbnails = thumbnails
        self.retries, self.backoff_s, self.timeout_s = retries, backoff_s, timeout_s
        self.sent = self.failed = self.dropped = 0
        self._queue: deque[tuple[dict, Thumbnail | None]] = deque()
        self._queue_size = queue_size
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="streamvid-serve-webhooks", daemon=True)
        self._thread.start()

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
        with self._cond:
            if len(self._queue) >= self._queue_size:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append((alert, thumbnail if self.thumbnails else None))
            self._cond.notify()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop after the alert being sent (alerts still queued are dropped); bounded join."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout_s, follow_redirects=False) as client:
            while not self._stop.is_set():
                with self._cond:
                    while not self._queue and not self._stop.is_set():
                        self._cond.wait(0.5)
                    if self._stop.is_set():
                        return
                    alert, thumbnail = self._queue.popleft()
                if thumbnail is not None:
                    alert = self._with_thumbnail(alert, thumbnail)
                for url in self.urls:
                    self._post(client, url, alert)

    @staticmethod
    def _with_thumbnail(alert: dict, thumbnail: Thumbnail) -> dict:
        try:
            data = thumbnail(THUMBNAIL_PX, THUMBNAIL_WAIT_S)
        except Exception as e:  # noqa: BLE001 - an alert goes out without its thumbnail rather than not at all
            log.warning("alert webhook: no thumbnail for alert %s: %s", alert.get("alert_id"), e)
            return alert
        return alert if data is None else {**alert, "thumbnail": base64.b64encode(data).decode("ascii")}

    def _post(self, client: httpx.Client, url: str, alert: dict) -> None:
        wait = self.backoff_s[0]
        for attempt in range(self.retries + 1):
            try:
                r = client.post(url, json=alert)
                if r.status_code < 300:
                    self.sent += 1
                    return
                retry = r.status_code == 429 or r.status_code >= 500
                why = f"HTTP {r.status_code}"
            except httpx.HTTPError as e:
                retry, why = True, f"{type(e).__name__}: {e}"
            if not retry or attempt == self.retries:
                break
            log.info("alert webhook %s failed (%s); retrying in %.1f s", url, why, wait)
            if self._stop.wait(wait):
                break
            wait = min(2 * wait, self.backoff_s[1])
        self.failed += 1
        log.warning("alert webhook %s: gave up on an alert (%s)", url, why)
