"""The hub's source policy (the web page's and the HTTP API's) on the network and on frame sizes: URLs that reach
loopback or private addresses (directly, through an HLS playlist or through a redirect) are refused, videos above the
pixel cap are refused before decoding, and the demo's flags reach the hub. A real HTTP server on 127.0.0.1 serves an HLS stream, an mp4 and a
redirect; "camera.test" stands for a public host name through the policy's `check_address` hook."""

from __future__ import annotations

import functools
import socket
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import av
import numpy as np
import pytest

from streamvid.hub.options import HubOptions
from streamvid.hub.policy import SourcePolicy, SourceRefused
from streamvid.media.net_policy import AddressRefused, public_address

PX, FPS, SECONDS = 32, 4, 3
LOOPBACK = "127.0.0.1 is a loopback address: URLs may only reach public hosts (--allow-private-urls)"


def write_clip(path: Path, px: int = PX, fmt: str | None = None, options: dict | None = None) -> Path:
    with av.open(str(path), "w", format=fmt, options=options or {}) as c:
        s = c.add_stream("libx264", rate=FPS)
        s.width = s.height = px
        s.pix_fmt, s.options = "yuv420p", {"g": str(FPS)}
        for i in range(FPS * SECONDS):
            c.mux(s.encode(av.VideoFrame.from_ndarray(np.full((px, px, 3), 20 * i, np.uint8), format="rgb24")))
        c.mux(s.encode())
    return path


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> Path:
    """index.m3u8 with relative segments index0.ts ... (HLS, 1 s each) and clip.mp4 (its index at the end)."""
    d = tmp_path_factory.mktemp("media")
    write_clip(d / "index.m3u8", fmt="hls", options={"hls_time": "1", "hls_list_size": "0",
                                                      "hls_playlist_type": "vod"})
    write_clip(d / "clip.mp4")
    return d


