"""`streamvid demo` under attack: raw HTTP calls (`/gradio_api/call/...`) with bad arguments, huge frames, chosen
session hashes, wrong logins; each must get a one-line error while the server and the other sessions go on."""

from __future__ import annotations

import json
import math
import re
import struct
import zlib

import httpx
import pytest
from conftest import ctrl_c_as_at_a_terminal
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from streamvid.config import EngineConfig
from streamvid.hub import validation
from streamvid.hub.policy import SourcePolicy
from streamvid_app.login import LoginThrottle
from streamvid_app.manager import SessionManager
from streamvid_app.sessions import SessionLimitError
from streamvid_app.server import check_bind, launch, upload_folder
from streamvid_app.ui import build_demo
from streamvid_app.uploads import UploadFolders

CONFIG = EngineConfig.from_settings(model="unused", window_tokens=60, max_new_tokens=3, frame_px=56)
HASH = "h" * 24  # a session hash of the length REST callers must use


def call(url: str, name: str, data: list, session_hash: str | None = HASH, auth=None) -> tuple[str, object]:
    """One raw REST call: (SSE event name, its data) — "complete" with the outputs, or "error" with the message."""
    body = {"data": data} if session_hash is None else {"data": data, "session_hash": session_hash}
    with httpx.Client(base_url=url, timeout=60, cookies=auth) as http:
        # json.dumps writes NaN / Infinity literals, which the server's JSON parser reads as floats
        r = http.post(f"/gradio_api/call/{name}", content=json.dumps(body),
                      headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        event_id = r.json()["event_id"]
        event, payload = None, None
        with http.stream("GET", f"/gradio_api/call/{name}/{event_id}") as stream:
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    event = line.split(":", 1)[1].strip()
                elif line.startswith("data:") and event in ("complete", "error"):
                    payload = json.loads(line.split(":", 1)[1].strip())
                    if event == "error" and isinstance(payload, dict):
                        payload = payload.get("error")
                    break
    return event, payload


@pytest.fixture(scope="module")
def server(adapter, tmp_path_factory):
    manager = SessionManager.standalone(CONFIG, adapter=adapter, upload_dirs=[upload_folder()], max_sessions=4,
                                        max_sessions_per_client=4)
    demo = launch(build_demo(manager, ask_timeout_s=60.0), port=None, block=False)
    yield demo.local_url, manager
    manager.shutdown()
    demo.close()


def test_failed_calls_make_no_session(server):
    url, manager = server
    before = len(manager)
    for i in range(5):
        event, message = call(url, "start", ["nope", None], session_hash=f"{i}" * 20)
        assert event == "error" and "nope" in message, message
    assert len(manager) == before
    event, started = call(url, "start", ["push", None])
    assert event == "complete" and started[0]["event"] == "started"
    assert len(manager) == before + 1
    call(url, "stop", [])


def test_one_client_cannot_take_every_session(adapter):
    m = SessionManager.standalone(CONFIG, adapter=adapter, policy=SourcePolicy(clips={}), max_sessions=4,
                                  max_sessions_per_client=2)
    try:
        m.session("a1", client="user:a")
        m.session("a2", client="user:a")
        with pytest.raises(SessionLimitError, match="this client already has 2 sessions"):
            m.session("a3", client="user:a")
        assert m.session("b1", client="user:b").client == "user:b"
    finally:
        m.shutdown()


def huge_png_header(path, width: int, height: int) -> None:
    """A valid small PNG whose header declares width x height (what a decoder would have to allocate)."""
    Image.new("RGB", (8, 8), (255, 0, 0)).save(path)
    data = bytearray(path.read_bytes())
    ihdr = data[12:29]  # b"IHDR" + 13 bytes
    ihdr[4:12] = struct.pack(">II", width, height)
    data[12:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(ihdr)))
    path.write_bytes(bytes(data))


def test_frames_above_the_pixel_cap_are_refused_before_decoding(server, tmp_path):
    url, manager = server
    client = Client(url, verbose=False)
    client.predict("push", api_name="/start")
    huge = tmp_path / "huge.png"
    huge_png_header(huge, 10000, 10000)
    with pytest.raises(AppError, match=r"100.0 MP, above the 16.8 MP cap"):  # (PIL's cap or the page's own check)
        client.predict(handle_file(str(huge)), 1.0, api_name="/push_frame")
    assert call(url, "start", ["push", None])[0] == "complete"  # the same refusal as REST clients see it: one line
    event, text = call(url, "push_frame", [upload(url, huge), 1.0])
    assert event == "error" and re.fullmatch(r"the image is (10000x10000 = )?100\.0 MP, above the 16\.8 MP cap "
                                             r"\(--max-frame-pixels\)", text), text
    call(url, "stop", [])
    small = tmp_path / "small.png"
    Image.new("RGB", (640, 360), (0, 0, 255)).save(small)
    pushed = client.predict(handle_file(str(small)), 1.0, api_name="/push_frame")
    assert pushed["event"] == "frame"
    assert not [p for p in UploadFolders(manager.policy.upload_dirs).files() if p[2].name == "small.png"], \
        "a pushed frame's upload is removed once read"
    client.predict(api_name="/stop")


