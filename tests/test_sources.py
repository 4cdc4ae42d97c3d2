"""Frame sources: replay semantics, live semantics (latest frame wins, drops counted), errors, threads."""

from __future__ import annotations

import functools
import http.server
import importlib.util
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest

import streamvid.media.decoding
import streamvid.media.file_source
from streamvid.media.decoding import FrameTooLarge
from streamvid.media.file_source import FileSource
from streamvid.media.live_source import LiveSource
from streamvid.media.push_source import PushSource
from streamvid.media.source_spec import open_source
from streamvid.media.synthetic_source import SyntheticSource
from streamvid.types import Frame

VIDEO_FPS, VIDEO_S, VIDEO_PX = 10, 3, 64


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    """A 64x64, 10 fps, 3 s H.264 mp4 whose frame i has grey level 8*i (so a frame tells its own index)."""
    path = tmp_path_factory.mktemp("video") / "grey_ramp.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=VIDEO_FPS)
        stream.width, stream.height, stream.pix_fmt = VIDEO_PX, VIDEO_PX, "yuv420p"
        for i in range(VIDEO_FPS * VIDEO_S):
            image = np.full((VIDEO_PX, VIDEO_PX, 3), 8 * i, np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())
    return path


def read_all(source, timeout_s: float = 1.0) -> list[Frame]:
    frames = []
    while (frame := source.read(timeout_s)) is not None:
        frames.append(frame)
    return frames


def source_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("streamvid-") and t.is_alive()]


def assert_no_source_threads() -> None:
    deadline = time.monotonic() + 2.0
    while source_threads() and time.monotonic() < deadline:
        source_threads()[0].join(timeout=0.1)
    assert not source_threads()


def test_file_replay_resamples_every_frame_in_order(video):
    source = open_source(str(video), fps=2)
    assert isinstance(source, FileSource) and not source.live
    frames = read_all(source)
    source.close()
    assert [f.t_s for f in frames] == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
    assert [f.index for f in frames] == list(range(6))
    assert all(f.image.shape == (VIDEO_PX, VIDEO_PX, 3) and f.image.dtype == np.uint8 for f in frames)
    grey = [int(f.image.mean()) for f in frames]
    assert grey == pytest.approx([0, 40, 80, 120, 160, 200], abs=4)  # the frames at 0, 5, 10, ... were kept
    assert source.dropped == 0
    assert source.read() is None  # stays ended, also after close


def test_file_replay_fps_above_video_rate_yields_every_decoded_frame(video):
    source = FileSource(video, fps=25)
    assert len(read_all(source)) == VIDEO_FPS * VIDEO_S
    source.close()


def test_file_window_and_size(video):
    source = FileSource(video, fps=2, t_start_s=1.0, t_end_s=2.5, size=32)
    frames = read_all(source)
    source.close()
    assert [f.t_s for f in frames] == pytest.approx([0.0, 0.5, 1.0])  # pts minus t_start
    assert [int(f.image.mean()) for f in frames] == pytest.approx([80, 120, 160], abs=4)
    assert all(f.image.shape == (32, 32, 3) for f in frames)


def test_file_realtime_is_paced_live(video):
    source = FileSource(video, fps=10, realtime=True, t_end_s=1.0)
    assert source.live
    start_s = time.monotonic()
    frames = read_all(source)
    elapsed_s = time.monotonic() - start_s
    source.close()
    assert frames[-1].t_s == pytest.approx(0.9)
    assert elapsed_s >= 0.8  # paced to the wall clock, not as fast as decoding
    assert [f.index for f in frames] == sorted(f.index for f in frames)
    assert_no_source_threads()


