"""`streamvid run --session DIR`: a second run on another video answers about the first one; Ctrl-C still prints
the final stats line and saves; a damaged session is one clear line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ctrl_c_as_at_a_terminal
from test_cli import run, world_mp4

from streamvid.assistant import session_store


def _lines(p: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in p.stdout.splitlines()]


def _muted_mp4() -> Path:
    return world_mp4().parent / "muted_b.mp4"


LONG_S, LONG_FPS = 600, 2


@pytest.fixture(scope="module")
def long_mp4(tmp_path_factory) -> Path:
    """A 10-minute clip (2 fps, 64x64): a live run of it interrupted after its first answer is still mid-stream,
    however slowly a loaded machine gets to that answer."""
    import av
    import numpy as np

    path = tmp_path_factory.mktemp("long") / "long.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=LONG_FPS)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        for i in range(LONG_S * LONG_FPS):
            image = np.full((64, 64, 3), (7 * i) % 256, np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())
    return path


def test_a_second_run_answers_about_the_first_video(tiny_model_dir, tmp_path):
    session = tmp_path / "s"
    common = ("--model", str(tiny_model_dir), "--fps", "1", "--max-new-tokens", "4", "--window-tokens", "60",
              "--session", str(session))
    first = run("run", str(world_mp4()), *common)
    assert first.returncode == 0, first.stderr
    stats = _lines(first)[-1]
    assert stats["type"] == "stats" and stats["session_saved"]["blocks_in_memory"] > 0 and stats["autosaves"] == 0
    end_s = stats["session_saved"]["stream_t_s"]
    assert 29.0 <= end_s <= 32.0

    second = run("run", str(_muted_mp4()), *common, "--ask", "0:What was on screen at 00:02?",
                 "--ask", "3:What is on screen?")
    assert second.returncode == 0, second.stderr
    lines = _lines(second)
    assert lines[0] == {"type": "status", "event": "session_resumed", "t_s": end_s, "session": str(session),
                        "blocks_in_memory": lines[0]["blocks_in_memory"]}
    back, now = [x for x in lines if x["type"] == "answer"]
    assert (back["input_t_s"], back["t_s"]) == (0.0, end_s) and (now["input_t_s"], now["t_s"]) == (3.0, end_s + 3)
    assert back["retrieved_blocks"] and all(b <= 6.0 for _, b in back["evidence_t_s"]), \
        "answered from the first video's blocks at 00:02"
    # a question about now: the window alone, which reaches the second video's frame at 3 s
    assert now["retrieved_blocks"] == [] and len(now["evidence_t_s"]) == 1 and now["evidence_t_s"][0][1] >= end_s + 3
    assert lines[-1]["session_saved"]["stream_t_s"] > end_s + 4


def test_run_and_served_streams_hold_session_folders_with_one_lock(tiny_model_dir, tmp_path, capsys):
    """`streamvid run --session` takes its folder as the hub does (hub/session_folders.py): a folder a served stream
    holds is refused by a run in one line, before the model loads, and a run's folder by the hub."""
    from streamvid.cli.main import main
    from streamvid.errors import Conflict
    from streamvid.hub.session_folders import SessionFolders, StreamSession

    folders = SessionFolders((tmp_path,), None)
    served = folders.claim(folders.resolve(str(tmp_path / "cam")), resume=False)
    try:
        code = main(["run", str(world_mp4()), "--model", str(tiny_model_dir), "--session", str(tmp_path / "cam")])
        out, err = capsys.readouterr()
        assert code == 2 and out == ""
        assert err == (f"streamvid run: error: session {tmp_path / 'cam'} is in use by another streamvid process: "
                       f"wait for it to end or use another --session folder\n")
    finally:
        served.release()
    ran = StreamSession.take(tmp_path / "run")
    try:
        assert not ran.resume and ran.autosaves == 0
        with pytest.raises(Conflict, match="is in use by another stream"):
            folders.claim(folders.resolve(str(tmp_path / "run")), resume=False)
    finally:
        ran.release()
    folders.claim(folders.resolve(str(tmp_path / "run")), resume=False).release()  # free once the run let go


def test_damaged_session_is_one_line_and_debug_shows_the_traceback(tiny_model_dir, tmp_path):
    session = tmp_path / "s"
    session.mkdir()
    (session / "session.json").write_text("garbage")
    p = run("run", str(world_mp4()), "--model", str(tiny_model_dir), "--session", str(session))
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "is damaged" in p.stderr and "Traceback" not in p.stderr
    p = run("run", str(world_mp4()), "--model", str(tiny_model_dir), "--session", str(session), "--debug")
    assert p.returncode == 2 and "Traceback" in p.stderr and "is damaged" in p.stderr.splitlines()[-1]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_a_live_run_prints_the_stats_line_and_saves(tiny_model_dir, long_mp4, tmp_path, sig):
    session = tmp_path / "s"
    p = subprocess.Popen([sys.executable, "-m", "streamvid.cli", "run", str(long_mp4), "--realtime",
                          "--model", str(tiny_model_dir), "--fps", "2", "--max-new-tokens", "2",
                          "--window-tokens", "60", "--ask", "1:What is on screen?", "--session", str(session)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=ctrl_c_as_at_a_terminal)
    try:
        first = json.loads(p.stdout.readline() or "null")
        assert first is not None and first["type"] == "answer", p.stderr.read()
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    stats = json.loads(out.splitlines()[-1])
    assert p.returncode == 130 and err.strip().splitlines()[-1] == f"streamvid run: interrupted; session saved in {session}"
    # interrupted mid-stream: the clip (10 minutes at the clock's pace) was not over
    assert stats["type"] == "stats" and stats["interrupted"] is True and 0 < stats["frames_in"] < LONG_S * LONG_FPS
    assert stats["session_saved"]["stream_t_s"] > 1.0
    assert (session / "session.json").is_file()


def test_autosave_keeps_a_killed_live_run(tiny_model_dir, adapter, tmp_path):
    from streamvid.assistant.assistant import StreamingAssistant

    session = tmp_path / "s"
    p = subprocess.Popen([sys.executable, "-m", "streamvid.cli", "run", str(world_mp4()), "--realtime",
                          "--model", str(tiny_model_dir), "--fps", "2", "--window-tokens", "60",
                          "--session", str(session), "--autosave-s", "0.5"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 120
        saved_t_s = 0.0
        while saved_t_s < 2.0 and time.monotonic() < deadline and p.poll() is None:
            if (session / "session.json").is_file():
                saved_t_s = session_store.read_meta(session)["stream_t_s"]
            time.sleep(0.1)
        assert saved_t_s >= 2.0, "autosaves came while the run was going"
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
    finally:
        p.kill()
        p.stderr.close()
    resumed = StreamingAssistant.resume(session, adapter=adapter)
    assert resumed.stream_t_s >= saved_t_s and resumed.ingest.next_block_id > 0
    resumed.stop()
