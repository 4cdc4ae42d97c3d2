"""The web app's input policy and sessions, without a browser or HTTP: a tiny random model shared by sessions."""

from __future__ import annotations

import threading
from pathlib import Path

import av
import numpy as np
import pytest
from conftest import random_frames

from streamvid.adapters.row_by_row import RowByRow
from streamvid.config import EngineConfig
from streamvid.engine.engine import Engine
from streamvid.hub.hub import Hub
from streamvid.hub.options import HubOptions
from streamvid.hub.policy import SourcePolicy, SourceRefused
from streamvid_app.chat import clock
from streamvid_app.manager import SessionManager
from streamvid_app.sessions import Session, SessionError, SessionLimitError


def wait_until(condition, timeout_s: float = 60.0, what: str = "condition") -> None:
    """Bounded wait for a state change made by another thread (checked every 20 ms)."""
    tick = threading.Event()
    for _ in range(int(timeout_s / 0.02)):
        if condition():
            return
        tick.wait(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def write_clip(path: Path, n: int = 8, px: int = 56, fps: int = 2) -> Path:
    rng = np.random.default_rng(0)
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width = s.height = px
        s.pix_fmt = "yuv420p"
        for _ in range(n):
            c.mux(s.encode(av.VideoFrame.from_ndarray(rng.integers(0, 256, (px, px, 3), dtype=np.uint8),
                                                      format="rgb24")))
        c.mux(s.encode())
    return path


@pytest.fixture
def uploads(tmp_path) -> Path:
    d = tmp_path / "uploads"
    d.mkdir()
    return d


@pytest.fixture
def policy(uploads, tmp_path) -> SourcePolicy:
    clips = tmp_path / "clips"
    clips.mkdir()
    return SourcePolicy(clips={"demo": write_clip(clips / "demo.mp4")}, upload_dirs=(uploads,), max_upload_mb=1.0,
                        frame_px=56)


@pytest.fixture
def manager(adapter, policy):
    cfg = EngineConfig.from_settings(model="unused", window_tokens=60, max_new_tokens=4, frame_px=56)
    m = SessionManager.standalone(cfg, HubOptions(stream_idle_timeout_s=60.0), adapter=adapter, policy=policy,
                                  max_sessions=2)
    yield m
    m.shutdown()


def test_policy_allows_clips_uploads_urls_and_push(policy, uploads):
    assert policy.resolve("demo").kind == "clip"
    assert policy.resolve("push").kind == "push"
    assert policy.resolve("rtsp://camera.local/stream").kind == "url"
    assert policy.resolve("https://example.org/clip.mp4").kind == "url"
    up = write_clip(uploads / "mine.mp4")
    assert policy.resolve(str(up), uploads=True) == policy.resolve(str(uploads / "." / "mine.mp4"), uploads=True)
    assert policy.resolve(str(up), uploads=True).kind == "upload"
    with pytest.raises(SourceRefused, match="is not \"push\", a demo clip"):
        policy.resolve(str(up))  # uploads are the page's: another client of the hub cannot open them


@pytest.mark.parametrize("spec, reason", [
    ("/etc/passwd", "is not \"push\", a demo clip"),
    ("file:///etc/passwd", "scheme 'file' is not allowed"),
    ("concat:/etc/passwd|/etc/hosts", "scheme 'concat' is not allowed"),
    ("", "no source given"),
])
def test_policy_refuses_other_paths_and_schemes(policy, spec, reason):
    with pytest.raises(SourceRefused, match=reason):
        policy.resolve(spec, uploads=True)


def test_policy_refuses_escapes_wrong_types_and_big_files(policy, uploads, tmp_path):
    outside = write_clip(tmp_path / "outside.mp4")
    with pytest.raises(SourceRefused, match="is not \"push\", a demo clip"):
        policy.resolve(str(uploads / ".." / "outside.mp4"), uploads=True)  # a path that leaves the upload area
    (uploads / "link.mp4").symlink_to(outside)
    with pytest.raises(SourceRefused, match="is not \"push\", a demo clip"):
        policy.resolve(str(uploads / "link.mp4"), uploads=True)  # a link that points out of it
    (uploads / "notes.txt").write_text("hello")
    with pytest.raises(SourceRefused, match="expected a video file"):
        policy.resolve(str(uploads / "notes.txt"), uploads=True)
    (uploads / "big.mp4").write_bytes(b"\0" * (2 * 2**20))
    with pytest.raises(SourceRefused, match="over the upload limit of 1 MB"):
        policy.resolve(str(uploads / "big.mp4"), uploads=True)


def test_a_concat_list_named_like_a_video_is_not_opened(policy, uploads, tmp_path):
    outside = write_clip(tmp_path / "secret.mp4")
    evil = uploads / "evil.mp4"
    evil.write_text(f"ffconcat version 1.0\nfile '{outside}'\n")
    with pytest.raises(SourceRefused, match="not a video file this server can play"):
        policy.open(policy.resolve(str(evil), uploads=True), fps=2.0)


def test_push_stream_answers_with_stream_time_and_poll_sees_it(manager):
    s = manager.session("tab-1")
    assert s.start("push")["event"] == "started"
    rng = np.random.default_rng(1)
    for i in range(6):  # 640x480 webcam-sized frames are cropped and resized to frame_px
        s.push_frame(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8), t_s=i / 2)
        wait_until(lambda n=i + 1: s.status()["frames_in"] + s.status()["frames_dropped"] >= n, what="frame in")
    wait_until(lambda: s.status()["blocks_encoded"] >= 2, what="blocks in the window")
    qid = s.ask("What is on screen?")
    answer = s.wait_answer(qid, timeout_s=60)
    assert answer["type"] == "answer" and answer["id"] == qid and answer["t_s"] == 2.5
    chat = s.chat()
    assert chat[-2] == {"role": "user", "content": "What is on screen?"}
    assert chat[-1]["content"].startswith("[00:02] ")
    polled = s.poll(0)
    assert [o["type"] for o in polled["outputs"]] == ["status", "answer"]
    assert s.poll(polled["cursor"]) == {"cursor": polled["cursor"], "outputs": []}
    assert s.latest_frame().image.shape == (56, 56, 3)
    final = s.stop()
    assert final["type"] == "stats" and final["frames_in"] >= 2 and final["running"] is False
    assert final["blocks_in_ram"] + final["blocks_on_disk"] == final["blocks_in_memory"]


