"""What keeping alert media costs (streamvid/media/alert_media.py): ingest throughput with and without the ring, and the
memory of the ring and the media store over a simulated long stream with an alert a minute.

    python benchmarks/alert_media.py                     # all three parts, JSON on stdout
    python benchmarks/alert_media.py --part ingest --seconds 60 --repeats 3
    python benchmarks/alert_media.py --part memory --minutes 60 --px 1280x720

ingest: the bundled model replays shapes_7 upscaled to --big-px (run_simulated), media off and on, with and without
watches that fire, alternately; frames per second of stream ingested and CPU ms per frame (every thread: the
encoder's too; medians of --repeats). decode: CPU per frame of FileSource alone, with and without the ring taking
full-size frames. encode: CPU per alert (JPEG + clip) at three frame sizes. memory: AlertMedia fed --minutes of
synthetic frames at 2 fps with an alert a minute (its clips encoded as they complete); the ring's and the store's
bytes, and Python's traced allocations (tracemalloc, which numpy reports to), at their peak.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import tracemalloc
from fractions import Fraction
from pathlib import Path

import av
import numpy as np


def upscaled(seconds: float, px: int, out: Path) -> Path:
    from streamvid import assets

    with av.open(str(assets.demo_clip("shapes_7"))) as src, av.open(str(out), "w") as dst:
        stream = dst.add_stream("libx264", rate=2)
        stream.width = stream.height = px
        stream.pix_fmt, stream.options = "yuv420p", {"crf": "18"}
        for i, frame in enumerate(src.decode(video=0)):
            if frame.time >= seconds:
                break
            big = frame.reformat(width=px, height=px, format="yuv420p")
            big.pts, big.time_base = i, Fraction(1, 2)
            dst.mux(stream.encode(big))
        dst.mux(stream.encode(None))
    return out


def ingest(video: Path, repeats: int) -> dict:
    from streamvid.assistant.assistant import StreamingAssistant
    from streamvid.config import EngineConfig
    from streamvid.media.file_source import FileSource

    config = EngineConfig.from_settings(frame_px=112, device="cpu")
    watches = [(0.0, "a red hexagon"), (0.0, "a yellow star")]
    rates: dict[str, list[float]] = {}
    cpu_ms: dict[str, list[float]] = {}
    alerts = {}
    for _ in range(repeats):
        for mode in ("off", "ring", "off+watch", "ring+alerts"):
            sa = StreamingAssistant(config)
            media = sa.keep_alert_media() if mode.startswith("ring") else None
            source = FileSource(video, fps=config.fps, size=112)
            start, cpu_start = time.perf_counter(), time.process_time()
            outs = sa.run_simulated(source, [], watches_at=watches if "+" in mode else [])
            wall = time.perf_counter() - start  # the replay; clips may still be encoding (flushed below)
            if media is not None:
                media.flush(60)
            cpu = time.process_time() - cpu_start  # every thread of the process: the encoder's too
            frames = sa.stats()["frames_in"]
            if media is not None and "+" in mode:
                alerts = {"alerts": len(media.list()), "clips_ready": sum(a["clip"] == "ready" for a in media.list())}
            elif "+" in mode:
                alerts.setdefault("alerts_without_media", sum(o.kind == "alert" for o in outs))
            sa.stop()
            rates.setdefault(mode, []).append(frames / wall)
            cpu_ms.setdefault(mode, []).append(1e3 * cpu / frames)
    med = {mode: statistics.median(r) for mode, r in rates.items()}
    ms = {mode: statistics.median(r) for mode, r in cpu_ms.items()}
    return {"frames_per_s": {mode: round(v, 1) for mode, v in med.items()},
            "cpu_ms_per_frame": {mode: round(v, 2) for mode, v in ms.items()},
            "ring_change_pct": round(100 * (med["ring"] - med["off"]) / med["off"], 1),
            "ring_and_alerts_change_pct": round(100 * (med["ring+alerts"] - med["off+watch"]) / med["off+watch"], 1),
            "ring_cpu_change_pct": round(100 * (ms["ring"] - ms["off"]) / ms["off"], 1),
            "ring_and_alerts_cpu_change_pct": round(100 * (ms["ring+alerts"] - ms["off+watch"]) / ms["off+watch"], 1),
            "runs": {k: [round(r, 1) for r in v] for k, v in rates.items()}, **alerts}


def decode(video: Path, repeats: int) -> dict:
    """CPU time per sampled frame of the source alone (decode, convert): without a full-size consumer, and with
    the ring of an AlertMedia taking every frame."""
    from streamvid.media.alert_media import AlertMedia
    from streamvid.media.file_source import FileSource

    out = {}
    for _ in range(repeats):
        for mode in ("off", "ring"):
            source = FileSource(video, fps=2.0, size=112)
            if mode == "ring":
                source.on_full_frame = AlertMedia(2.0).put
            start, n = time.process_time(), 0
            while source.read() is not None:
                n += 1
            out.setdefault(mode, []).append(1e6 * (time.process_time() - start) / n)
            source.close()
    return {f"source_cpu_us_per_frame_{mode}": round(statistics.median(v)) for mode, v in out.items()}


def encode(repeats: int) -> dict:
    """CPU time of one alert's media (a JPEG and a 29-frame clip: 10 s before, 4 s after at 2 fps), per frame size."""
    from streamvid.media.clip_encoding import jpeg, mp4_bytes
    from streamvid.types import Frame

    out = {}
    rng = np.random.default_rng(0)
    for width, height in ((448, 448), (1280, 720), (1920, 1080)):
        base = rng.integers(0, 256, (height // 8, width // 8, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
        frames = [Frame(np.roll(base, 8 * i, axis=1), i / 2, i) for i in range(29)]
        cpu = []
        for _ in range(repeats):
            start = time.process_time()
            jpeg(frames[20].image)
            data = mp4_bytes(frames, 2.0)
            cpu.append(time.process_time() - start)
        out[f"{width}x{height}"] = {"cpu_s_per_alert": round(statistics.median(cpu), 3),
                                    "clip_kb": round(len(data) / 1024)}
    return out


def memory(minutes: float, width: int, height: int, ring_mb: float, store_mb: float) -> dict:
    from streamvid.media.alert_media import AlertMedia
    from streamvid.types import Alert, Frame

    fps = 2.0
    media = AlertMedia(fps, before_s=10.0, after_s=4.0, ring_mb=ring_mb, store_mb=store_mb)
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    tracemalloc.start()
    start_bytes = tracemalloc.get_traced_memory()[0]
    peak = {"ring_mb": 0.0, "alert_media_mb": 0.0, "traced_mb": 0.0}
    put_s = 0.0
    n = int(minutes * 60 * fps)
    wall = time.perf_counter()
    for i in range(n):
        image = np.roll(base, i * 7, axis=1)  # a moving scene: each frame its own array, clips that compress badly
        t0 = time.perf_counter()
        media.put(Frame(image, i / fps, i))
        put_s += time.perf_counter() - t0
        if i % int(60 * fps) == int(30 * fps):
            media.record(Alert("w0", "a moving scene", i / fps, 0.9, [[i / fps - 1.5, i / fps + 0.5]], "It moves."))
        if i % int(60 * fps) == int(40 * fps):  # the clip has completed; encoded as a live stream's time allows
            media.flush(120)
            stats = media.stats()
            peak["ring_mb"] = max(peak["ring_mb"], stats["ring_mb"])
            peak["alert_media_mb"] = max(peak["alert_media_mb"], stats["alert_media_mb"])
            peak["traced_mb"] = max(peak["traced_mb"], (tracemalloc.get_traced_memory()[0] - start_bytes) / 2**20)
    media.end_input()
    media.flush(120)
    tracemalloc.stop()
    listed = media.list()
    result = {"minutes": minutes, "frame": f"{width}x{height}", "ring_cap_mb": ring_mb, "store_cap_mb": store_mb,
              **{f"peak_{k}": round(v, 1) for k, v in peak.items()},
              "ring_s_held": media.stats()["ring_s"], "alerts": len(listed),
              "clips_ready": sum(a["clip"] == "ready" for a in listed),
              "clips_dropped": sum(a["clip"] == "dropped" for a in listed),
              "mean_clip_kb": round(statistics.mean(a["bytes"] for a in listed if a["clip"] == "ready") / 1024, 1),
              "put_us_per_frame": round(1e6 * put_s / n, 1), "wall_s": round(time.perf_counter() - wall, 1)}
    media.close()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("all", "ingest", "decode", "encode", "memory"), default="all")
    p.add_argument("--seconds", type=float, default=60.0, help="seconds of shapes_7 replayed (ingest, decode)")
    p.add_argument("--big-px", type=int, default=448)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--px", default="1280x720", help="frame size of the memory part, WxH")
    p.add_argument("--ring-mb", type=float, default=192.0)
    p.add_argument("--store-mb", type=float, default=256.0)
    args = p.parse_args()
    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        video = None
        if args.part in ("all", "ingest", "decode"):
            video = upscaled(args.seconds, args.big_px, Path(tmp) / "big.mp4")
        if args.part in ("all", "decode"):
            report["decode"] = decode(video, args.repeats)
        if args.part in ("all", "encode"):
            report["encode"] = encode(args.repeats)
        if args.part in ("all", "ingest"):
            report["ingest"] = ingest(video, args.repeats)
        if args.part in ("all", "memory"):
            width, height = (int(v) for v in args.px.split("x"))
            report["memory"] = memory(args.minutes, width, height, args.ring_mb, args.store_mb)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
