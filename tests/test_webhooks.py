"""Alert webhooks (serve/webhooks.py) against real local HTTP receivers: a receiver that is down or never answers
does not delay a healthy one, one stream's flood drops only its own oldest alerts and takes turns with the other
streams, a retry waits aside while other alerts go, and only no answer, 429 and 5xx are retried (a 404 is one POST
and a counted failure). Waits are bounded and count-based."""

from __future__ import annotations

import base64
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from serve_helpers import wait_until
from streamvid.serve.webhooks import WebhookSender


class Receiver:
    """A webhook receiver on loopback (the standard library's HTTP server): records each POSTed alert in arrival
    order; `status(alert, tries_of_it)` says what to answer (200 unless told); `gate`, when given, holds every
    request until it is set."""

    def __init__(self, status=None, gate: threading.Event | None = None):
        self.got: list[dict] = []
        self.status = status or (lambda alert, tries: 200)
        self.gate = gate
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                alert = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    receiver.got.append(alert)
                    tries = sum(a.get("n") == alert.get("n") and a.get("stream_id") == alert.get("stream_id")
                                for a in receiver.got)
                if receiver.gate is not None:
                    receiver.gate.wait(60)
                code = receiver.status(alert, tries)
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.gate is not None:
            self.gate.set()
        self.server.shutdown()
        self.server.server_close()

    def numbers(self, stream: str | None = None) -> list[int]:
        with self.lock:
            return [a["n"] for a in self.got if stream is None or a.get("stream_id") == stream]


@pytest.fixture
def silent_port():
    """A port that takes connections (the kernel's backlog) and never answers on them."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/hook"


@pytest.fixture
def closed_port():
    """A port nothing listens on: every connection is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


def alert(n: int, stream: str = "vs-a") -> dict:
    return {"type": "alert", "trigger_id": "w0", "n": n, "stream_id": stream}


@pytest.mark.parametrize("dead", ["silent_port", "closed_port"])
def test_a_dead_receiver_does_not_delay_the_healthy_one(dead, request):
    dead_url = request.getfixturevalue(dead)
    with Receiver() as healthy:
        # the dead one first; its POSTs would take 60 s to time out, and its retries wait 30 s
        sender = WebhookSender([dead_url, healthy.url], retries=5, backoff_s=(30.0, 60.0), timeout_s=60.0)
        try:
            for n in range(7):
                sender.offer(alert(n))
            wait_until(lambda: len(healthy.got) == 7, timeout_s=30.0, what="the healthy receiver's 7 alerts")
            assert healthy.numbers() == list(range(7))
            wait_until(lambda: sender.counts(healthy.url)["sent"] == 7, what="the sender to count its answers")
            assert sender.counts(healthy.url) == {"sent": 7, "failed": 0, "dropped": 0}
            assert sender.counts(dead_url)["sent"] == 0 and sender.counts(dead_url)["failed"] == 0  # still trying
        finally:
            sender.close(timeout_s=1.0)


def test_a_flood_from_one_stream_drops_only_its_own_oldest_alerts_and_takes_turns():
    gate = threading.Event()
    with Receiver(gate=gate) as receiver:
        sender = WebhookSender([receiver.url], queue_size=8)
        try:
            sender.offer(alert(0, "vs-flood"))
            wait_until(lambda: len(receiver.got) == 1, what="the first POST to be held at the receiver")
            for n in range(3):
                sender.offer(alert(n, "vs-calm"))
            for n in range(1, 1001):
                sender.offer(alert(n, "vs-flood"))
            for n in range(3, 5):
                sender.offer(alert(n, "vs-calm"))
            assert sender.dropped == 1000 - 8  # the flood's own oldest, none of the calm stream's
            gate.set()
            wait_until(lambda: len(receiver.got) == 1 + 8 + 5, what="every kept alert")
            assert receiver.numbers("vs-calm") == [0, 1, 2, 3, 4]
            assert receiver.numbers("vs-flood") == [0, *range(993, 1001)]
            # turns: after the held POST the two streams alternate, so the calm stream's 5 come within 10 POSTs
            order = [a["stream_id"] for a in receiver.got[1:11]]
            assert order.count("vs-calm") == 5 and order.count("vs-flood") == 5
            wait_until(lambda: sender.sent == 14, what="the sender to count its answers")
            assert sender.failed == 0
        finally:
            sender.close(timeout_s=1.0)


