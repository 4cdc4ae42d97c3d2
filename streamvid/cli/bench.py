"""`streamvid bench`: the engine's speed and memory against stream length, and the re-encoding baseline.

    streamvid bench --quick --json                 # the bundled model, a few minutes on a CPU
    streamvid bench --arch 7b --device cuda        # Qwen2.5-VL-7B's architecture, random weights, 448 px frames
    streamvid bench --arch 7b --layers 2           # real widths, 2 decoder layers (and vision blocks): fits a CPU
    streamvid bench --arch smolvlm2-500m --quick   # SmolVLM2-500M-Video-Instruct's architecture, 384 px frames
    streamvid bench --arch smolvlm2-tiny --quick --streams 8   # make-tiny's SmolVLM2, 8 streams batched / not

In one run, side by side:
- a simulated stream of synthetic frames pushed at full speed through the ingest path (vision encode, prefill,
  window, eviction, compact long-term memory), with checkpoints at given stream minutes; at each, questions are
  answered on the caller's thread with retrieval (top-k from memory) and without, TTFT measured from the
  question's arrival; host RSS and device memory recorded;
- ingest frames per second of encode time over the whole stream, and the real-time factor at 1 and 2 fps;
- interference: a live (paced) synthetic source at 2 fps through the threaded session while a question a second is
  asked: frames dropped, ingest rate, TTFT;
- the baseline a user would otherwise run: an offline video-LLM that re-encodes the last N frames with HF
  `generate` for each question (N = 16, 32, 64), time to its first token.

Speed does not depend on weight values, so `--arch 3b|7b` builds the architecture with random weights
(checkpoints/random_arch.py), and `--arch smolvlm2-256m|smolvlm2-500m|internvl3.5-1b|qwen3.5-0.8b|qwen3.5-2b` (and
make-tiny's `smolvlm2-tiny|internvl3.5-tiny|qwen3.5-tiny`) the real-size architectures of the small families with their own processors
(checkpoints/real_size.py). Answers of `decode_tokens` tokens at the longest stream give the decode rate.
`--json` prints one object (see `summary`); `--out DIR` writes the full report.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from streamvid.config import DEFAULTS

QUESTIONS = ("How many shapes are there?", "What colour is the circle?", "Which shape is the red one?",
             "Do you see a blue star?", "What was on screen before?")


@dataclass(frozen=True)
class BenchConfig:
    arch: str = "tiny"  # "tiny": the bundled model; "3b" / "7b": Qwen2.5-VL architectures; real_size.ARCHS
    layers: int | None = None  # fewer decoder layers (and vision blocks) at the real width
    device: str = DEFAULTS.device
    dtype: str = DEFAULTS.dtype
    fps: float = DEFAULTS.fps
    frame_px: int | None = None  # None: 112 for tiny, 448 for 3b / 7b
    minutes: tuple[float, ...] = (1.0, 5.0, 10.0, 60.0, 180.0)  # stream lengths at which TTFT is measured
    questions: int = 5  # per checkpoint, with and without retrieval
    reencode_frames: tuple[int, ...] = (16, 32, 64)
    repeats: int = 3  # re-encoding runs per N (median)
    interference_s: float = 60.0  # stream seconds of the live run with a question per second
    max_new_tokens: int = 4
    decode_tokens: int = 16  # tokens of the answers that measure the decode rate (at the longest stream)
    memory_top_k: int = DEFAULTS.memory.top_k
    quick_run: bool = False  # made by quick(): the many-streams phases are shorter too
    streams: tuple[int, ...] = ()  # stream counts for the many-streams measurement alone (bench_streams.py)
    streams_seconds: float | None = None  # its real-time phase in wall seconds (None: StreamsConfig's)

    @classmethod
    def quick(cls, **changes) -> BenchConfig:
        """A few minutes on 2 CPU cores with the bundled model; with a real-size small-family architecture (whose
        every frame is a 512 or 448 px vision pass, seconds on a CPU), 6 s of stream (12 frames at 2 fps), re-encoding 16
        frames (the engine's 8 s window at 2 fps) and 6 s of the live run."""
        from streamvid.checkpoints.real_size import ARCHS

        arch = ARCHS.get(changes.get("arch") or "")
        if arch is not None and not arch.tiny:
            return cls(**{"minutes": (0.1,), "questions": 2, "repeats": 1, "interference_s": 6.0,
                          "reencode_frames": (16,), "decode_tokens": 8, "quick_run": True, **changes})
        return cls(**{"minutes": (1.0, 5.0, 30.0), "questions": 3, "repeats": 2, "interference_s": 20.0,
                      "quick_run": True, **changes})

    @property
    def px(self) -> int:
        from streamvid.checkpoints.real_size import ARCHS

        if self.frame_px:
            return self.frame_px
        return 112 if self.arch == "tiny" else ARCHS[self.arch].frame_px if self.arch in ARCHS else 448


def load(cfg: BenchConfig):
    """The adapter the bench runs: the bundled model, or a random-weight architecture."""
    from streamvid.adapters.base import adapter_for
    from streamvid.checkpoints import real_size
    from streamvid.config import EngineConfig

    if cfg.arch == "tiny":
        if cfg.layers is not None:
            raise ValueError("--layers applies to the real-size architectures (the bundled model runs whole)")
        return adapter_for(EngineConfig.from_settings(device=cfg.device, dtype=cfg.dtype))
    if cfg.arch in real_size.ARCHS:
        return real_size.random_adapter(cfg.arch, cfg.layers, device=cfg.device, dtype=cfg.dtype)
    from streamvid.checkpoints.random_arch import random_adapter

    return random_adapter(cfg.arch, cfg.layers, device=cfg.device, dtype=cfg.dtype)


def run_bench(cfg: BenchConfig, adapter=None, log=lambda msg: None) -> dict:
    """The full report: every measurement with its setting."""
    adapter = adapter or load(cfg)
    frames = _frame_pool(cfg.px)
    report = {"config": asdict(cfg), "model": _model_name(adapter, cfg), "hardware": hardware(adapter),
              "commit": commit()}
    if cfg.streams:  # the many-streams measurement alone
        from streamvid.cli.bench_streams import StreamsConfig, run_streams

        seconds = {} if cfg.streams_seconds is None else {"seconds": cfg.streams_seconds}
        scfg = (StreamsConfig.quick if cfg.quick_run else StreamsConfig)(counts=cfg.streams, fps=cfg.fps,
                                                                         max_new_tokens=cfg.max_new_tokens, **seconds)
        log(f"streamvid bench: {report['model']} on {report['hardware']['device']}; streams {cfg.streams}")
        report["streams"] = run_streams(adapter, _engine_config(cfg), scfg, _frame_pool(cfg.px), log)
        return report
    report["budgets"] = _budgets(adapter, cfg)
    log(f"streamvid bench: {report['model']} on {report['hardware']['device']}; {report['budgets']}")
    report["stream"] = _stream(adapter, cfg, frames, log)
    report["reencode"] = _reencode(adapter, cfg, frames, log)
    report["interference"] = _interference(adapter, cfg, frames, log)
    return report


def summary(report: dict) -> dict:
    """The one object `--json` prints:
    {"ingest_frames_per_s", "ttft_ms_p50": {"<minutes>": ms}, "ttft_ratio_long_short", "rss_mb": {"<minutes>": MB},
     "reencode_ttft_ms": {"16": ms, "32": ms, "64": ms}, "speedup_vs_reencode_64", "frames_dropped_under_questions",
     "decode_tokens_per_s"}
    TTFT is with retrieval (top-k memory blocks), from the question's arrival; the ratio is the longest stream's
    p50 over the 5-minute one (the shortest when 5 minutes was not measured); the speedup is re-encoding 64 frames
    over the engine's p50 at the longest stream (None when 64 was not measured); the decode rate is the engine's (None
    when every answer ended at its first token). With --streams, {"streams": [...]} (bench_streams.py)."""
    if "streams" in report:
        return {"streams": report["streams"]}
    points = report["stream"]["points"]
    ttft = {_key(p["minutes"]): p["ttft_ms_retrieval"]["p50"] for p in points}
    short = next((p for p in points if p["minutes"] == 5.0), points[0])
    long = points[-1]
    reencode = {str(n): r["ttft_ms_p50"] for n, r in report["reencode"].items()}
    return {
        "ingest_frames_per_s": report["stream"]["ingest_frames_per_s"],
        "ttft_ms_p50": ttft,
        "ttft_ratio_long_short": _round(long["ttft_ms_retrieval"]["p50"] / short["ttft_ms_retrieval"]["p50"], 3),
        "rss_mb": {_key(p["minutes"]): p["rss_mb"] for p in points},
        "reencode_ttft_ms": reencode,
        "speedup_vs_reencode_64": (_round(reencode["64"] / long["ttft_ms_retrieval"]["p50"], 1)
                                   if "64" in reencode else None),
        "frames_dropped_under_questions": report["interference"]["frames_dropped"],
        "decode_tokens_per_s": report["stream"]["decode"]["tokens_per_s"],
    }


# ---- the parts ------------------------------------------------------------------------------------------
def _stream(adapter, cfg: BenchConfig, frames: list[np.ndarray], log) -> dict:
    from streamvid.assistant.assistant import StreamingAssistant
    from streamvid.language.asked import Question
    from streamvid.types import Frame

    engine = _engine_config(cfg)
    points = []
    ingest_cpu_s = 0.0
    with StreamingAssistant(engine, adapter=adapter) as sa:
        # answers of one token: the whole call is the time to the first token, on the wall clock and in CPU time
        # of this thread (which on a shared CPU does not count the time other processes held the core)
        first = engine.replace(max_new_tokens=1)
        retrieving = sa.reasoner(first.replace(retrieve_for_now=True))  # every question searches memory
        plain = sa.reasoner(first.replace(memory_top_k=0), memory=False)  # the same window, no retrieval
        index = 0
        t_wall = time.perf_counter()
        for minutes in sorted(cfg.minutes):
            n_frames = int(round(minutes * 60 * cfg.fps))
            c0 = time.thread_time()
            sa.feed(Frame(frames[i % len(frames)], i / cfg.fps, i) for i in range(index, n_frames))
            index = max(index, n_frames)
            ingest_cpu_s += time.thread_time() - c0
            if sa.memory is not None:
                sa.memory.flush()
            wall = {"r": [], "p": []}
            cpu = {"r": [], "p": []}
            for i in range(cfg.questions):
                text = QUESTIONS[i % len(QUESTIONS)]
                for kind, worker in (("r", retrieving), ("p", plain)):
                    c0 = time.thread_time()
                    wall[kind].append(worker.handle(Question(f"{kind}{i}", text, index / cfg.fps)).data["ttft_ms"])
                    cpu[kind].append(1000 * (time.thread_time() - c0))
            mem = sa.memory.stats() if sa.memory is not None else None
            point = {"minutes": minutes, "ttft_ms_retrieval": _pcts(wall["r"]),
                     "ttft_ms_no_retrieval": _pcts(wall["p"]), "ttft_cpu_ms_retrieval": _pcts(cpu["r"]),
                     "ttft_cpu_ms_no_retrieval": _pcts(cpu["p"]),
                     "rss_mb": rss_mb(), "device_mb": _device_mb(adapter), "window_tokens": sa.window.tokens,
                     "memory_blocks": mem.blocks if mem else 0, "memory_ram_mb": round(mem.ram_mb, 1) if mem else 0,
                     "memory_disk_mb": round(mem.disk_mb, 1) if mem else 0,
                     "memory_index_rows": mem.index_rows if mem else 0,
                     "wall_s": round(time.perf_counter() - t_wall, 1)}
            points.append(point)
            log(f"  {minutes:g} min of stream: TTFT p50 {point['ttft_ms_retrieval']['p50']} ms with retrieval "
                f"({point['ttft_cpu_ms_retrieval']['p50']} ms CPU), {point['ttft_ms_no_retrieval']['p50']} ms without "
                f"({point['ttft_cpu_ms_no_retrieval']['p50']} ms CPU); RSS {point['rss_mb']} MB; "
                f"{point['memory_blocks']} memory blocks, {point['memory_index_rows']} index rows "
                f"({point['wall_s']} s so far)")
        decode = _decode_rate(sa, engine.replace(max_new_tokens=cfg.decode_tokens), cfg, index)
        log(f"  decoding {cfg.decode_tokens}-token answers: {decode['tokens_per_s']} tokens/s "
            f"({decode['tokens']} tokens in {decode['answers']} answers)")
        rate = sa.ingest.frames_in / sa.ingest.encode_s
        cpu_rate = sa.ingest.frames_in / ingest_cpu_s
    return {"ingest_frames_per_s": round(rate, 1 if rate >= 10 else 2), "ingest_frames_per_cpu_s": round(cpu_rate, 1),
            "real_time_factor": {"1fps": round(rate / 1, 2), "2fps": round(rate / 2, 2)}, "points": points,
            "decode": decode}


def _decode_rate(sa, config, cfg: BenchConfig, index: int) -> dict:
    """Answers of up to `decode_tokens` tokens with retrieval on the stream as it is: tokens after the first over
    the time after the first (the answer's own `tokens_per_s`), pooled over the answers."""
    from streamvid.language.asked import Question

    worker = sa.reasoner(config.replace(retrieve_for_now=True))
    tokens, seconds, answers = 0, 0.0, 0
    for i in range(max(1, cfg.questions)):
        data = worker.handle(Question(f"d{i}", QUESTIONS[i % len(QUESTIONS)], index / cfg.fps)).data
        answers += 1
        if data.get("tokens_per_s"):  # None when the answer ended at its first token
            tokens += data["tokens"] - 1
            seconds += (data["tokens"] - 1) / data["tokens_per_s"]
    return {"tokens_per_s": _round(tokens / seconds, 1) if seconds else None, "tokens": tokens, "answers": answers}


def _reencode(adapter, cfg: BenchConfig, frames: list[np.ndarray], log) -> dict:
    out = {}
    for n in cfg.reencode_frames:
        clip = [frames[i % len(frames)] for i in range(n)]
        adapter.offline_generate(clip[:2], QUESTIONS[0], 1, fps=cfg.fps)  # warm-up
        times = []
        for r in range(cfg.repeats):
            t0 = time.perf_counter()
            adapter.offline_generate(clip, QUESTIONS[r % len(QUESTIONS)], 1, fps=cfg.fps)
            times.append(1000 * (time.perf_counter() - t0))
        out[n] = {"ttft_ms_p50": _round(statistics.median(times), 1), "runs": [_round(t, 1) for t in times]}
        log(f"  re-encoding {n} frames with HF generate: first token after {out[n]['ttft_ms_p50']} ms")
    return out


def _interference(adapter, cfg: BenchConfig, frames: list[np.ndarray], log) -> dict:
    from streamvid.assistant.assistant import StreamingAssistant
    from streamvid.media.synthetic_source import SyntheticSource

    n = int(cfg.interference_s * cfg.fps)
    source = SyntheticSource(lambda i, t: frames[i % len(frames)], cfg.fps, n, live=True)
    ttfts = []
    asked = 0
    with StreamingAssistant(_engine_config(cfg), adapter=adapter) as sa:
        sa.start(source)
        next_ask = time.monotonic() + 1.0
        while not sa.ingest_done.is_set():
            if time.monotonic() >= next_ask:
                try:
                    sa.ask(QUESTIONS[asked % len(QUESTIONS)])
                    asked += 1
                except RuntimeError:  # BusyError: the queue is full; count it as not asked
                    pass
                next_ask += 1.0
            for out in sa.outputs(timeout_s=0.05):
                if out.kind == "answer" and out.ttft_ms is not None:
                    ttfts.append(out.ttft_ms)
        for out in sa.outputs(timeout_s=2.0):
            if out.kind == "answer" and out.ttft_ms is not None:
                ttfts.append(out.ttft_ms)
        stats = sa.ingest.stats()
    result = {"stream_s": cfg.interference_s, "fps": cfg.fps, "questions_asked": asked, "answers": len(ttfts),
              "frames_in": stats["frames_in"], "frames_dropped": stats["frames_dropped"],
              "ingest_frames_per_s": _round(stats["ingest_frames_per_s"], 1), "ttft_ms": _pcts(ttfts)}
    log(f"  live at {cfg.fps:g} fps with a question a second: {result['frames_dropped']} of "
        f"{result['frames_in'] + result['frames_dropped']} frames dropped, TTFT p50 {result['ttft_ms']['p50']} ms")
    return result


# ---- helpers ----------------------------------------------------------------------------------------------
def _engine_config(cfg: BenchConfig):
    from streamvid.config import EngineConfig

    return EngineConfig.from_settings(model="bench", device=cfg.device, dtype=cfg.dtype, fps=cfg.fps,
                        max_new_tokens=cfg.max_new_tokens, memory_top_k=cfg.memory_top_k, dialogue_turns=0)


def _budgets(adapter, cfg: BenchConfig) -> str:
    from streamvid.kv.budget import budgets

    engine = _engine_config(cfg)
    return budgets(adapter.kv_shape, adapter.tokens_per_chunk(cfg.px, cfg.px, engine.frames_per_chunk),
                   engine).describe()


def _frame_pool(px: int, n: int = 16) -> list[np.ndarray]:
    """Synthetic frames: coloured squares on a grey background, different in every frame (speed does not
    depend on what they show)."""
    rng = np.random.default_rng(0)
    pool = []
    for _ in range(n):
        img = np.full((px, px, 3), 128, np.uint8)
        for _ in range(3):
            x, y = rng.integers(0, px - px // 4, 2)
            img[y:y + px // 4, x:x + px // 4] = rng.integers(0, 256, 3)
        pool.append(img)
    return pool


def rss_mb() -> float:
    """The process's current resident set size (Linux /proc; peak RSS elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _device_mb(adapter) -> float | None:
    device = getattr(adapter, "device", torch.device("cpu"))
    if device.type != "cuda":
        return None
    return round(torch.cuda.memory_allocated(device) / 2**20, 1)


def hardware(adapter) -> dict:
    device = getattr(adapter, "device", torch.device("cpu"))
    out = {"device": str(device), "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
           "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
           "dtype": str(getattr(adapter, "dtype", "")).removeprefix("torch.")}
    try:
        out["cpus_usable"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    return out


def commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=Path(__file__).resolve().parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _model_name(adapter, cfg: BenchConfig) -> str:
    from streamvid.checkpoints.real_size import ARCHS

    if cfg.arch == "tiny":
        return "bundled streamvid-tiny"
    layers = f", {cfg.layers} layers" if cfg.layers else ""
    if cfg.arch in ARCHS:
        kind = "" if ARCHS[cfg.arch].tiny else " architecture"
        return f"{ARCHS[cfg.arch].title}{kind}, random weights{layers}, {cfg.px} px frames"
    return f"Qwen2.5-VL-{cfg.arch.upper()} architecture, random weights{layers}, {cfg.px} px frames"


def _pcts(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p90": None, "n": 0}
    v = sorted(values)
    return {"p50": _round(statistics.median(v), 1), "p90": _round(v[min(len(v) - 1, int(0.9 * len(v)))], 1),
            "n": len(v)}


def _key(minutes: float) -> str:
    return f"{minutes:g}"


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(float(x), digits)


def write(report: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench.json"
    path.write_text(json.dumps({**report, "summary": summary(report)}, indent=1))
    return path

