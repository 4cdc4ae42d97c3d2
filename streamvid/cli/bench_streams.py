"""`streamvid bench --streams N[,N...]`: N synthetic streams through one engine, batched across streams, and in the
same run one forward per stream (the engine with `max_batch` 1) for comparison.

For each N and each way:
- real time: every stream fed at `fps` on the wall clock (a paced synthetic source and its reader thread, as a
  camera would be) for `seconds`, with one question per stream every `ask_every_s` (streams staggered); frames
  the engine did not take in time are dropped by the sources; TTFT counts from each question's arrival;
- saturated: every stream fed as fast as the engine takes frames (a chunk per stream, then the engine stepped on
  this thread until idle): the aggregate frames per second, the median of `saturated_repeats` runs of each way
  taken in turns (batched first, then unbatched first, ...), so that a slow start or another process taking the
  CPU for a while does not fall on one way only.

    {"n": 8, "fps_per_stream": 2.0,
     "batched":   {"frames_dropped": 0, "ttft_ms_p50": ..., "ttft_ms_p95": ..., "saturated_frames_per_s": ...,
                   "saturated_runs": [...]},
     "unbatched": {...}, "saturated_speedup": ...}
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

QUESTION = "How many shapes are there?"


@dataclass(frozen=True)
class StreamsConfig:
    counts: tuple[int, ...] = (8,)
    fps: float = 2.0
    seconds: float = 30.0  # wall seconds of the real-time phase, per count and way
    ask_every_s: float = 5.0
    saturated_chunks: int = 8  # chunks per stream in the saturated phase
    saturated_repeats: int = 3  # saturated runs of each way, in turns (the median is reported)
    max_new_tokens: int = 4

    @classmethod
    def quick(cls, **changes) -> StreamsConfig:
        return cls(**{"seconds": 20.0, "saturated_chunks": 6, **changes})


def run_streams(adapter, engine_config, cfg: StreamsConfig, frames: list[np.ndarray], log=lambda msg: None) -> list:
    """One entry per stream count: the real-time and saturated results, batched and unbatched, side by side."""
    results = []
    ways = (("batched", None), ("unbatched", 1))
    for n in cfg.counts:
        entry = {"n": n, "fps_per_stream": cfg.fps}
        configs = {way: engine_config.replace(max_new_tokens=cfg.max_new_tokens, max_streams=max(n, 1),
                                              max_batch=engine_config.scheduler.max_batch if batch is None else batch)
                   for way, batch in ways}
        runs: dict[str, list[float]] = {way: [] for way, _ in ways}
        for r in range(max(1, cfg.saturated_repeats)):
            for way, _ in ways[::-1] if r % 2 else ways:
                runs[way].append(_saturated(adapter, configs[way], cfg, n, frames))
        for way, _ in ways:
            live = _real_time(adapter, configs[way], cfg, n, frames)
            saturated = round(statistics.median(runs[way]), 1)
            entry[way] = {**live, "saturated_frames_per_s": saturated, "saturated_runs": runs[way]}
            log(f"  {n} streams {way}: {live['frames_dropped']} of {live['frames_in'] + live['frames_dropped']} "
                f"frames dropped at {cfg.fps:g} fps each, TTFT p50 {live['ttft_ms_p50']} ms, p95 "
                f"{live['ttft_ms_p95']} ms ({live['answers']} answers); saturated {saturated} frames/s "
                f"(median of {runs[way]})")
        b, u = entry["batched"]["saturated_frames_per_s"], entry["unbatched"]["saturated_frames_per_s"]
        entry["saturated_speedup"] = round(b / u, 2) if u else None
        results.append(entry)
    return results


def _real_time(adapter, config, cfg: StreamsConfig, n: int, frames: list[np.ndarray]) -> dict:
    from streamvid.assistant.assistant import BusyError, StreamingAssistant
    from streamvid.engine.engine import Engine
    from streamvid.media.synthetic_source import SyntheticSource

    engine = Engine(config, adapter)
    n_frames = int(cfg.seconds * cfg.fps)
    assistants = [StreamingAssistant(config, engine=engine) for _ in range(n)]
    ttfts: list[float] = []
    asked = answers = busy = 0
    try:
        engine.warm_up()
        for k, sa in enumerate(assistants):
            sa.start(SyntheticSource(lambda i, t, k=k: frames[(i + k) % len(frames)], cfg.fps, n_frames, live=True))
        t0 = time.monotonic()
        # stream k asks at k * ask_every_s / n after the first second, then every ask_every_s
        next_ask = [t0 + 1.0 + k * cfg.ask_every_s / n for k in range(n)]
        while not all(sa.ended for sa in assistants):
            now = time.monotonic()
            for k, sa in enumerate(assistants):
                if now >= next_ask[k] and not sa.ended:
                    next_ask[k] += cfg.ask_every_s
                    try:
                        sa.ask(QUESTION)
                        asked += 1
                    except BusyError:
                        busy += 1
                for out in sa.outputs(timeout_s=0.0):
                    if out.kind == "answer":
                        answers += 1
                        ttfts.append(out.ttft_ms)
            time.sleep(0.005)
        deadline = time.monotonic() + 30.0
        while answers < asked and time.monotonic() < deadline:
            for sa in assistants:
                for out in sa.outputs(timeout_s=0.01):
                    if out.kind == "answer":
                        answers += 1
                        ttfts.append(out.ttft_ms)
        stats = [sa.ingest_stats() for sa in assistants]
    finally:
        for sa in assistants:
            sa.stop()
        engine.close()
    ttfts.sort()
    return {"frames_in": sum(s["frames_in"] for s in stats), "frames_dropped": sum(s["frames_dropped"] for s in stats),
            "questions": asked, "answers": answers, "busy_refusals": busy,
            "ttft_ms_p50": round(statistics.median(ttfts), 1) if ttfts else None,
            "ttft_ms_p95": round(ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))], 1) if ttfts else None}


def _saturated(adapter, config, cfg: StreamsConfig, n: int, frames: list[np.ndarray]) -> float:
    from streamvid.engine.engine import Engine
    from streamvid.types import Frame

    engine = Engine(config, adapter)
    try:
        engine.warm_up()
        streams = [engine.open() for _ in range(n)]
        per_chunk = config.frames_per_chunk
        index = 0
        t0 = time.perf_counter()
        for _ in range(cfg.saturated_chunks):
            for k, s in enumerate(streams):
                for i in range(index, index + per_chunk):
                    s.insert(Frame(frames[(i + k) % len(frames)], i / cfg.fps, i))
            index += per_chunk
            engine.run_until_idle()
        elapsed = time.perf_counter() - t0
    finally:
        engine.close()
    return round(n * index / elapsed, 1)
