"""The `/realtime` page (the reference client) in headless Chromium over WebRTC: a fake camera (a still of
shapes_7: a blue square, an orange circle, a purple star) and a fake microphone (espeak-ng asking "how many shapes
are on screen"); the page makes a client secret, calls `POST /v1/realtime/calls`, and is asked a typed question; both
answers are checked against the clip's ground truth, their speech must arrive on the page's audio track, a watch for
"a blue square" must be listed as an alert with the server's picture, and Hang up must end the stream. It runs in a network namespace of its own (realtime_page_netns.py: Chromium does not use the
loopback interface for WebRTC), which needs root and `unshare`; skipped otherwise, and without Chromium, unless
STREAMVID_REQUIRE_BROWSER=1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from streamvid.eval.wer import words

HERE = Path(__file__).parent


def _can_run() -> str | None:
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        return "chromium is not installed"
    if shutil.which("unshare") is None or shutil.which("ip") is None or os.geteuid() != 0:
        return "a network namespace needs root, unshare and ip"
    return None


def test_the_realtime_page_calls_over_webrtc_and_is_answered_aloud(tmp_path):
    why = _can_run()
    if why is not None:
        if os.environ.get("STREAMVID_REQUIRE_BROWSER") == "1":
            raise RuntimeError(f"STREAMVID_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    out = tmp_path / "seen.json"
    run = subprocess.run(["unshare", "-n", sys.executable, str(HERE / "realtime_page_netns.py"), str(out),
                          str(tmp_path)], cwd=HERE, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH",
                                                                                                   "")])})
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(out.read_text())
    events = seen["events"]
    done = [e["response"] for e in events if e["type"] == "response.done"
            and (e["response"].get("metadata") or {}).get("streamvid_kind") is None]  # (answers, not alerts)
    alerts = [e["response"] for e in events if e["type"] == "response.done"
              and (e["response"].get("metadata") or {}).get("streamvid_kind") == "alert"]
    assert alerts and alerts[0]["metadata"]["condition"] == "a blue square", alerts
    assert "a blue square" in seen["alerts"] and "/snapshot.jpg" in seen["alert_picture"], seen["alert_picture"]
    said = [" ".join(c.get("transcript") or c.get("text") or "" for c in r["output"][0]["content"]) for r in done]
    assert [r["status"] for r in done[:2]] == ["completed", "completed"], said
    assert "square" in words(said[0]), said  # the blue shape is a square
    heard = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert {"many", "shapes"} <= set(words(heard["transcript"])), heard
    assert "3" in said[1].split(), said  # three shapes on screen
    assert seen["audio"] and seen["audio"]["energy"] > 0.01, seen["audio"]  # the answers' speech was played
    assert 0 < seen["frames_per_s"] <= seen["fps"] * 1.5, seen  # the camera at the stream's fps, not its own 30
    assert seen["closed"] and "not connected" in seen["status_line"]
    assert "What shape is blue?" in seen["log"] and said[0] in seen["log"]
