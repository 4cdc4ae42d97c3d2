"""The front doors of `streamvid serve` that sit on the streams hub: session folders nested in another live stream's
(either way) refused with 409, also across Ray replicas; a camera URL's password and secret query values never shown
(create reply, list, status, errors, log) while the source still opens with them; a made-up stream id under Ray is
404, not a dead replica's 503. Real clients (httpx) against real servers on loopback; the tiny random checkpoint."""

from __future__ import annotations

import base64
import contextlib
import http.server
import ipaddress
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from conftest import ctrl_c_as_at_a_terminal
from serve_helpers import allow_dir, config, engine, free_port, running, wait_until  # noqa: F401 - fixtures

from streamvid.serve import ServeOptions, build_app

MODEL_ID = "tiny-qwen"


def options(**changes) -> ServeOptions:
    return ServeOptions(model_id=MODEL_ID, max_new_tokens=8, answer_timeout_s=60.0, heartbeat_s=1.0, **changes)


def refused(http: httpx.Client, body: dict, status: int, *words: str) -> str:
    r = http.post("/v1/streams", json=body)
    assert r.status_code == status, (body, r.text)
    message = r.json()["error"]["message"]
    assert all(w in message for w in words) and "\n" not in message, message
    return message


# ---- nested session folders -------------------------------------------------------------------------------------
def test_a_session_dir_inside_or_around_a_live_streams_folder_is_refused(engine, allow_dir):
    outer, inner = allow_dir / "site", allow_dir / "site" / "cam1"
    with running(build_app(engine, options(allow_dirs=(str(allow_dir),)))) as base, \
            httpx.Client(base_url=base, timeout=60.0) as http:
        a = http.post("/v1/streams", json={"source": "push", "session_dir": str(outer)})
        assert a.status_code == 201, a.text
        refused(http, {"source": "push", "session_dir": str(inner)}, 409, f"inside {outer}")
        refused(http, {"source": "push", "session_dir": str(outer / "x" / "y")}, 409, f"inside {outer}")
        refused(http, {"source": "push", "session_dir": str(allow_dir / "site" / ".." / "site" / "z")}, 409,
                "inside")
        http.delete(f"/v1/streams/{a.json()['id']}")  # saved at close: the folder now holds a session, no stream

        b = http.post("/v1/streams", json={"source": "push", "session_dir": str(inner)})
        assert b.status_code == 201, b.text  # inside a folder no stream holds
        refused(http, {"session_dir": str(outer), "resume": True}, 409, f"holds {inner}")
        side = http.post("/v1/streams", json={"source": "push", "session_dir": str(allow_dir / "side")})
        assert side.status_code == 201, side.text  # a sibling folder is fine
        for sid in (b.json()["id"], side.json()["id"]):
            http.delete(f"/v1/streams/{sid}")
        again = http.post("/v1/streams", json={"session_dir": str(outer), "resume": True})
        assert again.status_code == 201, again.text  # the inner stream is gone: the outer session resumes
        http.delete(f"/v1/streams/{again.json()['id']}")


# ---- secrets in source URLs -------------------------------------------------------------------------------------
class Camera(http.server.BaseHTTPRequestHandler):
    """An HTTP "camera" that asks for Basic credentials and records what each request brought, then answers 404."""

    seen: list = []

    def do_GET(self):  # noqa: N802 - http.server's name
        auth = self.headers.get("Authorization")
        type(self).seen.append((self.path, auth))
        if auth is None:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="cam"')
        else:
            self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture()
def camera():
    Camera.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Camera)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_camera_urls_password_and_secret_query_values_are_never_shown(engine, camera, caplog):
    secrets = ("s3cretpw", "tok3nvalue", "sigvalue")
    url = f"http://alice:{secrets[0]}@127.0.0.1:{camera}/live.mp4?token={secrets[1]}&sig={secrets[2]}&ch=2"
    shown = f"http://alice:***@127.0.0.1:{camera}/live.mp4?token=***&sig=***&ch=2"
    caplog.set_level(logging.INFO, logger="streamvid")
    with running(build_app(engine, options(allow_private_urls=True, source_open_timeout_s=30.0))) as base, \
            httpx.Client(base_url=base, timeout=60.0) as http:
        created = http.post("/v1/streams", json={"source": url})
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        assert created.json()["source"] == shown
        failed = wait_until(lambda: (st := http.get(f"/v1/streams/{sid}").json())["state"] == "failed" and st,
                            what="the camera's refusal")
        listed = http.get("/v1/streams").json()["data"]
        gone = http.delete(f"/v1/streams/{sid}")
        replies = [created.text, http.get("/v1/models").text, str(listed), str(failed), gone.text]
    assert failed["source"] == shown and [s["source"] for s in listed if s["id"] == sid] == [shown]
    assert failed["error"], failed
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in secrets:
        assert not any(secret in text for text in replies), (secret, replies)
        assert secret not in logged, logged
    # the camera itself got the real credentials and query
    token = base64.b64encode(f"alice:{secrets[0]}".encode()).decode()
    assert any(auth == f"Basic {token}" for _, auth in Camera.seen), Camera.seen
    assert all(path == f"/live.mp4?token={secrets[1]}&sig={secrets[2]}&ch=2" for path, _ in Camera.seen), Camera.seen