def test_file_realtime_slow_consumer_drops_and_never_blocks_producer(video):
    """A consumer slower than the clip (it reads the first frame, then nothing until the clip is over): the
    producer plays the whole clip at the clock's pace all the same and ends, the frames it overwrote counted as
    dropped; the consumer then gets the newest frame. A producer that waited for the consumer would never end."""
    before = set(source_threads())
    source = FileSource(video, fps=10, realtime=True, t_end_s=1.5)
    producer = next(t for t in source_threads() if t not in before and t.name == "streamvid-source")
    frames = [source.read(timeout_s=30.0)]
    producer.join(timeout=60)  # the clip lasts 1.5 s; the bound only ends a hang
    assert not producer.is_alive(), "the producer waited for the consumer"
    while (frame := source.read(timeout_s=1.0)) is not None:
        frames.append(frame)
    source.close()
    assert source.dropped > 0
    assert len(frames) + source.dropped == 15  # every sampled frame was either read or counted
    assert frames[-1].t_s >= 1.2  # the consumer kept seeing the newest frames
    assert_no_source_threads()


def test_realtime_close_mid_stream_stops_reader_thread(video):
    source = FileSource(video, fps=10, realtime=True)
    assert source.read() is not None
    source.close()
    source.close()  # idempotent
    assert_no_source_threads()
    assert len(read_all(source)) <= 1  # at most the pending frame, then None


def test_push_source_latest_wins_drops_and_close():
    source = PushSource(fps=100)
    assert source.live
    with pytest.raises(TimeoutError, match="no frame from push source within 0.05 s"):
        source.read(timeout_s=0.05)
    for i in range(3):
        source.push(np.full((4, 6, 3), i, np.uint8), t_s=i * 0.1)
    frame = source.read()
    assert (frame.index, frame.t_s, int(frame.image[0, 0, 0])) == (2, pytest.approx(0.2), 2)
    assert source.dropped == 2
    source.push(np.zeros((4, 6, 3), np.uint8), t_s=0.205)  # within 1/fps of the last: sampled away, no drop
    source.push(np.zeros((4, 6, 3), np.uint8), t_s=0.3)
    source.close()
    source.push(np.zeros((4, 6, 3), np.uint8), t_s=0.4)  # ignored after close
    assert source.read().t_s == pytest.approx(0.3)  # drained
    assert source.read() is None
    assert source.dropped == 2


def test_push_source_max_age_and_bad_image():
    source = PushSource(fps=1000, max_age_s=0.05)
    source.push(np.zeros((2, 2, 3), np.uint8), t_s=0.0)
    assert source.read().t_s == 0.0
    source.push(np.zeros((2, 2, 3), np.uint8), t_s=1.0)
    time.sleep(0.1)
    with pytest.raises(TimeoutError):
        source.read(timeout_s=0.05)  # the pending frame went stale
    assert source.dropped == 1
    with pytest.raises(ValueError, match=r"expected an \(H, W, 3\) uint8 RGB image, got shape \(2, 2\)"):
        source.push(np.zeros((2, 2), np.uint8), t_s=2.0)


def test_synthetic_source():
    source = SyntheticSource(lambda i, t: np.full((8, 8, 3), i, np.uint8), fps=4, n_frames=5)
    assert not source.live
    frames = read_all(source)
    assert [f.t_s for f in frames] == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    assert [int(f.image[0, 0, 0]) for f in frames] == [0, 1, 2, 3, 4]
    source.close()
    assert source.read() is None


def test_synthetic_live_source_paces_and_ends():
    source = SyntheticSource(lambda i, t: np.zeros((2, 2, 3), np.uint8), fps=20, n_frames=6, live=True)
    frames = read_all(source)
    assert frames[-1].index == 5 and len(frames) + source.dropped == 6
    source.close()
    assert_no_source_threads()


def test_reader_thread_error_is_raised_by_read():
    def make_frame(i: int, t_s: float) -> np.ndarray:
        if i == 2:
            raise RuntimeError("frame 2 is broken")
        return np.zeros((2, 2, 3), np.uint8)

    source = SyntheticSource(make_frame, fps=50, n_frames=5, live=True)
    with pytest.raises(RuntimeError, match="frame 2 is broken"):
        read_all(source)
    with pytest.raises(RuntimeError, match="frame 2 is broken"):  # stays failed
        source.read()
    source.close()
    assert_no_source_threads()