class Server:
    """Files of `media` over HTTP on 127.0.0.1 (no Range support, like many simple servers), plus /redirect (a 302
    to http://127.0.0.1:PORT/index.m3u8), /to-file (a 302 to file:///etc/passwd) and /rebind.m3u8 (index.m3u8 with
    absolute http://127.0.0.1:PORT/ segment URLs). `paths` lists every request."""

    def __init__(self, media: Path):
        self.paths: list[str] = []
        outer = self

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self):
                outer.paths.append(self.path)
                loopback = f"http://127.0.0.1:{outer.port}/"
                if self.path in ("/redirect", "/to-file"):
                    self.send_response(302)
                    self.send_header("Location", loopback + "index.m3u8" if self.path == "/redirect"
                                     else "file:///etc/passwd")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/rebind.m3u8":
                    body = (media / "index.m3u8").read_text().replace("index", loopback + "index").encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    super().do_GET()

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(media)))
        self._server.daemon_threads = True
        self.port = self._server.server_port
        threading.Thread(target=self._server.serve_forever, name="test-http", daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def server(media):
    s = Server(media)
    yield s
    s.close()


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def camera_test_is_public(host: str, port: int) -> str:
    """The test's public host: camera.test reaches the test server; every other host is checked as usual."""
    return "127.0.0.1" if host == "camera.test" else public_address(host, port)


def read_frames(source, n: int) -> list:
    frames, deadline = [], time.monotonic() + 60
    while len(frames) < n and time.monotonic() < deadline:
        try:
            frame = source.read(timeout_s=1.0)
        except TimeoutError:
            continue
        if frame is None:
            break
        frames.append(frame)
    return frames


def refusal(policy: SourcePolicy, url: str) -> str:
    with pytest.raises(SourceRefused) as refused:
        policy.open(policy.resolve(url, uploads=True), fps=FPS, size=16)
    return str(refused.value)


# ---- addresses ---------------------------------------------------------------------------------------------------
def test_loopback_urls_are_refused_with_one_message_whether_or_not_anything_listens(server, closed_port):
    policy = SourcePolicy(clips={})
    urls = [f"{scheme}://127.0.0.1:{port}/index.m3u8" for port in (server.port, closed_port)
            for scheme in ("http", "https", "rtsp", "rtmp")]
    assert {refusal(policy, url) for url in urls} == {LOOPBACK}
    assert refusal(policy, f"http://localhost:{server.port}/index.m3u8").startswith("localhost (")
    assert server.paths == [], "nothing was asked of the server"


@pytest.mark.parametrize("address, kind", [
    ("10.1.2.3", "private"), ("172.16.0.9", "private"), ("192.168.1.20", "private"),
    ("169.254.169.254", "link-local"), ("224.0.0.251", "multicast"), ("0.0.0.0", "unspecified"),
    ("240.0.0.1", "reserved"), ("100.64.0.1", "non-global"), ("::1", "loopback"), ("fe80::1", "link-local"),
    ("fd00::1", "private"), ("::ffff:127.0.0.1", "loopback"), ("2002:a00:1::1", "private"),
])
def test_non_public_addresses_are_refused_by_kind(address, kind):
    article = "an" if kind == "unspecified" else "a"
    with pytest.raises(AddressRefused, match=f"^{address} is {article} {kind} address: URLs may only reach public"):
        public_address(address, 80)  # a literal: resolving it asks no name server


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700:4700::1111"])
def test_public_addresses_pass(address):
    assert public_address(address, 443) == address


def test_a_public_playlist_that_names_a_loopback_segment_is_refused(server):
    policy = SourcePolicy(clips={}, check_address=camera_test_is_public)
    assert refusal(policy, f"http://camera.test:{server.port}/rebind.m3u8") == LOOPBACK
    assert server.paths == ["/rebind.m3u8"], "the segment at 127.0.0.1 was never requested"
    source = policy.open(policy.resolve(f"http://camera.test:{server.port}/index.m3u8"), fps=FPS, size=16)
    frames = read_frames(source, 4)
    source.close()
    assert len(frames) == 4 and frames[0].image.shape == (16, 16, 3)
    assert "/index0.ts" in server.paths, "segments on the playlist's own (public) host are fetched"


def test_a_redirect_to_a_loopback_address_is_refused(server):
    policy = SourcePolicy(clips={}, check_address=camera_test_is_public)
    assert refusal(policy, f"http://camera.test:{server.port}/redirect") == LOOPBACK
    assert server.paths == ["/redirect"]
    anything = SourcePolicy(clips={}, check_address=lambda host, port: "127.0.0.1")  # every host counts as public
    to_file = f"http://camera.test:{server.port}/to-file"
    assert refusal(anything, to_file) == "a redirect to a 'file' URL is not followed"
    source = anything.open(anything.resolve(f"http://camera.test:{server.port}/redirect"), fps=FPS, size=16)
    assert len(read_frames(source, 2)) == 2
    source.close()


def test_allow_private_urls_opens_loopback_urls_playlists_and_redirects(server):
    policy = SourcePolicy(clips={}, allow_private_urls=True)
    for path in ("index.m3u8", "rebind.m3u8", "redirect"):
        source = policy.open(policy.resolve(f"http://127.0.0.1:{server.port}/{path}"), fps=FPS, size=16)
        assert len(read_frames(source, 2)) == 2
        source.close()


def test_an_mp4_over_http_is_read_and_seeked_through_the_checked_reader(server):
    policy = SourcePolicy(clips={}, check_address=camera_test_is_public)
    source = policy.open(policy.resolve(f"http://camera.test:{server.port}/clip.mp4"), fps=FPS, size=16)
    assert source.finite
    frames = read_frames(source, 100)
    source.close()
    assert frames and frames[-1].index == FPS * SECONDS - 1, "read to the end (the index is at the end of the file)"
    assert server.paths.count("/clip.mp4") >= 2, "the reader seeked back with a second request"


# ---- frame sizes -------------------------------------------------------------------------------------------------
def test_videos_above_the_frame_pixel_cap_are_refused_before_decoding(server, media, tmp_path):
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    write_clip(uploads / "mine.mp4")
    policy = SourcePolicy(clips={"demo": media / "clip.mp4"}, upload_dirs=(uploads,), max_frame_pixels=1000,
                          check_address=camera_test_is_public)
    message = "video frames are 32x32 = 1024 pixels, above the 1000-pixel cap (--max-frame-pixels)"
    assert refusal(policy, str(uploads / "mine.mp4")) == f"mine.mp4: {message}"
    assert refusal(policy, "demo") == f"demo: {message}"
    assert refusal(policy, f"http://camera.test:{server.port}/index.m3u8") == message
    assert SourcePolicy(clips={}).max_frame_pixels == HubOptions().max_frame_pixels == 4096 * 4096
    at_cap = SourcePolicy(clips={}, upload_dirs=(uploads,), max_frame_pixels=1024)
    source = at_cap.open(policy.resolve(str(uploads / "mine.mp4"), uploads=True), 4.0)
    assert read_frames(source, 1)[0].image.shape == (PX, PX, 3)  # at the cap: allowed
    source.close()


@pytest.mark.parametrize("field, value", [("max_frame_pixels", 0), ("max_frame_pixels", -5),
                                          ("max_frame_pixels", 1.5), ("max_frame_pixels", True),
                                          ("max_outage_s", 0), ("max_outage_s", -1.0)])
def test_policy_limits_are_validated(field, value):
    with pytest.raises(ValueError, match=f"^{field} must be (a )?positive"):
        SourcePolicy(clips={}, **{field: value})


# ---- flags -------------------------------------------------------------------------------------------------------
def test_the_demo_flags_reach_the_hub(monkeypatch, capsys):
    from PIL import Image
    from streamvid_app.manager import SessionManager

    import streamvid.cli.engine_flags
    import streamvid.cli.main

    seen = {}

    def standalone(config, options, **kwargs):
        seen.update(options=options, **kwargs)
        raise ValueError("hub made")

    monkeypatch.setattr(streamvid.cli.engine_flags, "check_model", lambda model: None)  # no model: the hub stops it
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)  # demo caps PIL process-wide: restored
    monkeypatch.setattr(SessionManager, "standalone", standalone)
    monkeypatch.delenv("STREAMVID_AUTH", raising=False)
    assert streamvid.cli.main.main(["demo", "--host", "127.0.0.1"]) == 2
    assert seen["options"] == HubOptions(stream_idle_timeout_s=600.0) and seen["max_upload_mb"] == 200.0
    assert streamvid.cli.main.main(["demo", "--host", "127.0.0.1", "--max-frame-pixels", "1000", "--allow-private-urls",
                               "--max-outage-s", "60", "--idle-timeout-s", "30", "--max-upload-mb", "5"]) == 2
    assert seen["options"] == HubOptions(max_frame_pixels=1000, allow_private_urls=True, max_outage_s=60.0,
                                         stream_idle_timeout_s=30.0) and seen["max_upload_mb"] == 5.0
    assert "hub made" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--stream-idle-timeout-s", "--idle-timeout-s"])