def test_errors_keep_the_session_usable(manager, policy):
    s = manager.session("tab-1")
    with pytest.raises(SessionError, match="no stream is running"):
        s.ask("anything?")
    with pytest.raises(SessionError, match="no push stream"):
        s.push_frame(np.zeros((56, 56, 3), np.uint8))
    with pytest.raises(SourceRefused):
        s.start("/etc/passwd")
    with pytest.raises(ValueError, match="loopback address"):
        s.start("http://127.0.0.1:9/nothing-listens-here.mp4")
    s.start("demo")  # the same session plays a clip after the failures
    with pytest.raises(SessionError, match="empty question"):
        s.ask("   ")
    wait_until(lambda: s.status()["ended"], what="the clip to end")
    assert s.status()["frames_in"] == 8 and s.status()["source"] == "demo"
    s.stop()


def test_switching_input_starts_a_fresh_stream(manager):
    s = manager.session("tab-1")
    s.start("push")
    s.push_frame(np.zeros((56, 56, 3), np.uint8), t_s=0.0)
    wait_until(lambda: s.status()["frames_in"] == 1, what="first frame")
    s.start("demo")
    st = s.status()
    assert st["source"] == "demo" and st["frames_in"] <= 8
    events = [(o["event"], o["source"]) for o in s.poll(0)["outputs"] if o["type"] == "status"]
    assert events[:3] == [("started", "pushed frames"), ("stopped", "pushed frames"), ("started", "demo")]
    s.stop()


def test_webcam_frames_start_a_stream_but_not_after_stop(manager):
    s = manager.session("tab-1")
    s.webcam_gap_s = 1e9  # every frame below belongs to one recording, however slow the machine
    frame = np.zeros((48, 64, 3), np.uint8)
    assert s.push_frame(frame, webcam=True)["event"] == "frame"  # the first frame of a recording starts it
    assert s.status()["source"] == "webcam"
    s.stop()
    assert s.push_frame(frame, webcam=True) is None  # still recording after Stop: ignored, no restart
    assert s.status()["running"] is False
    s.start_webcam()  # the webcam input chosen again
    assert s.push_frame(frame, webcam=True)["event"] == "frame"
    s.stop()


