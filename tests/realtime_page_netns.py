"""The `/realtime` page in headless Chromium, calling `streamvid serve` over WebRTC: run by test_realtime_page.py
inside a network namespace of its own (`unshare -n`), since Chromium does not use the loopback interface for
WebRTC: the namespace holds `lo` and an interface of its own with a private address (dummy, or veth where the kernel
has no dummy driver), nothing leaves it, and everything started here ends with this process.

    unshare -n python tests/realtime_page_netns.py OUT.json WORKDIR

The camera is a Y4M of one frame of shapes_7 (a blue square, an orange circle, a purple star), the microphone a
WAV of espeak-ng asking "how many shapes are on screen" after 16 s of silence; the server runs the bundled model with no API key
(the page makes its own client secret). The page is clicked as a user would: Connect, a typed question, a watch
("a blue square"), Hang up.
OUT.json gets what the page and the server saw; the test checks it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import wave
from pathlib import Path

import httpx
import numpy as np
from PIL import Image
from serve_helpers import running, spoken, wait_until

ADDRESS = "10.201.90.1/32"
STILL_T_S = 10.0
WAIT_S = 120.0
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--use-fake-ui-for-media-stream",
         "--use-fake-device-for-media-stream", "--autoplay-policy=no-user-gesture-required",
         "--disable-features=WebRtcHideLocalIpsWithMdns"]


def network() -> None:
    """`lo` up, and ADDRESS on an interface of its own: a dummy one, or (a kernel without the dummy driver) one end
    of a veth pair whose ends are both in this namespace."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    if subprocess.run(["ip", "link", "add", "sv0", "type", "dummy"], capture_output=True).returncode != 0:
        subprocess.run(["ip", "link", "add", "sv0", "type", "veth", "peer", "name", "sv1"], check=True)
        subprocess.run(["ip", "link", "set", "sv1", "up"], check=True)
    subprocess.run(["ip", "addr", "add", ADDRESS, "dev", "sv0"], check=True)
    subprocess.run(["ip", "link", "set", "sv0", "up"], check=True)


def y4m(image: np.ndarray, path: Path) -> None:
    """One frame as YUV4MPEG2 4:2:0 (Chromium's fake camera loops it)."""
    h, w = (image.shape[0] // 2) * 2, (image.shape[1] // 2) * 2
    ycc = np.asarray(Image.fromarray(image[:h, :w]).convert("YCbCr"))
    planes = [ycc[..., 0], ycc[::2, ::2, 1], ycc[::2, ::2, 2]]
    with open(path, "wb") as f:
        f.write(f"YUV4MPEG2 W{w} H{h} F30:1 Ip A1:1 C420jpeg\n".encode())
        f.write(b"FRAME\n" + b"".join(p.tobytes() for p in planes))


def wav(pcm: np.ndarray, rate: int, path: Path) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def main(out: Path, work: Path) -> None:
    from playwright.sync_api import sync_playwright

    from streamvid.assets import demo_clip
    from streamvid.config import EngineConfig
    from streamvid.engine.engine import Engine
    from streamvid.media.file_source import FileSource
    from streamvid.serve import ServeOptions, build_app

    network()
    source = FileSource(demo_clip("shapes_7"), fps=2.0)
    still = next(f.image for f in iter(source.read, None) if f.t_s >= STILL_T_S)
    y4m(still, work / "camera.y4m")
    question = spoken(work, "how many shapes are on screen", 48000)
    wav(np.concatenate([np.zeros(16 * 48000, "<i2"), question, np.zeros(30 * 48000, "<i2")]), 48000,
        work / "microphone.wav")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    engine = Engine(EngineConfig.from_settings(frame_px=112, max_new_tokens=12))
    seen: dict = {}
    try:
        app = build_app(engine, ServeOptions(model_id="streamvid-tiny", max_new_tokens=12))
        with running(app) as url, httpx.Client(base_url=url, timeout=60) as http, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=[
                *FLAGS, f"--use-file-for-fake-video-capture={work / 'camera.y4m'}",
                f"--use-file-for-fake-audio-capture={work / 'microphone.wav'}%noloop"])
            try:
                context = browser.new_context()
                context.grant_permissions(["camera", "microphone"], origin=url)
                page = context.new_page()
                page.set_default_timeout(WAIT_S * 1000)
                page.goto(f"{url}/realtime")
                page.click("#sv-connect")
                page.wait_for_function("() => window.streamvid.streamId")
                sid = seen["stream_id"] = page.evaluate("() => window.streamvid.streamId")
                wait_until(lambda: http.get(f"/v1/streams/{sid}").json()["blocks_encoded"] >= 2, WAIT_S,
                           "the camera's frames in the window")
                t0, n0 = time.monotonic(), http.get(f"/v1/streams/{sid}").json()["frames_in"]
                page.fill("#sv-question", "What shape is blue?")
                page.click("#sv-ask")

                def done(n: int) -> bool:
                    return page.evaluate("(n) => window.streamvid.events.filter(e => e.type === 'response.done')"
                                         ".length >= n", n)

                wait_until(lambda: done(1), WAIT_S, "the typed question's answer")
                wait_until(lambda: done(2), WAIT_S, "the spoken question's answer")
                page.wait_for_function("() => window.streamvid.events.filter(e => e.type === "
                                       "'output_audio_buffer.stopped').length >= 2")
                # a watch: its alert comes as a server-initiated response, listed with its picture
                page.fill("#sv-condition", "a blue square")
                page.click("#sv-watch")
                page.wait_for_function("() => [...document.querySelectorAll('#sv-alerts img')].some("
                                       "i => i.complete && i.naturalWidth > 0)")
                seen["alerts"] = page.inner_text("#sv-alerts")
                seen["alert_picture"] = page.evaluate("() => document.querySelector('#sv-alerts img').src")
                status = http.get(f"/v1/streams/{sid}").json()
                seen["fps"], seen["frames_per_s"] = status["fps"], (status["frames_in"] - n0) / (time.monotonic() - t0)
                seen["events"] = page.evaluate("() => window.streamvid.events")
                seen["log"] = page.inner_text("#sv-log")
                seen["audio"] = page.evaluate("""async () => {
                    const stats = await window.streamvid.pc.getStats();
                    for (const s of stats.values())
                        if (s.type === 'inbound-rtp' && s.kind === 'audio')
                            return {energy: s.totalAudioEnergy, samples: s.totalSamplesReceived};
                    return null; }""")
                page.click("#sv-hangup")
                wait_until(lambda: http.get(f"/v1/streams/{sid}").status_code == 404, 60, "the call's stream to close")
                seen["closed"] = True
                seen["status_line"] = page.inner_text("#sv-status")
            finally:
                browser.close()
    finally:
        engine.close()
        out.write_text(json.dumps(seen))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