def test_the_demo_idle_timeout_takes_serves_name_and_keeps_the_old_one(flag, monkeypatch, capsys):
    from PIL import Image
    from streamvid_app.manager import SessionManager

    import streamvid.cli.engine_flags
    import streamvid.cli.main

    seen = {}

    def standalone(config, options, **kwargs):
        seen.update(options=options)
        raise ValueError("hub made")

    monkeypatch.setattr(streamvid.cli.engine_flags, "check_model", lambda model: None)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)
    monkeypatch.setattr(SessionManager, "standalone", standalone)
    monkeypatch.delenv("STREAMVID_AUTH", raising=False)
    assert streamvid.cli.main.main(["demo", "--host", "127.0.0.1", flag, "45"]) == 2
    assert seen.pop("options").stream_idle_timeout_s == 45.0 and "hub made" in capsys.readouterr().err
    assert streamvid.cli.main.main(["demo", "--host", "127.0.0.1", flag, "0"]) == 2
    assert seen.pop("options").stream_idle_timeout_s is None and "hub made" in capsys.readouterr().err  # 0: never
    assert streamvid.cli.main.main(["demo", "--host", "127.0.0.1", flag, "-1"]) == 2
    assert "options" not in seen and capsys.readouterr().err == (
        "streamvid demo: error: --stream-idle-timeout-s must be a number of seconds >= 0 (0: never), got -1.0\n")
