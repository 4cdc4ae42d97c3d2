"""`streamvid serve` with URL sources that never answer or drip their reply: the sources open on threads of their own
with a deadline (`--source-open-timeout-s`), a stream whose source is still opening answers GET with its state, and
other streams' frames, status reads and deletes go on meanwhile. The FastAPI app on uvicorn (a thread, 127.0.0.1, a
free port) over the tiny random checkpoint, driven with httpx; the hanging sources are TCP servers in this file on
127.0.0.1 that stop by themselves. No wall-clock thresholds: the order of events is checked (the hanging servers
count the connections the opens made and the ones the server gave up), and waits are bounded polling."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time

import httpx
import pytest
from conftest import random_frames
from serve_helpers import png, running, wait_until

from streamvid.config import EngineConfig
from streamvid.engine.engine import Engine
from streamvid.serve import ServeOptions, build_app

MODEL_ID = "tiny-qwen"
HANGING = 8  # opens that hang at once
SHORT_S = 2.0  # the deadline where the test waits for it
SERVER_LIFETIME_S = 120.0  # a hanging server closes everything by itself after this long, whatever the test does


class HangingServer:
    """A TCP server on 127.0.0.1 that accepts connections and never answers them ("silent"), or answers an HTTP
    status line and then one header byte per second, never ending the header ("drip"). Counts the connections it
    accepted and those the client closed; closes everything when stopped, or after SERVER_LIFETIME_S."""

    def __init__(self, mode: str):
        self.mode = mode
        self.accepted = 0
        self.closed_by_client = 0
        self._count = threading.Lock()
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._deadline = time.monotonic() + SERVER_LIFETIME_S
        self._threads = [threading.Thread(target=self._accept, name="hanging-accept", daemon=True)]
        self._threads[0].start()

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.port}/cam{i}.mp4"

    def counts(self) -> tuple[int, int]:
        with self._count:
            return self.accepted, self.closed_by_client

    def _running(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self._deadline

    def _accept(self) -> None:
        while self._running():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._count:
                self.accepted += 1
                self._conns.append(conn)
            t = threading.Thread(target=self._hold, args=(conn,), name="hanging-conn", daemon=True)
            self._threads.append(t)
            t.start()

    def _hold(self, conn: socket.socket) -> None:
        conn.settimeout(1.0)  # the drip's pace; a silent connection looks for the client's close as often
        answered = False
        try:
            while self._running():
                try:
                    data = conn.recv(4096)
                except TimeoutError:
                    if answered:
                        conn.sendall(b"X")  # one more byte of a header line that never ends
                    continue
                if not data:  # the client gave up
                    with self._count:
                        self.closed_by_client += 1
                    return
                if self.mode == "drip" and not answered:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                    answered = True
        except OSError:  # reset by the client: it gave up too
            with self._count:
                self.closed_by_client += 1

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._count:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        for t in self._threads:
            t.join(timeout=5)


@contextlib.contextmanager
def hanging(mode: str):
    server = HangingServer(mode)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def engine(tiny_model_dir, adapter):
    engine = Engine(EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=8), adapter)
    yield engine
    engine.close()


@contextlib.contextmanager
def serving(engine, **options):
    """The app over the engine, private URLs allowed (the hanging servers are on loopback); (httpx client, hub)."""
    app = build_app(engine, ServeOptions(model_id=MODEL_ID, max_new_tokens=8, allow_private_urls=True, **options))
    with running(app) as url, httpx.Client(base_url=url, timeout=60.0) as client:
        yield client, app.state.hub


def one_line(message: str) -> bool:
    return isinstance(message, str) and bool(message) and "\n" not in message


@contextlib.contextmanager
def clip_server():
    """A demo clip over HTTP on 127.0.0.1 (Python's http.server, a thread), with byte ranges; yields its URL."""
    from streamvid.assets import demo_clip

    data = demo_clip("shapes_8").read_bytes()

    class Clip(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # byte ranges "bytes=A-" and "bytes=A-B", which ffmpeg's seeks ask for
            ask = self.headers.get("Range", "")
            start, _, end = ask.removeprefix("bytes=").partition("-") if ask.startswith("bytes=") else ("", "", "")
            first = int(start or 0)
            last = min(int(end), len(data) - 1) if end else len(data) - 1
            self.send_response(206 if ask else 200)
            self.send_header("Content-Type", "video/mp4")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(last - first + 1))
            if ask:
                self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(data[first:last + 1])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Clip)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/clip.mp4"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_url_that_answers_goes_from_opening_to_live(engine):
    with serving(engine, source_open_timeout_s=60.0) as (c, hub), clip_server() as url:
        r = c.post("/v1/streams", json={"source": url})
        assert r.status_code == 201 and r.json()["state"] == "opening", r.text
        sid = r.json()["id"]
        wait_until(lambda: c.get(f"/v1/streams/{sid}").json()["frames_in"] > 0, what="the URL's frames")
        st = c.get(f"/v1/streams/{sid}").json()
        assert st["state"] in ("live", "ended") and st["error"] is None
        wait_until(lambda: hub.opener.busy == 0, what="the open thread to end")
        assert c.delete(f"/v1/streams/{sid}").json()["deleted"] is True


