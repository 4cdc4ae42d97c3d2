"""`streamvid bench --json`: one object of the documented shape (timings are the bench's business, not a test's)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_json_has_the_documented_shape(tmp_path):
    """The `--quick` path a user runs, end to end, with shorter streams."""
    p = subprocess.run([sys.executable, "-m", "streamvid.cli", "bench", "--quick", "--json", "--minutes", "0.2", "0.5",
                        "--interference-s", "3", "--repeats", "1", "--questions", "2", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, "--json prints exactly one object"
    out = json.loads(lines[0])
    assert set(out) == {"ingest_frames_per_s", "ttft_ms_p50", "ttft_ratio_long_short", "rss_mb", "reencode_ttft_ms",
                        "speedup_vs_reencode_64", "frames_dropped_under_questions", "decode_tokens_per_s"}
    assert set(out["ttft_ms_p50"]) == set(out["rss_mb"]) == {"0.2", "0.5"}
    assert set(out["reencode_ttft_ms"]) == {"16", "32", "64"}
    numbers = [out["ingest_frames_per_s"], out["ttft_ratio_long_short"], out["speedup_vs_reencode_64"],
               *out["ttft_ms_p50"].values(), *out["rss_mb"].values(), *out["reencode_ttft_ms"].values()]
    assert all(isinstance(x, (int, float)) and x > 0 for x in numbers)
    assert isinstance(out["frames_dropped_under_questions"], int) and out["frames_dropped_under_questions"] >= 0
    full = json.loads((tmp_path / "bench.json").read_text())
    assert full["summary"] == out and full["commit"] and full["hardware"]["device"] == "cpu"
    points = full["stream"]["points"]
    assert [p["memory_blocks"] > 0 for p in points] == [True, True], "blocks left the window into memory"
    assert all(p["ttft_ms_no_retrieval"]["n"] == 2 for p in points)


def test_gpu_check_script_runs_on_the_cpu_with_the_bundled_model(tmp_path):
    """benchmarks/gpu_check.sh, prepared for a GPU machine, run as its header says on a CPU: one summary per arch."""
    import os
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.sh"
    env = {**os.environ, "ARCHES": "tiny", "DEVICE": "cpu", "DTYPE": "float32", "OUT": str(tmp_path),
           "BENCH_ARGS": "--minutes 0.2 --interference-s 2 --repeats 1 --questions 1", "STREAMS_ARCH": "tiny",
           "STREAMS_ARGS": "--quick --streams 1,2 --streams-seconds 3"}
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr
    summaries = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 2 and set(summaries[0]["reencode_ttft_ms"]) == {"16", "32", "64"}
    assert (tmp_path / "tiny" / "bench.json").is_file()
    streams = summaries[1]["streams"]  # many streams on one engine, batched and one forward per stream
    assert [s["n"] for s in streams] == [1, 2] and all(s["fps_per_stream"] == 2.0 for s in streams)
    for entry in streams:
        for way in ("batched", "unbatched"):
            assert set(entry[way]) >= {"frames_dropped", "ttft_ms_p50", "ttft_ms_p95", "saturated_frames_per_s"}
            assert entry[way]["frames_in"] > 0 and entry[way]["saturated_frames_per_s"] > 0
            runs = entry[way]["saturated_runs"]  # three saturated runs per way, taken in turns; the median reported
            assert len(runs) == 3 and entry[way]["saturated_frames_per_s"] == sorted(runs)[1]
