"""`streamvid serve --ui`: the web page is one more client of the server's hub, so every serve flag holds for it as
for the HTTP clients (--max-frame-pixels, --allow-private-urls, --max-outage-s, --stream-idle-timeout-s) and the
page keeps its 200 MB upload limit. Real clients (gradio_client, httpx) against a real server on loopback; a plain
HTTP server on loopback serves a bundled clip as a URL source; the tiny random checkpoint."""

from __future__ import annotations

import functools
import http.server
import threading

import httpx
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from PIL import Image
from serve_helpers import config, engine, running, wait_until  # noqa: F401 - fixtures

from streamvid.assets import demo_clip
from streamvid.serve import ServeOptions, build_app


@pytest.fixture()
def clip_url():
    """A bundled clip served over HTTP on 127.0.0.1 (a private address)."""
    clip = demo_clip("shapes_7")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(clip.parent))
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=web.serve_forever, name="test-http", daemon=True).start()
    yield f"http://127.0.0.1:{web.server_port}/{clip.name}"
    web.shutdown()
    web.server_close()


def test_the_page_obeys_the_serve_flags(engine, clip_url, tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)  # the page caps PIL process-wide
    options = ServeOptions(model_id="tiny", max_frame_pixels=1000, allow_private_urls=True, max_outage_s=7.0,
                           stream_idle_timeout_s=1.0)
    app = build_app(engine, options, ui=True)
    hub = app.state.hub
    small, big = tmp_path / "small.png", tmp_path / "big.png"
    Image.new("RGB", (30, 30), (0, 0, 255)).save(small)  # 900 pixels
    Image.new("RGB", (40, 40), (0, 0, 255)).save(big)  # 1,600 pixels
    with running(app) as url:
        assert httpx.get(f"{url}/config", timeout=60).json()["max_file_size"] == 200 * 2**20
        client = Client(url, verbose=False)
        assert client.predict("push", api_name="/start")["source"] == "pushed frames"
        (stream,) = hub.list()  # the page's session plays a stream of the server's hub
        assert stream["source"] == "push"
        assert client.predict(handle_file(str(small)), 0.0, api_name="/push_frame")["event"] == "frame"
        # (the page caps the web framework's own decoding too: PIL may refuse it before its size is known)
        with pytest.raises(AppError, match=r"^the image is (40x40 = 1,600 pixels, )?above the 1,000-pixel cap "
                                           r"\(--max-frame-pixels\)$"):
            client.predict(handle_file(str(big)), 1.0, api_name="/push_frame")
        wait_until(lambda: not hub.list(), what="the idle page stream to be closed (--stream-idle-timeout-s)")
        assert client.predict(api_name="/status")["running"] is False
        assert client.predict(clip_url, None, api_name="/start")["event"] == "started"  # a loopback URL
        (stream,) = hub.list()
        wait_until(lambda: hub.get(stream["id"], touch=False).state() != "opening", what="the URL to open")
        assert hub.get(stream["id"]).tap.max_outage_s == 7.0
        client.predict(api_name="/stop")


def test_the_page_refuses_private_urls_by_default(engine, clip_url):
    app = build_app(engine, ServeOptions(model_id="tiny"), ui=True)
    with running(app) as url:
        with pytest.raises(AppError, match=r"^127.0.0.1 is a loopback address: URLs may only reach public hosts"):
            Client(url, verbose=False).predict(clip_url, None, api_name="/start")
        assert app.state.hub.list() == []