def test_session_cap_idle_cleanup_and_no_leftovers(manager):
    a, b = manager.session("a"), manager.session("b")
    with pytest.raises(SessionLimitError, match="maximum of 2 sessions"):
        manager.session("c")
    a.start("push")
    spill_dir = a.assistant.memory.disk_dir
    assert spill_dir.is_dir()
    b.touch()
    assert manager.reap(now_s=a.last_active_s + 30) == []
    assert manager.reap(now_s=b.last_active_s + 61) == ["a", "b"]
    assert len(manager) == 0 and not spill_dir.exists()
    assert not [t for t in threading.enumerate() if t.name.startswith("streamvid-")
                and t.name not in ("streamvid-app-reaper", "streamvid-hub-reaper", "streamvid-engine")
                and t.is_alive()]
    with pytest.raises(SessionError, match="session was closed"):
        a.start("push")
    manager.session("c")  # a slot is free again


def test_sessions_share_one_model_and_keep_their_own_state(manager):
    a, b = manager.session("a"), manager.session("b")
    a.start("push")
    b.start("push")
    assert a.assistant.adapter is b.assistant.adapter is manager.adapter
    a.push_frame(np.zeros((56, 56, 3), np.uint8), t_s=0.0)
    wait_until(lambda: a.status()["frames_in"] == 1, what="a's frame")
    assert b.status()["frames_in"] == 0
    a.stop()
    b.stop()


def test_clock():
    assert [clock(0.4), clock(133.9), clock(3725.0), clock(None)] == ["00:00", "02:13", "1:02:05", "--:--"]


def test_conditions_and_narration_carry_over_to_a_fresh_stream(manager):
    s = manager.session("tab-1")
    s.watch("a red circle", fire=0.9)  # before any stream: kept for the first one
    s.narrate = True  # switched after watch(): the assistant watch() made is replaced
    s.start("push")
    assert s.status()["narrate"] is True
    (trigger,) = s.triggers()
    assert trigger["condition"] == "a red circle" and trigger["fire"] == 0.9
    s.start("demo")  # a fresh stream watches the same condition again
    (again,) = s.triggers()
    assert again["condition"] == "a red circle" and again["fire"] == 0.9
    assert s.unwatch(again["trigger_id"]) and s.triggers() == []
    s.stop()


def push_one_by_one(s, n: int) -> None:
    """Push n frames at 2 fps, each once ingest has taken the one before (so none is overwritten)."""
    for i in range(n):
        s.push_frame(np.zeros((56, 56, 3), np.uint8), t_s=i / 2)
        wait_until(lambda k=i + 1: s.status()["frames_in"] + s.status()["frames_dropped"] >= k, what="frame in")


class FailsOnce(RowByRow):
    """The real adapter, except that the first stream chunk after the warm-up raises once."""

    def __init__(self, real):
        self._real, self.calls = real, 0

    def __getattr__(self, name):
        return getattr(self._real, name)

    def encode_chunk(self, *a, **kw):
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("encoder exploded")
        return self._real.encode_chunk(*a, **kw)


def test_a_model_error_ends_the_stream_not_the_session(adapter, policy):
    cfg = EngineConfig.from_settings(model="unused", window_tokens=60, max_new_tokens=4, frame_px=56)
    engine = Engine(cfg, FailsOnce(adapter))
    hub = Hub(engine)
    s = Session("tab-1", hub, policy)
    s.start("push")
    push_one_by_one(s, 2)
    wait_until(lambda: s.status()["error"] is not None, what="the worker error to reach the session")
    assert "encoder exploded" in s.status()["error"] and s.status()["running"] is False
    assert "encoder exploded" in s.chat()[-1]["content"]
    assert [o["event"] for o in s.poll(0)["outputs"]] == ["started", "error"]
    with pytest.raises(SessionError, match="stopped with an error"):
        s.ask("still there?")
    s.start("push")  # a fresh stream on the same (now healthy) model
    push_one_by_one(s, 2)
    wait_until(lambda: s.status()["blocks_encoded"] == 1, what="a block on the fresh stream")
    assert s.status()["error"] is None
    s.close()
    hub.shutdown()
    engine.close()