def upload(url: str, path) -> dict:
    """The file uploaded the way a REST client does, as the FileData an endpoint takes."""
    with httpx.Client(base_url=url, timeout=60) as http:
        r = http.post("/gradio_api/upload", files={"files": (path.name, path.read_bytes())})
    assert r.status_code == 200, r.text
    return {"path": r.json()[0], "meta": {"_type": "gradio.FileData"}}


def test_stream_times_must_be_finite_bounded_and_forward(server, tmp_path):
    url, _ = server
    assert call(url, "start", ["push", None])[0] == "complete"
    frame = tmp_path / "f.png"
    Image.new("RGB", (56, 56), (0, 200, 0)).save(frame)
    bad = ((float("inf"), "t_s must be a finite number"), (float("nan"), "t_s must be a finite number"),
           (1e308, "t_s must be within"), (1e300, "t_s must be within"), (-1.0, "t_s must be within"))
    for t_s, message in bad:
        event, text = call(url, "push_frame", [upload(url, frame), t_s])
        assert event == "error" and message in text, text
    event, pushed = call(url, "push_frame", [upload(url, frame), 5.0])
    assert event == "complete" and pushed[0]["event"] == "frame"
    event, text = call(url, "push_frame", [upload(url, frame), 3.0])
    assert event == "error" and "t_s 3 is earlier than the last frame's 5" in text, text
    event, status = call(url, "status", [])
    assert event == "complete" and status[0]["t_s"] <= 5.0
    call(url, "stop", [])


@pytest.mark.parametrize("name,data,message", [
    ("watch", [42, None, None], "condition must be a string, got int"),
    ("poll", [None], "cursor must be a whole number"),
    ("poll", [-3], "cursor must be >= 0"),
    ("poll", ["7"], "cursor must be a whole number"),
    ("ask", [["q"]], "question must be a string, got list"),
    ("unwatch", [{"a": 1}], "trigger_id must be a string"),
    ("watch", ["a red circle", float("nan"), None], "fire must be a finite number"),
    ("watch", ["a red circle", 3, None], "fire must be within"),
    ("start", [7, None], 'is not "push", a demo clip'),  # the page's textbox turns 7 into "7"
])
def test_wrong_argument_types_get_a_one_line_error(server, name, data, message):
    event, text = call(server[0], name, data)
    assert event == "error" and message in text and "\n" not in text, text


def test_rest_calls_must_bring_a_long_session_hash(server):
    event, text = call(server[0], "status", [], session_hash="a")
    assert event == "error" and "session_hash must be at least 16" in text
    assert call(server[0], "status", [], session_hash="b" * 16)[0] == "complete"


def test_upload_limit_in_fractions_of_a_megabyte(adapter):
    manager = SessionManager.standalone(CONFIG, adapter=adapter, upload_dirs=[upload_folder()])
    demo = launch(build_demo(manager), port=None, block=False, max_upload_mb=0.5)
    try:
        with httpx.Client(base_url=demo.local_url, timeout=60) as http:
            ok = http.post("/gradio_api/upload", files={"files": ("a.bin", b"x" * 100_000)})
            big = http.post("/gradio_api/upload", files={"files": ("b.bin", b"x" * 600_000)})
        assert ok.status_code == 200, ok.text
        assert big.status_code == 413, big.text
    finally:
        manager.shutdown()
        demo.close()


def test_short_passwords_and_repeated_failed_logins(adapter):
    with pytest.raises(ValueError, match="use at least 8"):
        check_bind("0.0.0.0", "admin:short")
    assert check_bind("0.0.0.0", "admin:a-long-password") == ("admin", "a-long-password")
    manager = SessionManager.standalone(CONFIG, adapter=adapter, upload_dirs=[upload_folder()])
    demo = launch(build_demo(manager), port=None, block=False, auth=("admin", "a-long-password"))
    try:
        with httpx.Client(base_url=demo.local_url, timeout=60) as http:
            wrong = [http.post("/login", data={"username": "admin", "password": f"guess{i}"}).status_code
                     for i in range(60)]
            right = http.post("/login", data={"username": "admin", "password": "a-long-password"})
            again = http.post("/login", data={"username": "admin", "password": "guess"})
        assert wrong == [400] * 10 + [429] * 50
        assert right.status_code == 200  # a right password is never refused by the throttle
        assert again.status_code == 429 and int(again.headers["retry-after"]) > 0
    finally:
        manager.shutdown()
        demo.close()


