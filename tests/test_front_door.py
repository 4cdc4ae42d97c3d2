"""The front door of `streamvid serve` (front_door.py), against a real server on loopback with real clients (httpx,
raw sockets, websockets): the key checked before any body is read, body caps and read times, Host and Origin
(DNS rebinding, cross-site sockets), guessing throttled, malformed names refused in one line, weak keys refused on
a public bind. Tiny random checkpoint."""

from __future__ import annotations

import json
import os
import socket
import threading

import httpx
import pytest

from serve_helpers import running
from streamvid.config import EngineConfig
from streamvid.serve import ServeOptions, build_app
from streamvid.serve.front_door import Door, Throttle, host_name
from streamvid.serve.server import check_bind

websockets_sync = pytest.importorskip("websockets.sync.client")
from websockets.exceptions import InvalidStatus  # noqa: E402

KEY = "a-long-enough-test-key"


@pytest.fixture(scope="module")
def keyed(engine):
    options = ServeOptions(api_key=KEY, model_id="tiny", max_new_tokens=4, max_json_mb=0.01, request_timeout_s=1.0,
                           allowed_hosts=("cams.example",), cors_origins=("https://dash.example",))
    with running(build_app(engine, options)) as url:
        yield url


@pytest.fixture(scope="module")
def open_server(engine):
    """No key: loopback only, the door's Host and Origin checks are what stands between a web page and the API."""
    with running(build_app(engine, ServeOptions(model_id="tiny", max_new_tokens=4))) as url:
        yield url


