"""`streamvid demo` in a real browser: Debian Chromium driven by Playwright, with a fake webcam that plays a
ShapesWorld clip (a YUV4MPEG2 file written here). Click the webcam, frames reach the engine, ask a question, a
timestamped answer appears; a screenshot is saved.

Needs `apt-get install chromium` and `pip install playwright` (never `playwright install`: the system Chromium is
used). Skipped when either is missing, unless STREAMVID_REQUIRE_BROWSER=1 (set by .ci/run), which makes a missing
browser a failure. The page's layout, and the README's screenshot, are tests/test_app_page.py's.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from streamvid.assets import DEMO_VIDEOS
from streamvid.config import EngineConfig
from streamvid.media.file_source import FileSource
from streamvid_app.manager import SessionManager

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]
TIMEOUT_MS = 90_000


def _chromium() -> str:
    path = os.environ.get("STREAMVID_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install playwright)")
    if path is None:
        missing.append("chromium (apt-get install -y chromium)")
    if missing:
        if os.environ.get("STREAMVID_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser test required but missing: {', '.join(missing)}")
        pytest.skip(f"missing {', '.join(missing)}")
    return path


def wait_until(condition, timeout_s: float = 90.0, what: str = "condition") -> None:
    tick = threading.Event()
    for _ in range(int(timeout_s / 0.1)):
        if condition():
            return
        tick.wait(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def write_y4m(path: Path, clip: Path, seconds: float, scale: int = 4) -> Path:
    """The clip's 2-fps frames as an uncompressed YUV4MPEG2 file (4:2:0, full range), upscaled `scale` times."""
    source = FileSource(clip, fps=2.0)
    with open(path, "wb") as f:
        frame = source.read()
        h, w = frame.image.shape[0] * scale, frame.image.shape[1] * scale
        f.write(f"YUV4MPEG2 W{w} H{h} F2:1 Ip A1:1 C420jpeg\n".encode())
        while frame is not None and frame.t_s < seconds:
            rgb = frame.image.repeat(scale, 0).repeat(scale, 1).astype(np.float32)
            r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
            y = 0.299 * r + 0.587 * g + 0.114 * b
            u = -0.168736 * r - 0.331264 * g + 0.5 * b + 128
            v = 0.5 * r - 0.418688 * g - 0.081312 * b + 128
            f.write(b"FRAME\n")
            for plane, sub in ((y, 1), (u, 2), (v, 2)):
                plane = plane.reshape(h // sub, sub, w // sub, sub).mean(axis=(1, 3))
                f.write(np.clip(np.rint(plane), 0, 255).astype(np.uint8).tobytes())
            frame = source.read()
    return path


def _serve(voice=None):
    from streamvid_app.server import launch, upload_folder
    from streamvid_app.ui import build_demo

    manager = SessionManager.standalone(EngineConfig.from_settings(frame_px=112, max_new_tokens=12),
                                        upload_dirs=[upload_folder()], voice=voice)
    demo = launch(build_demo(manager), port=None, block=False)
    return demo, manager


@pytest.fixture
def served():
    demo, manager = _serve()
    yield demo.local_url.rstrip("/"), manager
    manager.shutdown()
    demo.close()


@pytest.fixture
def served_speaking():
    """The page with espeak-ng's voice: answers are spoken."""
    from streamvid_app.voice import page_voice

    if shutil.which("espeak-ng") is None:
        if os.environ.get("STREAMVID_REQUIRE_SPEECH") == "1":
            pytest.fail("STREAMVID_REQUIRE_SPEECH=1 but espeak-ng is not installed")
        pytest.skip("espeak-ng is not installed")
    demo, manager = _serve(page_voice("espeak-ng"))
    yield demo.local_url.rstrip("/"), manager
    manager.shutdown()
    demo.close()


def test_webcam_question_and_timestamped_answer_in_chromium(served, tmp_path):
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    url, manager = served
    cam = write_y4m(tmp_path / "shapes.y4m", DEMO_VIDEOS / "shapes_7" / "shapes_7.mp4", seconds=30.0)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium,
                                    args=[*CHROMIUM_FLAGS, f"--use-file-for-fake-video-capture={cam}"])
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.grant_permissions(["camera"], origin=url)
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(url + "/", wait_until="load")
            page.wait_for_selector("#sv-chat")

            page.get_by_role("tab", name="Webcam").click()
            page.locator("#sv-webcam").get_by_text("Click to Access Webcam").click()
            page.locator("#sv-webcam button.capture-button").click()  # start recording: frames stream out
            # the stats on the page move: at least three chunks' worth of frames reached the engine
            page.wait_for_function("""() => {
                const m = document.querySelector('#sv-stats')?.innerText.match(/frames in \\/ dropped\\s+(\\d+)/);
                return m && parseInt(m[1]) >= 6; }""")
            sessions = manager.sessions()
            assert len(sessions) == 1 and sessions[0].status()["source"] == "webcam"
            assert sessions[0].status()["blocks_encoded"] >= 3

            page.locator("#sv-question textarea").fill("How many shapes are on screen?")
            page.locator("#sv-ask").click()
            page.wait_for_function("""() => /\\[\\d\\d:\\d\\d\\] [^\\s…]+\\s*$/m.test(
                document.querySelector('#sv-chat')?.innerText || '')""")
            chat = page.locator("#sv-chat").inner_text()
            assert "How many shapes are on screen?" in chat
            stamped = re.findall(r"\[(\d\d):(\d\d)\] (\S+)", chat)
            answer = [o for o in sessions[0].poll(0)["outputs"] if o["type"] == "answer"][-1]
            assert stamped[-1][2] == answer["text"].split()[0]
            minutes, seconds = int(stamped[-1][0]), int(stamped[-1][1])
            assert minutes * 60 + seconds == int(answer["t_s"])  # the mark is the stream time of the answer

            page.locator("#sv-condition textarea").fill("a green shape")
            page.locator("#sv-watch").click()
            page.wait_for_function("() => document.querySelector('#sv-timeline') !== null")
            shot = tmp_path / "streamvid-demo.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000

            page.close()  # closing the tab ends its session: stream stopped, slot freed
            wait_until(lambda: len(manager) == 0 and sessions[0].status()["running"] is False,
                       what="the closed tab's session to end")
        finally:
            browser.close()


