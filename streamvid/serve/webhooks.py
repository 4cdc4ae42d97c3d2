"""Alerts POSTed to the operator's webhooks (`streamvid serve --alert-webhook URL`), never blocking the engine.

    sender = WebhookSender(["https://hooks.example/streamvid"])
    sender.offer({"type": "alert", "trigger_id": "w0", ..., "stream_id": "vs-1a2b"})   # returns at once
    sender.close()

`offer` puts the alert on a bounded queue (the oldest waiting one is dropped when it is full, counted in
`dropped`); one thread ("streamvid-serve-webhooks") POSTs each alert as JSON to every URL with httpx, retrying a
failed POST (no answer, or an HTTP status of 429 or 5xx) up to `retries` more times with waits doubling from
`backoff_s[0]` to `backoff_s[1]`; other 4xx answers are not retried. `sent`, `failed` and `dropped` count.

The URLs are the operator's own (they may be on a private network), so no address policy applies to them.
Thread contract: `offer` and `close` from any thread; everything else on the sender's thread.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

import httpx

log = logging.getLogger(__name__)


class WebhookSender:
    def __init__(self, urls, queue_size: int = 256, retries: int = 5, backoff_s: tuple[float, float] = (0.5, 8.0),
                 timeout_s: float = 5.0):
        self.urls = self.check(urls)
        self.retries, self.backoff_s, self.timeout_s = retries, backoff_s, timeout_s
        self.sent = self.failed = self.dropped = 0
        self._queue: deque[dict] = deque()
        self._queue_size = queue_size
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="streamvid-serve-webhooks", daemon=True)
        self._thread.start()

    @staticmethod
    def check(urls) -> tuple[str, ...]:
        urls = tuple(urls)
        for url in urls:
            if not url.lower().startswith(("http://", "https://")):
                raise ValueError(f"--alert-webhook must be an http(s) URL, got {url[:100]!r}")
        return urls

    def offer(self, alert: dict) -> None:
        with self._cond:
            if len(self._queue) >= self._queue_size:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append(alert)
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
                    alert = self._queue.popleft()
                for url in self.urls:
                    self._post(client, url, alert)

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