def raw(url: str, request: bytes, request_timeout_s: float = 30.0) -> tuple[int, dict, bytes]:
    """`request` sent as it is on a socket of its own; the status, headers and body of the answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=request_timeout_s) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data:
                head, _, body = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), None)
                if length is not None and len(body) >= length:
                    break
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def one_line_error(body: bytes) -> str:
    message = json.loads(body)["error"]["message"]
    assert "\n" not in message
    return message


# ---- the key before the body ----------------------------------------------------------------------------------------
def test_a_body_without_the_key_is_refused_before_it_is_read(keyed):
    # headers that announce 300 MB, and no body sent: the answer comes at once, 401, from the headers alone
    status, headers, body = raw(keyed, b"POST /v1/streams HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                       b"application/json\r\nContent-Length: 314572800\r\n\r\n")
    assert status == 401 and "API key" in one_line_error(body) and headers["www-authenticate"] == "Bearer"
    # a malformed body without the key is a 401 too, not a 400
    r = httpx.post(f"{keyed}/v1/streams", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 401


def test_json_bodies_are_capped_before_reading_and_must_arrive_in_time(keyed):
    auth = f"Authorization: Bearer {KEY}\r\n".encode()
    status, _, body = raw(keyed, b"POST /v1/streams HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth +
                          b"Content-Type: application/json\r\nContent-Length: 41943040\r\n\r\n")
    assert status == 413 and "0.01 MB limit (--max-json-mb)" in one_line_error(body)
    # chunked, no length said: cut off once past the cap
    big = json.dumps({"source": "push", "pad": "x" * 20_000}).encode()
    r = httpx.post(f"{keyed}/v1/streams", content=iter([big[:5000], big[5000:]]),
                   headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    assert r.status_code == 413
    # a body that stops arriving: 408 after the read timeout (1 s here), not a held connection
    status, _, body = raw(keyed, b"POST /v1/streams HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth +
                          b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"source\"")
    assert status == 408 and "did not arrive within 1 s" in one_line_error(body)
    # and a body within the cap goes through
    r = httpx.post(f"{keyed}/v1/streams", json={"source": "push"}, headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 201
    httpx.delete(f"{keyed}/v1/streams/{r.json()['id']}", headers={"Authorization": f"Bearer {KEY}"})


def test_an_address_resending_oversized_bodies_at_once_has_its_refusals_held(engine):
    """Past PACE_AFTER body refusals within a second, the next is held HOLD_S before they are sent (a lower
    bound: a loaded machine only adds time); a body within the cap from the same address then goes through."""
    import time

    from streamvid.serve.refusal_pace import HOLD_S, PACE_AFTER

    options = ServeOptions(model_id="tiny", max_new_tokens=4, max_json_mb=0.01)
    with running(build_app(engine, options)) as url, httpx.Client(timeout=60.0) as c:
        big = {"source": "push", "pad": "x" * 20_000}
        took = []
        for _ in range(2 * (PACE_AFTER + 1)):  # at most PACE_AFTER + 1 a second: two seconds at least
            t0 = time.monotonic()
            assert c.post(f"{url}/v1/streams", json=big).status_code == 413
            took.append(time.monotonic() - t0)
        assert sum(took) >= 2 * HOLD_S * 0.99, took  # two held refusals at least: the pace counted them
        r = c.post(f"{url}/v1/streams", json={"source": "push"})
        assert r.status_code == 201
        c.delete(f"{url}/v1/streams/{r.json()['id']}")


def test_wrong_keys_from_one_address_are_throttled_with_retry_after():
    now = [0.0]
    throttle = Throttle(limit=3, window_s=60.0, clock=lambda: now[0])
    for _ in range(3):
        assert throttle.retry_after_s("10.0.0.1") == 0
        throttle.fail("10.0.0.1")
    assert throttle.retry_after_s("10.0.0.1") == 60
    assert throttle.retry_after_s("10.0.0.2") == 0  # another address is not held up
    now[0] = 59.5
    assert throttle.retry_after_s("10.0.0.1") == 1
    now[0] = 60.0
    assert throttle.retry_after_s("10.0.0.1") == 0


def test_wrong_keys_are_throttled_but_the_right_key_is_never_refused(engine):
    """60 wrong keys from one address (loopback: every client here shares it), then the right key: 200 at once;
    the wrong keys after it are still 429."""
    options = ServeOptions(api_key=KEY, model_id="tiny", max_new_tokens=4)
    app = build_app(engine, options)
    with running(app) as url, httpx.Client(base_url=url, timeout=60.0) as c:
        codes = [c.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code for _ in range(60)]
        assert codes[:10] == [401] * 10 and codes[10:] == [429] * 50
        r = c.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        assert r.status_code == 200 and r.json()["data"][0]["id"] == "tiny"
        r = c.post("/v1/streams", json={"source": "push"}, headers={"Authorization": f"Bearer {KEY}"})
        assert r.status_code == 201  # a body-carrying route too
        c.delete(f"/v1/streams/{r.json()['id']}", headers={"Authorization": f"Bearer {KEY}"})
        r = c.get("/v1/models", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert "too many wrong API keys" in one_line_error(r.content)
        assert c.get("/v1/models").status_code == 429  # no key at all is a wrong key


# ---- Host and Origin ------------------------------------------------------------------------------------------------
def test_dns_rebinding_host_names_are_refused(open_server, keyed):
    status, _, body = raw(open_server, b"GET /v1/models HTTP/1.1\r\nHost: attacker.example:8000\r\n\r\n")
    assert status == 421 and "--allowed-host" in one_line_error(body)
    for host in (b"127.0.0.1", b"localhost:1234", b"[::1]:80"):
        assert raw(open_server, b"GET /v1/models HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")[0] == 200
    # an --allowed-host name is taken
    status, _, _ = raw(keyed, b"GET /v1/models HTTP/1.1\r\nHost: cams.example\r\nAuthorization: Bearer "
                       + KEY.encode() + b"\r\n\r\n")
    assert status == 200


def test_browser_requests_and_sockets_from_other_origins_are_refused(open_server, keyed):
    r = httpx.post(f"{open_server}/v1/streams", json={"source": "push"},
                   headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and "--cors-origin" in r.json()["error"]["message"]
    same = open_server.replace("127.0.0.1", "127.0.0.1")
    r = httpx.get(f"{open_server}/v1/models", headers={"Origin": same})
    assert r.status_code == 200
    sid = httpx.post(f"{open_server}/v1/streams", json={"source": "push"}).json()["id"]
    try:
        ws_url = open_server.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime"
        with pytest.raises(InvalidStatus) as e:
            websockets_sync.connect(ws_url, origin="https://evil.example", open_timeout=30)
        assert e.value.response.status_code == 403
        with websockets_sync.connect(ws_url, origin=same, open_timeout=30) as ws:
            ws.send(json.dumps({"type": "ping"}))
    finally:
        httpx.delete(f"{open_server}/v1/streams/{sid}")
    # a --cors-origin is let in, with CORS answers (a preflight carries no key)
    pre = httpx.options(f"{keyed}/v1/models", headers={"Origin": "https://dash.example",
                                                       "Access-Control-Request-Method": "GET",
                                                       "Access-Control-Request-Headers": "authorization"})
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "https://dash.example"
    r = httpx.get(f"{keyed}/v1/models", headers={"Origin": "https://dash.example", "Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://dash.example"


def test_origin_and_host_rules():
    door = Door(bind="127.0.0.1")
    assert door.origin_allowed("http://localhost:8000", "localhost:8000", "http")
    assert not door.origin_allowed("http://localhost:8001", "localhost:8000", "http")
    assert not door.origin_allowed("https://localhost:8000", "localhost:8000", "http")
    assert not door.origin_allowed("null", "localhost:8000", "http")
    assert door.origin_allowed("http://127.0.0.1", "127.0.0.1:80", "http")
    assert host_name("[::1]:8000") == "::1" and host_name("Example.COM:80") == "example.com"
    public = Door(bind="0.0.0.0", hosts=("cams.example",))
    assert public.host_allowed("cams.example:8000") and not public.host_allowed("other.example")
    assert Door(bind="0.0.0.0").host_allowed("any.example")  # a bind to every interface names no host by itself


# ---- malformed names, fps, weak keys --------------------------------------------------------------------------------
@pytest.mark.parametrize("body, words", [
    ({"source": "a\x00b"}, "source holds a NUL character"),
    ({"source": "push", "session_dir": "x" * 300}, "session_dir has a part longer than 255 bytes"),
    ({"source": "rtsp://cam/\udc80"}, "lone UTF-16 surrogate"),
])
def test_malformed_names_are_one_line_400s_and_the_connection_goes_on(open_server, body, words):
    with httpx.Client(base_url=open_server, timeout=30.0) as client:
        payload = json.dumps(body, ensure_ascii=True).encode()
        r = client.post("/v1/streams", content=payload, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and words in one_line_error(r.content)
        assert client.get("/v1/models").status_code == 200  # the same keep-alive connection still answers


@pytest.mark.parametrize("fps, status", [(True, 422), (5e-324, 400), (0.009, 400), (0, 400), (-1, 400)])
def test_fps_must_be_a_real_number_of_at_least_one_hundredth(open_server, fps, status):
    r = httpx.post(f"{open_server}/v1/streams", json={"source": "push", "fps": fps})
    assert r.status_code == status and "fps" in one_line_error(r.content)


def test_short_keys_are_refused_off_loopback():
    with pytest.raises(ValueError, match="API key of 1 characters: use at least 16"):
        check_bind("0.0.0.0", "k")
    check_bind("0.0.0.0", "k" * 16)
    check_bind("127.0.0.1", "k")  # loopback: a short key is the user's own business
    with pytest.raises(ValueError, match="without --api-key"):
        check_bind("0.0.0.0", None)


def test_the_door_holds_for_concurrent_requests(open_server):
    """Many clients at once each get their own answer (the door keeps no per-request state of its own)."""
    codes = []

    def hit():
        codes.append(httpx.get(f"{open_server}/v1/models").status_code)

    threads = [threading.Thread(target=hit) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert codes == [200] * 16


def test_a_connection_that_drips_its_request_head_is_closed(engine):
    import uvicorn

    from serve_helpers import free_port, wait_until
    from streamvid.serve.server import uvicorn_config

    port = free_port()
    server = uvicorn.Server(uvicorn_config(build_app(engine, ServeOptions(model_id="tiny")), "127.0.0.1", port,
                                           request_timeout_s=1.0))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, what="uvicorn to start")
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHo")  # and nothing more
            assert s.recv(1024) == b""  # closed by the server (the guard: 60 s), not held
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:  # a whole head is answered
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert s.recv(1024).startswith(b"HTTP/1.1 200")
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_failed_page_logins_are_throttled_but_the_right_password_is_let_in(engine):
    app = build_app(engine, ServeOptions(api_key=KEY, model_id="tiny", max_new_tokens=4), ui=True)
    with running(app) as url, httpx.Client(base_url=url, timeout=60.0) as c:
        codes = [c.post("/login", data={"username": "api", "password": "wrong"}).status_code for _ in range(60)]
        assert all(400 <= code < 500 and code != 429 for code in codes[:10]) and codes[10:] == [429] * 50
        r = c.post("/login", data={"username": "api", "password": KEY})
        assert r.status_code == 200, r.text
        assert c.get("/", headers={"Origin": url}).status_code == 200  # the page itself, from its own origin
        r = c.post("/login", data={"username": "api", "password": "wrong"})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert "too many failed logins" in one_line_error(r.content)


def test_a_server_engine_caps_long_term_memory_by_the_hosts_ram():
    from streamvid.serve.cli import server_memory

    half = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 / 2
    cfg = server_memory(EngineConfig())
    assert cfg.scheduler.memory_mb == pytest.approx(half, abs=0.1)
    assert cfg.memory.ram_mb == pytest.approx(min(8192, half / 64), abs=0.1)
    assert 64 * cfg.memory.ram_mb <= cfg.scheduler.memory_mb  # max_streams streams fit the cap
    eight = server_memory(EngineConfig.from_settings(max_streams=8))
    assert 8 * eight.memory.ram_mb <= eight.scheduler.memory_mb
    mine = EngineConfig.from_settings(engine_memory_mb=1000.0, memory_ram_mb=100.0)
    assert server_memory(mine) == mine  # what the user set stands