# ---- Ray: `streamvid serve --ray` on a local cluster ------------------------------------------------------------
def listening(root: int) -> list[tuple[str, ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """(process name, address, port) of every TCP socket listening in process `root` and its descendants (Linux)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            parents[int(stat.parent.name)] = int(stat.read_text().rpartition(")")[2].split()[1])
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    sockets = {}
    for pid in tree:
        with contextlib.suppress(OSError):
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        sockets[target[8:-1]] = name
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            (address, port), state, inode = fields[1].split(":"), fields[3], fields[9]
            if state != "0A" or inode not in sockets:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # host-order words
            found.append((sockets[inode], ipaddress.ip_address(raw), int(port, 16)))
    return found


def loopback(address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


@pytest.fixture(scope="module")
def ray_cli(tmp_path_factory):
    """`streamvid serve --ray --replicas 2 --host 127.0.0.1` (a local cluster, the bundled model) in a process of its
    own: (base URL, its pid, its --allow-dir)."""
    pytest.importorskip("ray.serve", reason="needs ray[serve] (pip install -e '.[test]')")
    if not Path("/proc/net/tcp").exists():
        pytest.skip("reads listening sockets from /proc (Linux)")
    allow = tmp_path_factory.mktemp("ray-allowed").resolve()
    log = tmp_path_factory.mktemp("ray-cli") / "serve.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "streamvid.cli", "serve", "--ray", "--replicas", "2",
                                 "--host", "127.0.0.1", "--port", str(port), "--allow-dir", str(allow)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=ctrl_c_as_at_a_terminal)
    try:
        wait_until(lambda: "on Ray Serve" in log.read_text() or proc.poll() is not None, timeout_s=600,
                   what="streamvid serve --ray to start")
        assert proc.poll() is None, log.read_text()[-3000:]
        yield f"http://127.0.0.1:{port}", proc.pid, allow
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_local_ray_cluster_behind_a_loopback_server_listens_on_loopback(ray_cli):
    _, pid, _ = ray_cli
    found = listening(pid)
    names = {name for name, _, _ in found}
    assert {"gcs_server", "raylet"} <= names, found
    # Ray Serve 2.60 opens each replica's inter-deployment gRPC server on [::]:0 whatever the node's address (token
    # authenticated); everything else of the cluster must listen on loopback only
    open_ = [(name, str(address), port) for name, address, port in found
             if not loopback(address) and not name.startswith("ray::ServeRepli")]
    assert open_ == [], open_


def test_a_made_up_stream_id_is_404_under_ray_not_a_dead_replicas_503(ray_cli):
    base, _, _ = ray_cli
    with httpx.Client(base_url=base, timeout=120.0) as http:
        real = http.post("/v1/streams", json={"source": "push"})
        assert real.status_code == 201, real.text
        sid = real.json()["id"]
        prefix = sid.partition("-")[0]
        tampered = sid[:-1] + ("0" if sid[-1] != "0" else "1")
        for fake in ("r0.abcdef-123456", "r0.abcdef-s0123456789ab", "r1.000000-sdeadbeefdeadbeef",
                     f"{prefix}-s0123456789ab", tampered, "r9.abcdef-123456", "garbage"):
            r = http.get(f"/v1/streams/{fake}")
            assert r.status_code == 404, (fake, r.text)
            assert "died" not in r.text and "resumed" not in r.text, r.text
        assert http.get(f"/v1/streams/{sid}").status_code == 200
        assert http.delete(f"/v1/streams/{sid}").status_code == 200


def test_nested_session_folders_are_refused_across_replicas(ray_cli):
    base, _, allow = ray_cli
    outer, inner = allow / "site", allow / "site" / "cam1"
    with httpx.Client(base_url=base, timeout=120.0) as http:
        # the first stream goes to the least loaded replica; the next open is tried on the other one first
        a = http.post("/v1/streams", json={"source": "push", "session_dir": str(outer)})
        assert a.status_code == 201, a.text
        refused(http, {"source": "push", "session_dir": str(inner)}, 409, f"inside {outer}")
        other = http.post("/v1/streams", json={"source": "push"})  # the replica that refused: not a's
        assert other.status_code == 201 and other.json()["id"][:3] != a.json()["id"][:3], (a.text, other.text)
        http.delete(f"/v1/streams/{a.json()['id']}")

        b = http.post("/v1/streams", json={"source": "push", "session_dir": str(inner)})
        assert b.status_code == 201, b.text
        refused(http, {"session_dir": str(outer), "resume": True}, 409, f"holds {inner}")
        for sid in (b.json()["id"], other.json()["id"]):
            http.delete(f"/v1/streams/{sid}")