def test_open_source_errors(tmp_path):
    with pytest.raises(ValueError, match="video file not found: .*missing.mp4"):
        open_source(str(tmp_path / "missing.mp4"), fps=1)
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(ValueError) as error:
        open_source(str(garbage), fps=1)
    assert "garbage.mp4" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ValueError, match="cam:N"):
        open_source("cam:front", fps=1)
    with pytest.raises(ValueError, match="fps must be > 0, got 0"):
        open_source(str(garbage), fps=0)


def test_url_source_is_live_and_keeps_only_the_latest_frame(video):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(video.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, name="test-http", daemon=True).start()
    try:
        source = open_source(f"http://127.0.0.1:{server.server_port}/{video.name}", fps=5)
        assert isinstance(source, LiveSource) and source.live
        frames = read_all(source)  # decoding outruns this reader: it sees only some of the frames
        source.close()
    finally:
        server.shutdown()
        server.server_close()
    assert len(frames) + source.dropped == 15  # 3 s at 5 fps: every sampled frame was read or counted
    assert frames[-1].t_s == pytest.approx(2.8) and frames[-1].index == 14
    assert [f.index for f in frames] == sorted({f.index for f in frames})
    assert_no_source_threads()


def test_open_source_missing_camera_is_value_error():
    with pytest.raises(ValueError, match="cannot open cam:97"):
        open_source("cam:97", fps=1)
    assert_no_source_threads()


def gradio_video(name: str) -> Path | None:
    spec = importlib.util.find_spec("gradio")  # locate without importing gradio (slow)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "media_assets" / "videos" / name
    return path if path.is_file() else None


@pytest.mark.parametrize("size", [None, 112])
def test_real_video_from_gradio(size):
    path = gradio_video("world.mp4")
    if path is None:
        pytest.skip("gradio's world.mp4 is not installed")
    source = open_source(str(path), fps=1, size=size)
    frames = read_all(source)
    source.close()
    assert 29 <= len(frames) <= 32
    assert frames[0].image.shape == ((270, 480, 3) if size is None else (size, size, 3))
    assert all(b.t_s - a.t_s == pytest.approx(1.0, abs=0.05) for a, b in zip(frames, frames[1:]))
    assert_no_source_threads()


# ---- frame-size cap ----------------------------------------------------------------------------------------------
def test_a_video_above_the_frame_pixel_cap_is_refused_before_any_frame_is_decoded(video, monkeypatch):
    decoders = []
    monkeypatch.setattr(streamvid.media.file_source, "decode_frames", lambda *args, **kwargs: decoders.append(args))
    with pytest.raises(FrameTooLarge) as refused:
        FileSource(video, fps=2, max_frame_pixels=VIDEO_PX * VIDEO_PX - 1)
    assert str(refused.value) == "video frames are 64x64 = 4096 pixels, above the 4095-pixel cap (--max-frame-pixels)"
    assert decoders == [], "refused from the declared size, before a decoder was started"
    monkeypatch.undo()
    source = FileSource(video, fps=2, size=16, max_frame_pixels=VIDEO_PX * VIDEO_PX)  # at the cap: allowed
    frames = read_all(source)
    source.close()
    assert len(frames) == 6 and all(f.image.shape == (16, 16, 3) for f in frames)


def test_a_url_above_the_frame_pixel_cap_is_refused(video):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(video.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, name="test-http", daemon=True).start()
    try:
        with pytest.raises(FrameTooLarge, match=r"^video frames are 64x64 = 4096 pixels, above the 1000-pixel cap"):
            open_source(f"http://127.0.0.1:{server.server_port}/{video.name}", fps=5, max_frame_pixels=1000)
    finally:
        server.shutdown()
        server.server_close()
    assert_no_source_threads()


def test_only_sampled_frames_are_converted_and_straight_to_the_model_size(video, monkeypatch):
    calls, to_rgb = [], streamvid.media.decoding.to_rgb
    monkeypatch.setattr(streamvid.media.decoding, "to_rgb", lambda frame, size: calls.append((frame.width, size))
                        or to_rgb(frame, size))
    source = FileSource(video, fps=2, size=16)
    frames = read_all(source)
    source.close()
    # one swscale pass per kept frame, from the decoded 64x64 frame to 16x16; the 24 skipped frames never convert
    assert calls == [(VIDEO_PX, 16)] * len(frames) and len(frames) == 6
