"""Live sources that drop: a real MJPEG-over-HTTP server on 127.0.0.1 is stopped and started again; the source
reports the loss, reopens with backoff, and the stream (and the session on it) goes on with its clock running."""

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

import numpy as np
import pytest
from PIL import Image

from streamvid.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.sources import THREAD_NAME, LiveSource, open_source

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
    source._backoff_s = (0.1, 0.4)
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
    with StreamingAssistant(EngineConfig(model="unused", window_tokens=60, max_new_tokens=2, fps=4.0),
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
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
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
    from streamvid_app.sessions import _Tap

    tap = _Tap(LiveSource(server.url, fps=5.0, backoff_s=(0.1, 0.4)))
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