def test_microphone_captions_and_a_spoken_question_in_chromium(served_speaking, tmp_path):
    """The page's microphone (Chromium's fake capture playing a WAV) beside the webcam: what is said shows as a
    caption under the picture, and "assistant, ..." is asked as a question whose answer comes in the chat and is
    played aloud by the page's player."""
    chromium = _chromium()
    import subprocess
    import wave

    from playwright.sync_api import sync_playwright

    from streamvid.eval.wer import words

    espeak = shutil.which("espeak-ng")
    if espeak is None:
        if os.environ.get("STREAMVID_REQUIRE_SPEECH") == "1":
            pytest.fail("STREAMVID_REQUIRE_SPEECH=1 but espeak-ng is not installed")
        pytest.skip("espeak-ng is not installed")
    url, manager = served_speaking
    cam = write_y4m(tmp_path / "shapes.y4m", DEMO_VIDEOS / "shapes_7" / "shapes_7.mp4", seconds=60.0)
    parts = []
    # "hey assistant": espeak-ng's bare "assistant" is often heard as "that's it"; this one always is heard
    for text, voice in (("where are my keys", "en-us"), ("hey assistant, how many shapes are there?", "en-us")):
        subprocess.run([espeak, "-v", voice, "-w", str(tmp_path / "p.wav"), text], check=True, timeout=30)
        with wave.open(str(tmp_path / "p.wav")) as w:
            rate = w.getframerate()
            parts.append(np.frombuffer(w.readframes(w.getnframes()), "<i2"))
    silence = np.zeros(2 * rate, "<i2")
    mic = tmp_path / "mic.wav"
    with wave.open(str(mic), "wb") as w:  # 3 s of quiet (time to start both), then the two utterances
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(np.concatenate([silence, silence[:rate], parts[0], silence, parts[1], silence,
                                      silence]).tobytes())
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            *CHROMIUM_FLAGS, f"--use-file-for-fake-video-capture={cam}",
            f"--use-file-for-fake-audio-capture={mic}"])  # looped: a chunk a loaded machine drops comes again
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.grant_permissions(["camera", "microphone"], origin=url)
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(url + "/", wait_until="load")
            page.get_by_role("tab", name="Webcam").click()
            page.locator("#sv-webcam").get_by_text("Click to Access Webcam").click()
            page.locator("#sv-webcam button.capture-button").click()
            page.wait_for_function("""() => {
                const m = document.querySelector('#sv-stats')?.innerText.match(/frames in \\/ dropped\\s+(\\d+)/);
                return m && parseInt(m[1]) >= 2; }""")
            page.locator("#sv-mic").get_by_role("button", name=re.compile("record", re.I)).first.click()
            page.wait_for_function("() => /keys/i.test(document.querySelector('#sv-captions')?.innerText || '')")
            session = manager.sessions()[0]

            def spoken_answer():
                outputs = session.poll(0)["outputs"]
                ends = {o["t_end_s"] for o in outputs if o["type"] == "transcript"}
                return next((o for o in outputs if o["type"] == "answer" and o["t_s"] in ends), None)

            wait_until(spoken_answer, what=f"an answer to the spoken question; heard: {session.heard()}")
            answer, heard = spoken_answer(), session.heard()
            asked = next(h for h in heard if h["t_end_s"] == answer["t_s"])  # asked when the speaker stopped
            said = words(asked["text"])  # the recogniser may drop the unstressed "hey" when the VAD opens late
            assert any("keys" in h["text"].lower() for h in heard) and "assistant" in said[:2]
            assert words(answer["question"]) == said[said.index("assistant") + 1:]  # the words after the wake word
            page.wait_for_function("(q) => (document.querySelector('#sv-chat')?.innerText || '').includes(q)",
                                   arg=answer["question"])
            chat = page.locator("#sv-chat").inner_text()
            assert f"[{int(answer['t_s']) // 60:02d}:{int(answer['t_s']) % 60:02d}] " in chat
            assert page.locator("#sv-timeline .sv-heard").count() >= 1
            if re.search(r"[a-z]", answer["text"], re.I):  # an answer with words is played aloud
                page.wait_for_function("""() => { const a = document.querySelector('#sv-voice audio');
                    return a && a.currentTime > 0 && /answer-\\d+\\.wav/.test(a.currentSrc); }""")
                assert answer["id"] in [k for k, _ in session.voice.played]
        finally:
            browser.close()