def test_the_login_throttle_forgets_old_failures():
    now = [0.0]
    throttle = LoginThrottle(None, max_failures=3, window_s=60.0, clock=lambda: now[0])
    for _ in range(3):
        throttle.failed("10.0.0.1")
    assert throttle.retry_after_s("10.0.0.1") == 61 and throttle.retry_after_s("10.0.0.2") == 0
    now[0] = 61.0
    assert throttle.retry_after_s("10.0.0.1") == 0


def test_a_user_never_reaches_another_users_session(adapter):
    manager = SessionManager.standalone(CONFIG, adapter=adapter, upload_dirs=[upload_folder()])
    users = [("alice", "alice-password"), ("bob", "bob-password")]
    demo = launch(build_demo(manager), port=None, block=False, auth=users)
    try:
        def login(user, password):
            with httpx.Client(base_url=demo.local_url, timeout=60) as http:
                assert http.post("/login", data={"username": user, "password": password}).status_code == 200
                return dict(http.cookies)

        alice, bob = login(*users[0]), login(*users[1])
        assert call(demo.local_url, "start", ["push", None], auth=alice)[0] == "complete"
        event, status = call(demo.local_url, "status", [], auth=bob)  # the same session hash, another user
        assert event == "complete" and status[0]["running"] is False
        call(demo.local_url, "stop", [], auth=bob)
        assert call(demo.local_url, "status", [], auth=alice)[1][0]["running"] is True
        call(demo.local_url, "stop", [], auth=alice)
    finally:
        manager.shutdown()
        demo.close()


def test_an_uploaded_video_is_removed_when_its_stream_stops(server, tmp_path):
    from test_app_sessions import write_clip

    url, manager = server
    client = Client(url, verbose=False)
    clip = write_clip(tmp_path / "mine.mp4", n=40)
    started = client.predict("", handle_file(str(clip)), api_name="/start")
    assert started["source"] == "mine.mp4"
    (uploaded,) = manager.uploads_in_use()
    client.predict(api_name="/stop")
    assert not UploadFolders(manager.policy.upload_dirs).owns(uploaded).exists()


def test_upload_folders_keep_to_their_quota(tmp_path):
    folders = UploadFolders([tmp_path], quota_mb=1.0)
    paths = []
    for i in range(4):
        p = tmp_path / f"h{i}" / "f.bin"
        p.parent.mkdir()
        p.write_bytes(b"x" * 400_000)
        paths.append(p)
    outside = tmp_path.parent / "elsewhere.bin"
    outside.write_bytes(b"x")
    assert folders.discard(outside) is False and outside.exists()
    removed = folders.trim(in_use={paths[0]})
    assert removed == [paths[1], paths[2]] and folders.total_bytes() <= 2**20
    assert paths[0].exists() and paths[3].exists() and not paths[1].parent.exists()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_validators_accept_or_refuse_in_one_line(value):
    checks = (lambda v: validation.text(v, "x"), validation.cursor, lambda v: validation.stream_time(v, 1.0),
              lambda v: validation.optional_number(v, "x", 0.0, 1.0))
    for check in checks:
        try:
            out = check(value)
        except validation.ArgumentError as e:
            assert "\n" not in str(e) and str(e)
            continue
        assert out is None or isinstance(out, str) or (isinstance(out, int | float) and math.isfinite(out))


def test_the_servers_uploads_are_removed_at_shutdown(tmp_path):
    """`streamvid demo` keeps uploads in a folder of its own (under $GRADIO_TEMP_DIR) and removes it on Ctrl-C."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GRADIO_TEMP_DIR": str(tmp_path)}
    env.pop("STREAMVID_AUTH", None)
    server = subprocess.Popen([sys.executable, "-m", "streamvid.cli", "demo", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              preexec_fn=ctrl_c_as_at_a_terminal)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):  # the model loads first: up to 120 s
            try:
                if httpx.get(f"{url}/gradio_api/info", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, server.stderr.read()
            time.sleep(0.2)
        r = httpx.post(f"{url}/gradio_api/upload", files={"files": ("a.mp4", b"x" * 1000)}, timeout=30)
        assert r.status_code == 200, r.text
        (folder,) = tmp_path.glob("streamvid-uploads-*")
        assert r.json()[0].startswith(str(folder)) and os.path.exists(r.json()[0])
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
    assert not list(tmp_path.glob("streamvid-uploads-*")), "the server's upload folder outlived it"
