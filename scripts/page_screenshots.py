"""The web page of `streamvid demo` in headless Chromium, as the README shows it, checked against the clip's truth.

    python scripts/page_screenshots.py docs/streamvid-demo.png     # the README's picture (and the phone's beside it)

It serves the page on the bundled model, narrates, watches "a red hexagon" and "a green hexagon", plays the demo clip
shapes_7, asks "Which shape is green?" once the green hexagon's alert is in, and takes a screenshot at 1280x800 while
the clip still shows that hexagon, then one at 390x844. Every alert and the answer on the screenshot are checked
against the clip's ground truth (demo_videos/shapes_7/shapes_7.timeline.json): the alert's moment has its shape on
screen, the answer names the green shape on screen when it was asked, and the picture was taken while it still was;
anything else raises (for the README's picture, a run whose screenshot came after the hexagon left is tried again).
tests/test_app_page.py drives the page with `capture` and checks its layout.

Needs Debian's chromium and `pip install playwright` (the system Chromium is used; no `playwright install`).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

CLIP = "shapes_7"
CONDITIONS = {"a red hexagon": ("red", "hexagon"), "a green hexagon": ("green", "hexagon")}
QUESTION = ("Which shape is green?", "green")  # the question, and the colour whose shape answers it
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]
WAIT_MS = 120_000


@dataclass
class Capture:
    """What `capture` saw: the alerts and the answer on the screenshots, the stream time of the desktop one, and
    where the screenshots are."""

    alerts: list[dict]
    answer: dict
    shot_t_s: float
    shots: dict[str, Path] = field(default_factory=dict)
    still_shown: bool = False  # the picture still showed what the answer names when the screenshot was taken


def timeline(clip: str = CLIP) -> dict:
    from streamvid.assets import DEMO_VIDEOS

    return json.loads((DEMO_VIDEOS / clip / f"{clip}.timeline.json").read_text())


def on_screen(truth: dict, t_s: float) -> set[tuple[str, str]]:
    """(colour, shape) of every object the clip shows at `t_s`, from its ground truth."""
    seen = set()
    for track in truth["tracks"]:
        if track["enter_s"] <= t_s < track["leave_s"]:
            colour = [c for at, c in track["colours"] if at <= t_s][-1]
            seen.add((colour, track["shape"]))
    return seen


def serve(tts: str = "auto"):
    """The page on the bundled model (its own engine) and the best installed voice, not blocking: (demo, manager)."""
    from streamvid.config import EngineConfig
    from streamvid_app.manager import SessionManager
    from streamvid_app.server import launch, upload_folder
    from streamvid_app.ui import build_demo
    from streamvid_app.voice import page_voice

    voice = page_voice(tts, strict=False)

    manager = SessionManager.standalone(EngineConfig.from_settings(frame_px=112, max_new_tokens=12),
                                        upload_dirs=[upload_folder()], voice=voice)
    return launch(build_demo(manager), port=None, block=False), manager


def _wait(condition, timeout_s: float, what: str) -> None:
    tick = threading.Event()
    for _ in range(int(timeout_s / 0.1)):
        if condition():
            return
        tick.wait(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def capture(page, url: str, manager, out_dir: Path) -> Capture:
    """Drive the page (a Playwright page of a fresh context) through the scenario above; screenshots into
    `out_dir`. Raises when what the page shows disagrees with the clip's truth."""
    truth = timeline()
    out_dir.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size(dict(zip(("width", "height"), SIZES["desktop"])))
    page.set_default_timeout(WAIT_MS)
    page.goto(url + "/", wait_until="load")
    page.wait_for_selector("#sv-chat")
    page.locator("#sv-narrate input").check()
    _wait(lambda: len(manager.sessions()) == 1, 30, "the tab's session")
    session = manager.sessions()[0]
    for condition in CONDITIONS:
        page.locator("#sv-condition textarea").fill(condition)
        page.locator("#sv-watch").click()
        _wait(lambda c=condition: c in [t["condition"] for t in session.triggers()], 30, f"the watch {condition!r}")
        # the handler empties the box once it returns: a condition typed before then would be wiped
        page.wait_for_function("() => document.querySelector('#sv-condition textarea').value === ''")
    page.locator("#sv-start-clip").click()  # the first clip of the list
    _wait(lambda: session.status().get("source") == CLIP, 30, f"{CLIP} to play")
    _wait(lambda: len(session.alerts()) >= len(CONDITIONS), WAIT_MS / 1000, "an alert of each watch")
    alerts = session.alerts()
    for alert in alerts:
        colour, shape = CONDITIONS[alert["condition"]]
        if (colour, shape) not in on_screen(truth, alert["t_s"]):
            raise AssertionError(f"an alert for {alert['condition']!r} at {alert['t_s']} s, when the clip shows "
                                 f"{sorted(on_screen(truth, alert['t_s']))}")
    question, colour = QUESTION
    page.locator("#sv-question textarea").fill(question)
    page.locator("#sv-ask").click()

    def answered() -> list[dict]:
        return [o for o in session.poll(0)["outputs"] if o["type"] == "answer" and o.get("question") == question]

    _wait(answered, 60, "the answer")
    answer = answered()[-1]
    page.wait_for_function("(n) => document.querySelectorAll('#sv-alert-gallery img').length >= n",
                           arg=len(alerts), timeout=WAIT_MS)
    shapes = {s for c, s in on_screen(truth, answer["t_s"]) if c == colour}
    if not shapes or not set(re.findall(r"[a-z]+", answer["text"].lower())) & shapes:
        raise AssertionError(f"{answer['text']!r} at {answer['t_s']} s, when the {colour} shapes are {shapes}")
    stamp = f"[{int(answer['t_s']) // 60:02d}:{int(answer['t_s']) % 60:02d}] {answer['text']}"
    page.wait_for_function("(s) => (document.querySelector('#sv-chat')?.innerText || '').includes(s)", arg=stamp)
    page.wait_for_function("() => /last TTFT\\s+\\d+ ms/.test(document.querySelector('#sv-stats')?.innerText)")
    shots = {"desktop": out_dir / "streamvid-page-1280x800.png"}
    page.screenshot(path=str(shots["desktop"]), full_page=True)
    shot_t_s = session.latest_frame().t_s
    page.set_viewport_size(dict(zip(("width", "height"), SIZES["phone"])))
    page.wait_for_function("() => document.documentElement.clientWidth <= 390")
    shots["phone"] = out_dir / "streamvid-page-390x844.png"
    page.screenshot(path=str(shots["phone"]), full_page=True)
    still = (colour, next(iter(shapes))) in on_screen(truth, shot_t_s)
    return Capture(alerts, answer, shot_t_s, shots, still_shown=still)


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    if len(argv) != 1:
        print("usage: python scripts/page_screenshots.py OUT.png", file=sys.stderr)
        return 2
    out = Path(argv[0])
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("page_screenshots: chromium is not installed", file=sys.stderr)
        return 2
    for _ in range(3):
        demo, manager = serve()
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
                try:
                    got = capture(browser.new_context().new_page(), demo.local_url.rstrip("/"), manager,
                                  Path(tempfile.mkdtemp(prefix="streamvid-page-")))
                finally:
                    browser.close()
        finally:
            manager.shutdown()
            demo.close(verbose=False)
        if got.still_shown:
            break
    else:
        print(f"page_screenshots: the picture moved on before the screenshot ({got.shot_t_s} s), three times",
              file=sys.stderr)
        return 1
    shutil.copy(got.shots["desktop"], out)
    print(f"{out}: answer {got.answer['text']!r} at {got.answer['t_s']} s, {len(got.alerts)} alerts, "
          f"taken at {got.shot_t_s} s; phone: {got.shots['phone']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