def test_sixteen_sessions_run_at_once_on_one_engine(adapter, policy):
    """16 tabs, each a push stream on the manager's one engine: every frame goes in and every question is answered,
    and the engine's scheduler put several sessions' chunks into one forward."""
    cfg = EngineConfig.from_settings(model="unused", window_tokens=60, max_new_tokens=2, frame_px=56, max_streams=16)
    m = SessionManager.standalone(cfg, HubOptions(stream_idle_timeout_s=60.0), adapter=adapter, policy=policy,
                                  max_sessions_per_client=16)
    try:
        assert m.max_sessions == 16
        sessions = [m.session(f"tab-{i}") for i in range(16)]
        for s in sessions:
            s.start("push")
        for i in range(4):  # frames for every tab, then wait for all: chunks of many tabs are ready together
            for k, s in enumerate(sessions):
                s.push_frame(random_frames(1, seed=100 * k + i)[0], t_s=i / 2)
            wait_until(lambda n=i + 1: all(s.status()["frames_in"] + s.status()["frames_dropped"] >= n
                                           for s in sessions), what="every tab's frame in")
        wait_until(lambda: all(s.status()["blocks_encoded"] >= 1 for s in sessions), what="a block per tab")
        ids = [s.ask("What is on screen?") for s in sessions]
        wait_until(lambda: all(not s.chat()[-1]["content"].endswith("…") for s in sessions), what="16 answers")
        assert len(set(ids)) >= 1 and len(m.engine.streams()) == 16
        assert all(s.status()["frames_dropped"] == 0 for s in sessions)
        assert m.engine.forwards["encode"] < sum(s.status()["blocks_encoded"] for s in sessions)
        with pytest.raises(SessionLimitError):
            m.session("tab-16")
    finally:
        m.shutdown()


def test_a_refused_url_leaves_the_running_stream_as_it_was(manager):
    s = manager.session("tab-1")
    s.start("push")
    push_one_by_one(s, 2)
    before = s.status()
    with pytest.raises(ValueError, match="loopback address"):
        s.start("http://127.0.0.1:9/nothing-listens-here.mp4")
    after = s.status()
    assert (after["id"], after["source"], after["running"]) == (before["id"], "pushed frames", True)
    s.push_frame(np.zeros((56, 56, 3), np.uint8), t_s=1.0)  # the same stream takes frames as before
    wait_until(lambda: s.status()["frames_in"] + s.status()["frames_dropped"] >= 3, what="a third frame in")
    assert [o["event"] for o in s.poll(0)["outputs"] if o["type"] == "status"] == ["started"]
    s.stop()


def test_questions_are_answered_after_stop_from_what_the_stream_saw(manager):
    s = manager.session("tab-1")
    s.start("push")
    push_one_by_one(s, 4)  # frames at 0.0, 0.5, 1.0, 1.5 s
    final = s.stop()
    assert final["running"] is False and final["frames_in"] == 4 and final["t_s"] == 1.5
    qid = s.ask("What is on screen?")  # what the page promises: the stopped stream's memory answers
    answer = s.wait_answer(qid, timeout_s=60)
    assert answer["type"] == "answer" and answer["t_s"] == 1.5
    assert final["stopped"] is True and final["can_ask"] is True
    assert s.chat()[-1]["content"].startswith("[00:01] ")
    with pytest.raises(SessionError, match="no push stream is running"):
        s.push_frame(np.zeros((56, 56, 3), np.uint8), t_s=2.0)  # its source is closed: no frame goes in
    assert s.status()["frames_in"] == 4 and s.status()["running"] is False
    assert s.stop()["stopped"] is True  # a second Stop changes nothing
    s.start("demo")  # a fresh stream frees the stopped one (one "stopped" event for it, at Stop)
    events = [(o["event"], o["source"]) for o in s.poll(0)["outputs"] if o["type"] == "status"]
    assert events == [("started", "pushed frames"), ("stopped", "pushed frames"), ("started", "demo")]
    assert len(manager.engine.streams()) == 1
    s.close()
    assert s.status()["can_ask"] is False and len(manager.engine.streams()) == 0
