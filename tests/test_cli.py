"""`streamvid run` end to end on a real video that ships with gradio."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest


def world_mp4() -> Path:
    spec = importlib.util.find_spec("gradio")
    if spec is None:
        pytest.skip("gradio is not installed")
    return Path(spec.origin).parent / "media_assets" / "videos" / "world.mp4"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamvid.cli", *args], capture_output=True, text=True, timeout=300)


def test_run_prints_an_answer_per_ask_and_stats(tiny_model_dir):
    p = run("run", str(world_mp4()), "--model", str(tiny_model_dir), "--fps", "1", "--max-new-tokens", "4",
            "--window-tokens", "60", "--ask", "3:What is on screen?", "--ask", "25:What was on screen at 00:02?")
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    answers = [x for x in lines if x["type"] == "answer"]
    assert [a["t_s"] for a in answers] == [3.0, 25.0]
    assert all({"id", "question", "text", "ttft_ms", "evidence_t_s"} <= set(a) for a in answers)
    assert answers[1]["retrieved_blocks"], "the 00:02 question retrieves the evicted blocks at that time"
    stats = lines[-1]
    assert stats["type"] == "stats" and stats["frames_in"] >= 29 and stats["frames_dropped"] == 0
    budget = [line for line in p.stderr.splitlines() if "window 60 tokens" in line]
    assert len(budget) == 1 and "per token" in budget[0] and "memory (int8" in budget[0], p.stderr
    assert stats["blocks_in_memory"] > 0 and stats["window_tokens"] <= 60


def test_errors_are_one_line_with_nonzero_exit(tiny_model_dir, tmp_path):
    p = run("run", str(tmp_path / "nope.mp4"), "--model", str(tiny_model_dir))
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and "video file not found" in p.stderr
    p = run("run", str(world_mp4()), "--model", str(tiny_model_dir), "--ask", "soon:what?")
    assert p.returncode == 2 and "expected T:QUESTION" in p.stderr
