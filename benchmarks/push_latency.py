"""Latency from a pushed frame (the web app's webcam path) to that frame being in the KV window.

    python benchmarks/push_latency.py [--frames 60] [--fps 2] [--model DIR] [--http]

Frames of a bundled ShapesWorld clip are pushed in real time at `--fps` into a PushSource (what the webcam
callback and /push_frame do), with the stream's own wall-clock timestamps. The ingest thread encodes every
`frames_per_chunk` frames into one block; the time a block is appended to the window is taken from the window's
`append` (wrapped here for the measurement). Per frame: append time minus push time. The first frame of a chunk
also waits for the rest of its chunk (1/fps per frame), so both are reported: the frame that completes a chunk
(read + encode + append) and the chunk's first frame. With --http the same frames also go through a running
`streamvid demo` server's /push_frame via gradio_client, and the request round trip is reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from streamvid.assets import DEMO_VIDEOS
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import BUNDLED_MODEL, EngineConfig
from streamvid.media.file_source import FileSource
from streamvid.media.push_source import PushSource


def summary(ms: list[float]) -> dict:
    ms = sorted(ms)
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 1),
            "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 1), "max_ms": round(ms[-1], 1)}


def clip_frames(n: int, fps: float) -> list:
    source = FileSource(DEMO_VIDEOS / "shapes_7" / "shapes_7.mp4", fps=fps)
    frames = []
    while len(frames) < n and (frame := source.read()) is not None:
        frames.append(frame.image)
    return frames


def engine_latency(cfg: EngineConfig, images: list) -> dict:
    appended: list[tuple[float, float]] = []  # (perf_counter at append, block end time)
    pushed: list[tuple[float, float]] = []  # (perf_counter at push, stream time)
    source = PushSource(cfg.fps)
    with StreamingAssistant(cfg) as sa:
        sa.ingest.on_block = lambda block: appended.append((time.perf_counter(), block.t_end_s))
        sa.start(source)
        tick, t0 = threading.Event(), time.perf_counter()
        for i, image in enumerate(images):
            tick.wait(max(0.0, t0 + i / cfg.fps - time.perf_counter()))  # real-time pacing, like a webcam
            t_s = i / cfg.fps
            pushed.append((time.perf_counter(), t_s))
            source.push(image, t_s=t_s)
        deadline = time.monotonic() + 30
        while (not appended or appended[-1][1] < pushed[-1][1]) and time.monotonic() < deadline:
            tick.wait(0.05)
        stats = sa.stats()
    completing, first = [], []
    for k, (at, t_s) in enumerate(pushed):
        done = next((a for a, end in appended if end > t_s), None)
        if done is not None:
            (completing if k % cfg.frames_per_chunk == cfg.frames_per_chunk - 1 else first).append(1000 * (done - at))
    return {"chunk_completing_frame": summary(completing), "chunk_first_frame": summary(first),
            "frames_in": stats["frames_in"], "frames_dropped": stats["frames_dropped"]}


def http_round_trip(cfg: EngineConfig, images: list) -> dict:
    from gradio_client import Client, handle_file
    from PIL import Image

    from streamvid_app.manager import SessionManager
    from streamvid_app.server import launch, upload_folder
    from streamvid_app.ui import build_demo

    manager = SessionManager.standalone(cfg, upload_dirs=[upload_folder()])
    demo = launch(build_demo(manager), port=None, block=False)
    try:
        client = Client(demo.local_url, verbose=False)
        client.predict("push", None, api_name="/start")
        folder = Path(tempfile.mkdtemp())
        trips, tick, t0 = [], threading.Event(), time.perf_counter()
        for i, image in enumerate(images):
            path = folder / f"{i}.png"
            Image.fromarray(image).save(path)
            tick.wait(max(0.0, t0 + i / cfg.fps - time.perf_counter()))
            start = time.perf_counter()
            client.predict(handle_file(str(path)), i / cfg.fps, api_name="/push_frame")
            trips.append(1000 * (time.perf_counter() - start))
        client.predict(api_name="/stop")
        return {"push_frame_round_trip": summary(trips)}
    finally:
        manager.shutdown()
        demo.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--fps", type=float, default=2.0)
    p.add_argument("--model", default=str(BUNDLED_MODEL))
    p.add_argument("--device", default="cpu")
    p.add_argument("--http", action="store_true")
    args = p.parse_args()
    cfg = EngineConfig.from_settings(model=args.model, device=args.device, fps=args.fps, frame_px=112)
    images = clip_frames(args.frames, args.fps)
    result = {"fps": args.fps, "model": Path(args.model).name, "device": args.device, **engine_latency(cfg, images)}
    if args.http:
        result |= http_round_trip(cfg, images)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
