"""The frame and clip behind an alert (streamvid/media/alert_media.py): the snapshot is the frame the alert fired on
at the source's size, the clip spans [t_s - before, t_s + after] in H.264, both checked against the source decoded on its
own with PyAV; the ring and the store stay within their caps; bad input is a warning and alerts go on."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import tracemalloc
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from conftest import wait_until
from streamvid import assets
from streamvid.media.alert_media import AlertMedia, UnknownAlert
from streamvid.types import Alert, Frame

BIG_PX = 448  # the demo clip upscaled: frames larger than the model's 112 px
CLIP_S = 22.0  # shapes_7's red hexagon enters at 13 s; the bundled model's alert comes at 14.5 s
FPS = 2.0
WATCH = "a red hexagon"


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def decoded(path: Path) -> dict[float, np.ndarray]:
    """Every frame of a video by its time, decoded with PyAV at its own size."""
    with av.open(str(path)) as container:
        return {round(f.time, 3): f.to_ndarray(format="rgb24") for f in container.decode(video=0)}


@pytest.fixture(scope="module")
def big_clip(tmp_path_factory) -> Path:
    """The first 22 s of shapes_7 re-encoded at 448x448 (2 fps, as the demo clip)."""
    path = tmp_path_factory.mktemp("big") / "shapes_7_448.mp4"
    with av.open(str(assets.demo_clip("shapes_7"))) as src, av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=2)
        stream.width = stream.height = BIG_PX
        stream.pix_fmt, stream.options = "yuv420p", {"crf": "16"}
        for i, frame in enumerate(src.decode(video=0)):
            if frame.time >= CLIP_S:
                break
            big = frame.reformat(width=BIG_PX, height=BIG_PX, format="yuv420p")
            big.pts, big.time_base = i, Fraction(1, 2)
            out.mux(stream.encode(big))
        out.mux(stream.encode(None))
    return path


@pytest.fixture(scope="module")
def fired(big_clip):
    """The bundled model watching the 448-px clip live (a reader thread, the engine's scheduler), media in RAM."""
    from streamvid.assistant.assistant import StreamingAssistant
    from streamvid.config import EngineConfig
    from streamvid.media.file_source import FileSource

    sa = StreamingAssistant(EngineConfig.from_settings(frame_px=112, device="cpu"))
    media = sa.keep_alert_media()
    sa.watch(WATCH)
    sa.start(FileSource(big_clip, fps=FPS, size=112))
    outs = []
    assert wait_until(lambda: outs.extend(sa.outputs(timeout_s=0.1)) or sa.ended, timeout_s=600)
    outs.extend(sa.outputs(timeout_s=1.0))
    alerts = [o for o in outs if o.kind == "alert"]
    assert alerts, "the bundled model fires on the red hexagon of shapes_7"
    assert media.flush(timeout_s=120)
    yield sa, media, alerts
    sa.stop()


def test_the_snapshot_is_the_frame_the_alert_fired_on_at_source_resolution(fired, big_clip):
    sa, media, alerts = fired
    source = decoded(big_clip)
    alert = alerts[0]
    assert alert.alert_id == "a0" and [a.alert_id for a in alerts] == [f"a{i}" for i in range(len(alerts))]
    assert alert.to_json()["alert_id"] == "a0"
    snapshot = np.asarray(Image.open(io.BytesIO(media.snapshot("a0"))).convert("RGB"))
    assert snapshot.shape == (BIG_PX, BIG_PX, 3)  # the source's size, not the model's 112 px
    assert psnr(snapshot, source[alert.t_s]) >= 30.0
    # and not merely a similar frame: the frames one chunk before and after differ from it
    neighbours = [psnr(snapshot, source[t]) for t in (alert.t_s - 1.0, alert.t_s + 1.0) if t in source]
    assert neighbours and max(neighbours) < psnr(snapshot, source[alert.t_s])
    assert media.thumbnail("a0") is not None and max(Image.open(io.BytesIO(media.thumbnail("a0"))).size) <= 160
    frame = media.frame_at(alert.t_s)
    assert frame is not None and frame.image.shape == (BIG_PX, BIG_PX, 3)
    assert psnr(frame.image, source[alert.t_s]) >= 30.0


def test_the_clip_spans_the_seconds_around_the_alert_in_h264(fired, big_clip):
    sa, media, alerts = fired
    source = decoded(big_clip)
    alert = alerts[0]
    before, after = sa.config.alert_media.before_s, sa.config.alert_media.after_s
    with av.open(io.BytesIO(media.clip(alert.alert_id))) as clip:
        stream = clip.streams.video[0]
        assert stream.codec_context.name == "h264" and stream.codec_context.pix_fmt == "yuv420p"
        frames = [(f.time, f.to_ndarray(format="rgb24")) for f in clip.decode(stream)]
        duration_s = clip.duration / 1e6
    period = 1.0 / FPS
    start, end = max(0.0, alert.t_s - before), alert.t_s + after
    assert abs(duration_s - (end - start)) <= period + 1e-6
    assert abs((frames[-1][0] - frames[0][0]) - (end - start)) <= period + 1e-6
    assert len(frames) == round((end - start) * FPS) + 1
    for t, image in (frames[0], frames[len(frames) // 2], frames[-1]):  # each at its place in the source
        assert image.shape == (BIG_PX, BIG_PX, 3)
        assert psnr(image, source[round(start + t, 3)]) >= 30.0
    listed = {a["alert_id"]: a for a in media.list()}
    assert listed["a0"]["snapshot"] == listed["a0"]["clip"] == "ready"
    assert listed["a0"]["clip_span_s"] == [start, end]


def test_alert_media_through_the_command_line(big_clip, tmp_path):
    out = tmp_path / "media"
    done = subprocess.run([sys.executable, "-m", "streamvid.cli", "run", str(big_clip), "--watch", f"0:{WATCH}",
                           "--alert-media", str(out), "--device", "cpu"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    alerts = [line for line in lines if line["type"] == "alert"]
    assert alerts and alerts[0]["alert_id"] == "a0"
    source = decoded(big_clip)
    for alert in alerts:
        assert alert["snapshot"] == str(out / alert["alert_id"] / "snapshot.jpg")
        assert alert["clip"] == str(out / alert["alert_id"] / "clip.mp4")
        snapshot = np.asarray(Image.open(alert["snapshot"]).convert("RGB"))
        assert psnr(snapshot, source[alert["t_s"]]) >= 30.0
        with av.open(alert["clip"]) as clip:
            assert clip.streams.video[0].codec_context.name == "h264"
            assert sum(1 for _ in clip.decode(video=0)) > 1
    assert "alerts_kept" in lines[-1] and lines[-1]["alert_media_warnings"] == 0


# ---- the store on its own: synthetic frames ----------------------------------------------------------------------
def _frame(i: int, px: tuple[int, int] = (120, 160)) -> Frame:
    image = np.full((*px, 3), i % 256, dtype=np.uint8)
    image[:32, :32] = np.random.default_rng(i).integers(0, 256, (32, 32, 3), dtype=np.uint8)  # ~30 KB a clip
    return Frame(image=image, t_s=i / FPS, index=i)


def _alert(t_s: float, trigger_id: str = "w0") -> Alert:
    return Alert(trigger_id, "a red circle", t_s, 0.9, [[t_s - 1.5, t_s + 0.5]], "There is a red circle now.")


def test_the_snapshot_is_the_frame_at_the_alerts_time_not_one_chunk_later():
    """Frames of known grey levels (10 per frame): the snapshot of an alert at 4.5 s is the frame at 4.5 s (level 90),
    although the frames of the next chunks (5.0-10.0 s, levels 100-200) are already held."""
    media = AlertMedia(FPS, before_s=8.0, after_s=4.0)  # the ring holds the last 12 s
    for i in range(21):  # 0 .. 10 s
        media.put(Frame(image=np.full((64, 64, 3), 10 * i, dtype=np.uint8), t_s=i / FPS, index=i))
    media.record(_alert(4.5))
    jpeg = media.snapshot("a0", timeout_s=60)
    assert jpeg is not None and media.get("a0")["snapshot_t_s"] == 4.5
    level = np.asarray(Image.open(io.BytesIO(jpeg)).convert("L"), dtype=np.float32).mean()
    assert abs(level - 90) < 3, level
    media.close()


def test_the_ring_and_the_store_stay_within_their_caps_over_a_long_stream():
    ring_mb, store_mb = 1.0, 0.5
    media = AlertMedia(FPS, before_s=10.0, after_s=4.0, ring_mb=ring_mb, store_mb=store_mb)
    frame_bytes = _frame(0).image.nbytes  # 57,600: 1 MB holds 18 frames, fewer than the 29 a clip spans
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        peak_growth = 0
        minutes = 60
        for i in range(int(minutes * 60 * FPS)):  # an hour at 2 fps, an alert a minute
            media.put(_frame(i))
            if i % 120 == 60:
                media.record(_alert(i / FPS))
            if i % 120 == 100:  # the clip's last frame has come: its encoding, as a stream's 2 fps would allow
                assert media.flush(timeout_s=60)
                peak_growth = max(peak_growth, tracemalloc.get_traced_memory()[0] - base)
        media.end_input()
        assert media.flush(timeout_s=60)
        now = i / FPS
        held = [t for t in np.arange(0.0, now + 1e-9, 1 / FPS) if media.frame_at(float(t)) is not None]
        assert held and len(held) * frame_bytes <= ring_mb * 2**20  # the frames the ring still gives, counted
        kept = [a for a in media.list()]
        assert len(kept) == minutes
        stored = sum(len(media.snapshot(a["alert_id"]) or b"") + len(media.clip(a["alert_id"]) or b"") for a in kept)
        assert 0 < stored <= store_mb * 2**20
        assert kept[0]["clip"] == "dropped" and kept[-1]["clip"] == "ready"  # the oldest went first
        # everything this store holds, measured from outside: bounded by its two caps, not by the hour
        assert peak_growth <= (ring_mb + store_mb) * 2**20 + 4 * frame_bytes * 29 + 2**20
    finally:
        tracemalloc.stop()
        media.close()


def test_a_clip_is_ready_once_the_seconds_after_the_alert_have_arrived():
    media = AlertMedia(FPS, before_s=2.0, after_s=3.0)
    for i in range(21):  # 0 .. 10 s
        media.put(_frame(i))
    alert = media.record(_alert(10.0))
    assert alert.alert_id == "a0" and alert.id == "w0" and alert.t_s == 10.0
    assert media.snapshot("a0", timeout_s=60) is not None
    assert media.clip("a0") is None and media.get("a0")["clip"] == "recording"  # 404 until ready
    for i in range(21, 26):  # .. 12.5 s: not yet
        media.put(_frame(i))
    assert media.get("a0")["clip"] == "recording"
    media.put(_frame(26))  # 13 s = t_s + after
    data = media.clip("a0", timeout_s=60)
    assert data is not None
    with av.open(io.BytesIO(data)) as clip:
        times = [f.time for f in clip.decode(video=0)]
    assert times[0] == 0.0 and times[-1] == pytest.approx(5.0) and len(times) == 11  # 8 .. 13 s
    # an input that ends first: the clip is what has arrived
    media.record(_alert(12.5))
    assert media.get("a1")["clip"] == "recording"
    media.end_input()
    assert media.clip("a1", timeout_s=60) is not None and media.get("a1")["clip_frames"] == 6  # 10.5 .. 13 s
    media.close()


def test_unknown_ids_missing_frames_and_unwritable_folders_are_one_line_each(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="streamvid.media.alert_media")
    media = AlertMedia(FPS, before_s=2.0, after_s=1.0)
    with pytest.raises(UnknownAlert, match=r"^no alert 'a7' on this stream$"):
        media.snapshot("a7")
    with pytest.raises(UnknownAlert):
        media.clip("../etc/passwd")
    for i in range(6):  # frames up to 2.5 s, then none: the frames of the alert's chunk were dropped
        media.put(_frame(i))
    alert = media.record(_alert(20.0))
    assert alert.alert_id == "a0"
    assert media.snapshot("a0") is None and media.get("a0")["snapshot"] == "missing"
    media.end_input()
    assert media.clip("a0") is None and media.get("a0")["clip"] == "missing"
    assert len(caplog.records) == 2 and all("\n" not in r.getMessage() for r in caplog.records)
    media.close()

    caplog.clear()
    blocked = tmp_path / "not_a_folder"
    blocked.write_text("a file where the folder should be")
    media = AlertMedia(FPS, before_s=1.0, after_s=0.0, folder=blocked)
    for i in range(4):
        media.put(_frame(i))
    ids = [media.record(_alert(1.5, trigger_id=f"w{k}")).alert_id for k in range(2)]
    assert ids == ["a0", "a1"]  # alerts keep their ids and go on
    assert media.flush(timeout_s=60)
    assert [(a["snapshot"], a["clip"]) for a in media.list()] == [("failed", "failed")] * 2
    assert media.files("a0") == {}
    assert caplog.records and all("\n" not in r.getMessage() for r in caplog.records)
    media.close()


def test_a_folder_keeps_alerts_across_runs_and_ids_continue(tmp_path):
    media = AlertMedia(FPS, before_s=1.0, after_s=0.0, folder=tmp_path / "m")
    for i in range(4):
        media.put(_frame(i))
    media.record(_alert(1.5))
    assert media.flush(timeout_s=60)
    assert media.files("a0") == {"snapshot": str(tmp_path / "m/a0/snapshot.jpg"),
                                 "clip": str(tmp_path / "m/a0/clip.mp4")}
    media.close()
    again = AlertMedia(FPS, before_s=1.0, after_s=0.0, folder=tmp_path / "m")
    assert [(a["alert_id"], a["snapshot"], a["clip"]) for a in again.list()] == [("a0", "ready", "ready")]
    assert again.snapshot("a0") == (tmp_path / "m/a0/snapshot.jpg").read_bytes()
    again.put(_frame(10))
    assert again.record(_alert(5.0)).alert_id == "a1"
    again.close()


def test_sources_hand_over_full_size_frames_only_while_asked(big_clip, monkeypatch):
    import streamvid.media.decoding
    from streamvid.media.file_source import FileSource

    calls = []
    to_rgb = streamvid.media.decoding.to_rgb
    monkeypatch.setattr(streamvid.media.decoding, "to_rgb",
                        lambda frame, size: calls.append(size) or to_rgb(frame, size))
    plain = FileSource(big_clip, fps=1.0, size=112, t_end_s=6.0)
    frames = list(iter(plain.read, None))
    assert len(frames) == 6 and calls == [112] * 6  # no full-size conversion, and none of the skipped frames
    calls.clear()
    tapped = FileSource(big_clip, fps=1.0, size=112, t_end_s=6.0)
    full = []
    tapped.on_full_frame = full.append
    frames = list(iter(tapped.read, None))
    assert sorted(calls, key=str) == [112] * 6 + [None] * 6
    assert [(f.t_s, f.index) for f in full] == [(f.t_s, f.index) for f in frames]
    assert {f.image.shape for f in full} == {(BIG_PX, BIG_PX, 3)} and {f.image.shape for f in frames} == {(112, 112, 3)}
    source = decoded(big_clip)
    assert all(psnr(f.image, source[round(f.t_s, 3)]) >= 40.0 for f in full)
