"""Live sources that drop: a real MJPEG-over-HTTP server on 127.0.0.1 is stopped and started again; the source
reports the loss, reopens with backoff, and the stream (and the session on it) goes on with its clock running.
Backoff and giving up are checked on an injected clock: the waits are asserted, not timed."""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import av
import numpy as np
import pytest
from conftest import ctrl_c_as_at_a_terminal
from PIL import Image

from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.media.frame_source import THREAD_NAME
from streamvid.media.live_source import RECONNECT_BACKOFF_S, RECONNECT_HEALTHY_S, LiveSource
from streamvid.media.source_spec import open_source

WAIT_S = 60.0  # generous bound for events on a loaded machine


class MjpegServer:
    """multipart/x-mixed-replace JPEG frames (grey level = frame number) at about `fps`, on 127.0.0.1. `stop`
    ends every connection and closes the port; `start` serves again on the same port."""

    def __init__(self, fps: float = 20.0):
        self.fps, self.port, self.sent = fps, 0, 0
        self._server: ThreadingHTTPServer | None = None
        self._down = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/stream.mjpg"

    def start(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.end_headers()
                while not outer._down.wait(1.0 / outer.fps):
                    buf = io.BytesIO()
                    Image.fromarray(np.full((56, 56, 3), outer.sent % 256, np.uint8)).save(buf, "JPEG")
                    outer.sent += 1
                    try:
                        self.wfile.write(b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n"
                                         % len(buf.getvalue()) + buf.getvalue() + b"\r\n")
                        self.wfile.flush()
                    except OSError:  # the client went away
                        return

            def log_message(self, *args):
                pass

        self._down.clear()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_port
        threading.Thread(target=self._server.serve_forever, name="test-mjpeg", daemon=True).start()

    def stop(self) -> None:
        self._down.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def server():
    s = MjpegServer()
    s.start()
    yield s
    s.stop()


def _read_n(source, n: int) -> list:
    frames, deadline = [], time.monotonic() + WAIT_S
    while len(frames) < n and time.monotonic() < deadline:
        try:
            frame = source.read(timeout_s=1.0)
        except TimeoutError:
            continue
        assert frame is not None, "a live stream that dropped must not end"
        frames.append(frame)
    assert len(frames) == n
    return frames


def test_a_dropped_stream_is_reopened_and_its_clock_goes_on(server):
    events: queue.Queue = queue.Queue()
    source = open_source(server.url, fps=5.0)
    assert isinstance(source, LiveSource) and not source.finite
    source.backoff_s = (0.1, 0.4)
    source.on_status = lambda event, t_s, info: events.put((event, t_s, info))
    before = _read_n(source, 5)
    server.stop()
    event, lost_t_s, info = events.get(timeout=WAIT_S)
    assert event == "source_lost" and lost_t_s >= before[-1].t_s and info["reason"]
    with pytest.raises(queue.Empty):
        events.get(timeout=0.5)  # nothing comes back while the server is down
    server.start()
    event, back_t_s, info = events.get(timeout=WAIT_S)
    assert event == "source_back" and back_t_s >= lost_t_s and info["gap_s"] == pytest.approx(back_t_s - lost_t_s,
                                                                                              abs=1e-3)
    after = _read_n(source, 5)
    source.close()
    frames = before + after
    assert all(b.t_s > a.t_s for a, b in zip(frames, frames[1:])), "stream time only goes forward"
    assert all(b.index > a.index for a, b in zip(frames, frames[1:]))
    assert after[0].t_s >= back_t_s - 1e-6 and after[-1].t_s > back_t_s
    assert source.outages == 1 and source.lost_s == pytest.approx(back_t_s - lost_t_s)
    deadline = time.monotonic() + WAIT_S
    while any(t.name == THREAD_NAME for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == THREAD_NAME for t in threading.enumerate())


def test_a_session_on_a_dropping_stream_reports_the_gap_and_goes_on(adapter, server):
    source = LiveSource(server.url, fps=4.0, backoff_s=(0.1, 0.4))
    with StreamingAssistant(EngineConfig.from_settings(model="unused", window_tokens=60, max_new_tokens=2, fps=4.0),
                            adapter=adapter) as sa:
        sa.start(source)

        def wait_for(pred) -> None:
            deadline = time.monotonic() + WAIT_S
            while not pred() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert pred()

        wait_for(lambda: sa.ingest.blocks_encoded >= 2)
        server.stop()
        statuses = []
        deadline = time.monotonic() + WAIT_S
        while not statuses and time.monotonic() < deadline:
            statuses += [o.to_json() for o in sa.outputs(timeout_s=0.2) if o.kind == "status"]
        server.start()
        while len(statuses) < 2 and time.monotonic() < deadline + WAIT_S:
            statuses += [o.to_json() for o in sa.outputs(timeout_s=0.2) if o.kind == "status"]
        assert [s["event"] for s in statuses] == ["source_lost", "source_back"]
        assert statuses[0]["type"] == "status" and statuses[1]["t_s"] >= statuses[0]["t_s"]
        blocks = sa.ingest.blocks_encoded
        wait_for(lambda: sa.ingest.blocks_encoded >= blocks + 2)
        assert sa.ingest.latest_t_s > statuses[1]["t_s"] - 1e-6
        stats = sa.stats()
        assert stats["source_outages"] == 1 and stats["source_lost_s"] > 0
        qid = sa.ask("What is on screen?")
        answers = []
        while not answers and time.monotonic() < deadline + 2 * WAIT_S:
            answers += [o for o in sa.outputs(timeout_s=0.2) if o.kind == "answer" and o.id == qid]
        assert answers and answers[0].data["t_s"] > statuses[1]["t_s"]


def test_streamvid_run_on_a_url_that_drops_comes_back_by_itself(tiny_model_dir, server):
    p = subprocess.Popen([sys.executable, "-m", "streamvid.cli", "run", server.url, "--model", str(tiny_model_dir),
                          "--fps", "4", "--window-tokens", "60", "--max-new-tokens", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=ctrl_c_as_at_a_terminal)
    try:
        sent = server.sent
        deadline = time.monotonic() + WAIT_S
        while server.sent < sent + 20 and time.monotonic() < deadline:  # the run is reading the stream
            time.sleep(0.05)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in p.stdout], daemon=True).start()
        server.stop()
        lost = json.loads(lines.get(timeout=WAIT_S))
        server.start()
        back = json.loads(lines.get(timeout=WAIT_S))
        sent = server.sent
        while server.sent < sent + 20 and time.monotonic() < deadline + WAIT_S:
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=WAIT_S)
        last = None
        while (line := lines.get(timeout=WAIT_S)) and not line.startswith('{"type": "stats"'):
            pass
        last = line
    finally:
        p.kill()
    assert (lost["type"], lost["event"], back["event"]) == ("status", "source_lost", "source_back")
    stats = json.loads(last)
    assert p.returncode == 130 and stats["type"] == "stats" and stats["interrupted"]
    assert stats["source_outages"] == 1 and stats["frames_in"] > 0