def test_an_alert_shows_its_frame_and_plays_its_clip_in_chromium(served, tmp_path):
    """A demo clip with a watch that fires: the alert's thumbnail appears in the gallery and clicking it plays its
    clip in the page's video player (Chromium decodes the H.264 MP4: its duration is read back from the element)."""
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    url, manager = served
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(url + "/", wait_until="load")
            page.locator("#sv-condition textarea").fill("a red hexagon")
            page.locator("#sv-watch").click()
            page.locator("#sv-start-clip").click()
            page.wait_for_selector("#sv-alert-gallery img")
            session = manager.sessions()[0]
            alert = session.alerts()[0]
            wait_until(lambda: session.assistant.alert_media.clip(alert["alert_id"]) is not None,
                       what="the clip's seconds after the alert")
            page.locator("#sv-alert-gallery img").first.click()
            page.wait_for_function("""() => { const v = document.querySelector('#sv-alert-clip video');
                return v && v.readyState >= 1 && v.duration > 0; }""")
            duration = page.evaluate("() => document.querySelector('#sv-alert-clip video').duration")
            cfg = manager.config.alert_media
            assert abs(duration - (cfg.before_s + cfg.after_s)) <= 1.0, duration
        finally:
            browser.close()


def test_an_answer_is_spoken_on_the_page_in_chromium(served_speaking):
    """A demo clip, a typed question: its answer is played by the page's player (#sv-voice), a WAV of the answer's
    sentences that the browser decodes and plays (its time moves); "Stop speaking" stops it."""
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    url, manager = served_speaking
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(url + "/", wait_until="load")
            assert page.locator("#sv-speak input").is_checked()  # on by default with a voice installed
            page.locator("#sv-start-clip").click()
            page.wait_for_function("""() => {
                const m = document.querySelector('#sv-stats')?.innerText.match(/frames in \\/ dropped\\s+(\\d+)/);
                return m && parseInt(m[1]) >= 4; }""")
            session = manager.sessions()[0]
            page.locator("#sv-question textarea").fill("What colour is the star?")
            page.locator("#sv-ask").click()
            page.wait_for_function("""() => { const a = document.querySelector('#sv-voice audio');
                return a && a.currentTime > 0 && /answer-\\d+\\.wav/.test(a.currentSrc); }""")
            played = page.evaluate("""() => { const a = document.querySelector('#sv-voice audio');
                return {src: a.currentSrc, duration: a.duration, error: a.error && a.error.code}; }""")
            assert played["error"] is None and played["duration"] > 0.2, played
            answer = [o for o in session.poll(0)["outputs"] if o["type"] == "answer"][-1]
            assert [k for k, _ in session.voice.played][:1] == [answer["id"]]  # what plays is the answer's speech

            page.locator("#sv-question textarea").fill("How many shapes are on screen? Answer at length please.")
            page.locator("#sv-ask").click()
            page.locator("#sv-stop-speaking").click()
            page.wait_for_function("""() => { const a = document.querySelector('#sv-voice audio');
                return !a || a.paused || a.ended; }""")
        finally:
            browser.close()