def test_past_the_total_bound_the_longest_stream_loses_its_oldest():
    gate = threading.Event()
    with Receiver(gate=gate) as receiver:
        sender = WebhookSender([receiver.url], queue_size=4, max_queued=6)
        try:
            sender.offer(alert(0, "vs-held"))
            wait_until(lambda: len(receiver.got) == 1, what="the first POST to be held at the receiver")
            for n in range(10):
                sender.offer(alert(n, "vs-a"))  # its own bound: 6..9 kept
            for n in range(3):
                sender.offer(alert(n, "vs-b"))  # the 7th waiting: vs-a (the longest) loses 6
            sender.offer(alert(0, "vs-c"))  # the 7th again: vs-a (longest first among equals) loses 7
            gate.set()
            wait_until(lambda: len(receiver.got) == 1 + 6, what="every kept alert")
            assert receiver.numbers("vs-a") == [8, 9] and receiver.numbers("vs-b") == [0, 1, 2]
            assert receiver.numbers("vs-c") == [0] and sender.dropped == 6 + 2
        finally:
            sender.close(timeout_s=1.0)


def test_a_retry_waits_aside_while_other_alerts_go():
    # alert 0's first POST is a 503: its retry is due in 30 s, and alerts 1..4 are sent meanwhile
    with Receiver(status=lambda a, tries: 503 if a["n"] == 0 and tries == 1 else 200) as receiver:
        sender = WebhookSender([receiver.url], retries=2, backoff_s=(30.0, 30.0))
        try:
            for n in range(5):
                sender.offer(alert(n))
            wait_until(lambda: sender.sent == 4, timeout_s=20.0, what="alerts 1..4 past alert 0's retry")
            assert receiver.numbers() == [0, 1, 2, 3, 4] and sender.failed == 0
        finally:
            sender.close(timeout_s=1.0)


def test_5xx_and_429_are_retried_up_to_the_limit():
    with Receiver(status=lambda a, tries: 503 if a["n"] == 0 else (429 if tries == 1 else 200)) as receiver:
        sender = WebhookSender([receiver.url], retries=3, backoff_s=(0.05, 0.1))
        try:
            sender.offer(alert(0))  # 503 every time: 1 + 3 tries, then a failure
            sender.offer(alert(1))  # 429 once, then taken
            wait_until(lambda: sender.failed == 1 and sender.sent == 1, what="both alerts settled")
            assert receiver.numbers().count(0) == 4 and receiver.numbers().count(1) == 2
        finally:
            sender.close(timeout_s=1.0)


def test_a_404_is_one_post_and_a_counted_failure():
    with Receiver(status=lambda a, tries: 404 if a["n"] == 0 and tries == 1 else 200) as receiver:
        sender = WebhookSender([receiver.url], retries=5, backoff_s=(0.01, 0.01))
        try:
            sender.offer(alert(0))
            wait_until(lambda: sender.failed == 1, timeout_s=30.0, what="the 404 to be counted as a failure")
            sender.offer(alert(1))  # a later alert still goes, and alert 0 is never tried again
            wait_until(lambda: sender.sent == 1, what="the next alert")
            assert receiver.numbers() == [0, 1] and sender.failed == 1
        finally:
            sender.close(timeout_s=1.0)


def test_a_thumbnail_is_made_once_for_every_receiver():
    calls = []

    def thumbnail(max_px, timeout_s):
        calls.append((max_px, timeout_s))
        return b"\xff\xd8jpeg"

    with Receiver() as one, Receiver() as two:
        sender = WebhookSender([one.url, two.url], thumbnails=True)
        try:
            sender.offer(alert(0), thumbnail=thumbnail)
            wait_until(lambda: len(one.got) == len(two.got) == 1, what="both receivers")
            for got in (one.got[0], two.got[0]):
                assert base64.b64decode(got["thumbnail"]) == b"\xff\xd8jpeg"
            assert calls == [(160, 2.0)]
        finally:
            sender.close(timeout_s=1.0)


def test_bad_urls_are_refused_and_close_is_bounded(silent_port):
    with pytest.raises(ValueError, match="--alert-webhook must be an http"):
        WebhookSender(["ftp://x"])
    sender = WebhookSender([silent_port], timeout_s=60.0)
    sender.offer(alert(0))
    sender.close(timeout_s=0.5)  # a POST held by a receiver that never answers does not hold close
    sender.offer(alert(1))  # after close: ignored, no error