def test_frames_status_and_deletes_go_on_while_eight_sources_hang_on_open(engine):
    # a deadline far away: these opens hang for as long as the test looks at them
    with serving(engine, source_open_timeout_s=120.0) as (c, hub), hanging("silent") as silent:
        live = c.post("/v1/streams", json={"source": "push", "fps": 2.0})
        assert live.status_code == 201 and live.json()["state"] == "live"  # "push" opens at once, as before
        opening = []
        for i in range(HANGING):
            r = c.post("/v1/streams", json={"source": silent.url(i)})
            assert r.status_code == 201, r.text
            assert r.json()["state"] == "opening" and r.json()["source"] == silent.url(i)
            opening.append(r.json()["id"])
        wait_until(lambda: silent.counts()[0] == HANGING, what="every open to connect to the silent server")

        sid = live.json()["id"]
        pushed = c.post(f"/v1/streams/{sid}/frames", params={"t_s": 0.0}, content=png(random_frames(1)[0]),
                        headers={"Content-Type": "image/png"})
        assert pushed.status_code == 200 and pushed.json()["t_s"] == 0.0
        status = c.get(f"/v1/streams/{sid}")
        assert status.status_code == 200 and status.json()["state"] == "live" and status.json()["running"] is True
        deleted = c.delete(f"/v1/streams/{sid}")
        assert deleted.status_code == 200 and deleted.json()["deleted"] is True

        # all of that happened while every open still hung: none has given up, each still answers "opening"
        assert silent.counts() == (HANGING, 0)
        assert hub.opener.busy == HANGING
        for oid in opening:
            st = c.get(f"/v1/streams/{oid}").json()
            assert st["state"] == "opening" and st["running"] is False and st["error"] is None
        listed = {s["id"]: s["state"] for s in c.get("/v1/streams").json()["data"]}
        assert all(listed[oid] == "opening" for oid in opening)
        r = c.post("/v1/chat/completions", json={"model": MODEL_ID, "stream_id": opening[0],
                                                 "messages": [{"role": "user", "content": "What?"}]})
        assert r.status_code == 409 and "still opening" in r.json()["error"]["message"]

        # a stream whose source is opening is deleted at once too, without waiting for its open
        for oid in opening:
            final = c.delete(f"/v1/streams/{oid}")
            assert final.status_code == 200 and final.json()["deleted"] is True and final.json()["state"] == "closed"
            assert c.get(f"/v1/streams/{oid}").status_code == 404
        assert silent.counts() == (HANGING, 0)
    # the silent server has closed its connections: each open ends, and its source is dropped unused
    wait_until(lambda: hub.opener.busy == 0, what="the open threads to end")


def test_sources_that_never_answer_or_drip_fail_at_their_deadline(engine):
    with serving(engine, source_open_timeout_s=SHORT_S) as (c, hub), \
            hanging("silent") as silent, hanging("drip") as drip:
        servers = [silent, drip]
        created = []
        for i in range(HANGING):
            server = servers[i % 2]
            asked_s = time.monotonic()
            r = c.post("/v1/streams", json={"source": server.url(i)})
            assert r.status_code == 201 and r.json()["state"] == "opening", r.text
            created.append((r.json()["id"], asked_s))
        wait_until(lambda: silent.counts()[0] + drip.counts()[0] == HANGING, what="every open to connect")

        def settled(sid: str) -> dict | None:
            st = c.get(f"/v1/streams/{sid}").json()
            return st if st["state"] != "opening" else None

        for sid, asked_s in created:
            st = wait_until(lambda sid=sid: settled(sid), timeout_s=SHORT_S + 60, what=f"stream {sid} to stop opening")
            failed_s = time.monotonic()
            assert failed_s - asked_s >= SHORT_S  # not before its deadline
            assert st["state"] == "failed" and st["running"] is False and one_line(st["error"])
            assert f"within {SHORT_S:g} s" in st["error"] and "--source-open-timeout-s" in st["error"], st["error"]
        # ffmpeg gave up too: every connection was closed by the server's side, and no open thread is left
        wait_until(lambda: silent.counts() == (HANGING // 2, HANGING // 2) and drip.counts() == (HANGING // 2,
                                                                                                  HANGING // 2),
                   what="every hanging connection to be given up")
        wait_until(lambda: hub.opener.busy == 0, what="the open threads to end")

        # a failed stream stays listed (for GET) until deleted, and refuses questions in one line
        sid = created[0][0]
        r = c.post("/v1/chat/completions", json={"model": MODEL_ID, "stream_id": sid,
                                                 "messages": [{"role": "user", "content": "What?"}]})
        assert r.status_code == 503 and "--source-open-timeout-s" in r.json()["error"]["message"]
        for sid, _ in created:
            final = c.delete(f"/v1/streams/{sid}")
            assert final.status_code == 200 and final.json()["state"] == "failed"


def test_too_many_sources_opening_is_503_in_one_line(engine):
    with serving(engine, source_open_timeout_s=120.0, max_opening_sources=2) as (c, hub), \
            hanging("silent") as silent:
        ids = [c.post("/v1/streams", json={"source": silent.url(i)}).json()["id"] for i in range(2)]
        r = c.post("/v1/streams", json={"source": silent.url(2)})
        assert r.status_code == 503, r.text
        message = r.json()["error"]["message"]
        assert one_line(message) and "too many sources opening" in message and "2 at most" in message
        assert c.post("/v1/streams", json={"source": "push"}).status_code == 201  # others open as ever
        assert len(c.get("/v1/streams").json()["data"]) == 3
        for sid in ids:
            assert c.delete(f"/v1/streams/{sid}").status_code == 200
    wait_until(lambda: hub.opener.busy == 0, what="the open threads to end")