def test_the_web_app_source_passes_the_events_through(server):
    from streamvid.hub.stream import FrameTap

    tap = FrameTap(LiveSource(server.url, fps=5.0, backoff_s=(0.1, 0.4)))
    events: queue.Queue = queue.Queue()
    tap.on_status = lambda event, t_s, info: events.put(event)  # what the assistant sets on the app's source
    _read_n(tap, 3)
    assert tap.last is not None
    server.stop()
    assert events.get(timeout=WAIT_S) == "source_lost"
    server.start()
    assert events.get(timeout=WAIT_S) == "source_back"
    _read_n(tap, 3)
    assert tap.outages == 1 and tap.lost_s > 0
    tap.close()


# ---- backoff and giving up, on an injected clock ---------------------------------------------------------------
def ts_clip(seconds: float, fps: int = 4, px: int = 32) -> bytes:
    """An MPEG-TS clip (pts on every frame, so its stream time does not depend on the wall clock)."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="mpegts") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width = s.height = px
        s.pix_fmt, s.options = "yuv420p", {"g": str(fps)}
        for i in range(int(seconds * fps)):
            c.mux(s.encode(av.VideoFrame.from_ndarray(np.full((px, px, 3), i % 256, np.uint8), format="rgb24")))
        c.mux(s.encode())
    return buf.getvalue()


class PlanServer:
    """HTTP on 127.0.0.1 whose k-th request gets plan[k] (the last entry repeats): "long" (30 s of video), "short"
    (3 s), "2GB" (3 s under a 2 GB Content-Length, then the connection closes) or "404"; a request for a later
    byte range gets 416. Each response ends by closing the connection; the first waits for `gate` first, so a test
    can set `on_status` before anything happens."""

    def __init__(self, plan: list[str]):
        self.plan, self.requests, self.gate = plan, 0, threading.Event()
        clips = {"long": ts_clip(30), "short": ts_clip(3)}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.headers.get("Range", "bytes=0-") != "bytes=0-":  # a seek is no new connection of the plan
                    self.send_error(416)
                    return
                k, outer.requests = outer.requests, outer.requests + 1
                kind = outer.plan[min(k, len(outer.plan) - 1)]
                if kind == "404":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "video/mp2t")
                if kind == "2GB":
                    self.send_header("Content-Length", str(2 * 2**30))
                self.end_headers()
                self.wfile.write(clips["long" if kind == "long" else "short"])
                self.wfile.flush()
                if k == 0:
                    outer.gate.wait(WAIT_S)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}/live.ts"
        threading.Thread(target=self._server.serve_forever, name="test-plan", daemon=True).start()

    def stop(self) -> None:
        self.gate.set()
        self._server.shutdown()
        self._server.server_close()


class FakeTime:
    """`clock` and `sleep` for a LiveSource: sleeping records the wait and moves the clock on at once; after
    `stop_after` waits, sleep says stop."""

    def __init__(self, stop_after: int = 1000):
        self.now, self.waits, self.stop_after, self.done = 1000.0, [], stop_after, threading.Event()

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        if len(self.waits) >= self.stop_after:
            self.done.set()
            return True
        return False


def test_reopening_backs_off_across_connections_that_fail_soon_and_resets_after_a_healthy_one():
    server = PlanServer(["long", "short", "short", "2GB", "long", "short", "short"])
    fake = FakeTime(stop_after=7)
    try:
        source = LiveSource(server.url, fps=2.0, clock=fake.clock, sleep=fake.sleep)
        events: list = []
        source.on_status = lambda event, t_s, info: events.append(event)
        server.gate.set()
        assert fake.done.wait(WAIT_S)
        source.close()
    finally:
        server.stop()
    assert RECONNECT_BACKOFF_S == (0.5, 30.0) and RECONNECT_HEALTHY_S == 10.0
    # 30 s of frames were healthy: 0.5 s; then each connection that failed within 3 s (or did not open): doubled;
    # the second 30 s connection resets the wait again
    assert fake.waits == [0.5, 1.0, 2.0, 4.0, 0.5, 1.0, 2.0]
    assert events[0] == "source_lost" and "source_back" in events


def test_a_stream_without_frames_for_max_outage_s_is_given_up_with_a_status():
    server = PlanServer(["long", "404"])
    fake = FakeTime()
    try:
        source = LiveSource(server.url, fps=2.0, clock=fake.clock, sleep=fake.sleep, max_outage_s=100.0)
        events: queue.Queue = queue.Queue()
        source.on_status = lambda event, t_s, info: events.put((event, t_s, info))
        server.gate.set()
        frames, deadline = [], time.monotonic() + WAIT_S
        while time.monotonic() < deadline:  # latest-frame reads until the stream ends (None)
            try:
                if (frame := source.read(timeout_s=1.0)) is None:
                    break
                frames.append(frame)
            except TimeoutError:
                continue
        source.close()
    finally:
        server.stop()
    assert frames and source.read() is None, "a source that gave up has ended"
    assert fake.waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 8.5]  # up to 100 s in all, then no more tries
    lost = [events.get_nowait() for _ in range(events.qsize())]
    assert [e for e, _, _ in lost] == ["source_lost", "source_lost"] and source.outages == 1
    assert lost[1][2]["gave_up"] is True and lost[1][2]["reason"].startswith("no frames for 100 s, given up: ")
    assert lost[1][1] == pytest.approx(lost[0][1] + 100.0)
    assert server.requests == 1 + 9  # the first connection, then one try after each wait
