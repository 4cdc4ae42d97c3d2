"""`streamvid run` end to end on a real video that ships with gradio; engine flags shared by run, score and demo."""

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
            "--window-tokens", "60", "--ask", "3:What is on screen?", "--ask", "25:What was on screen at 00:02?", "-v")
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


def test_run_is_quiet_by_default_and_verbose_on_request():
    """The bundled model with no flags: its folder's settings are applied without a word (INFO lines only with -v);
    what stays on stderr is one plain sentence of the budgets (the window in seconds, memory in hours), with the
    figures behind it (tokens, MB) only with -v."""
    quiet = run("run", "shapes_7", "--ask", "20:What shape is blue?")
    assert quiet.returncode == 0, quiet.stderr
    assert any(json.loads(line)["type"] == "answer" for line in quiet.stdout.splitlines())
    lines = quiet.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamvid run: Answers look at the last 8 s of video"), lines
    assert "INFO" not in quiet.stderr and "tokens" not in quiet.stderr and "hours" in lines[0], quiet.stderr
    loud = run("run", "shapes_7", "--ask", "20:What shape is blue?", "-v")
    answers = [[json.loads(line).get("text") for line in p.stdout.splitlines()] for p in (quiet, loud)]
    assert loud.returncode == 0 and answers[0] == answers[1]
    assert sum("training.json" in line for line in loud.stderr.splitlines()) >= 3, loud.stderr
    assert any("window 8 s = 144 tokens" in line for line in loud.stderr.splitlines()), loud.stderr


def test_a_question_past_the_end_of_a_file_is_refused_in_one_line():
    """shapes_7 lasts 120 s: a question at 500 s is refused before the model loads, naming the clip's length."""
    p = run("run", "shapes_7", "--ask", "20:What shape is blue?", "--ask", "500:What shape is red?")
    assert p.returncode == 2 and p.stdout == "", p.stdout
    assert p.stderr.strip().count("\n") == 0 and "past the end of shapes_7.mp4, which lasts 120.0 s" in p.stderr
    at_end = run("run", "shapes_7", "--ask", "120:What shape is blue?")
    assert at_end.returncode == 0 and '"type": "answer"' in at_end.stdout, at_end.stderr


def test_errors_are_one_line_with_nonzero_exit(tiny_model_dir, tmp_path):
    p = run("run", str(tmp_path / "nope.mp4"), "--model", str(tiny_model_dir))
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and "video file not found" in p.stderr
    p = run("run", str(world_mp4()), "--model", str(tiny_model_dir), "--ask", "soon:what?")
    assert p.returncode == 2 and "expected T:QUESTION" in p.stderr


def _demo_parser():
    """app/cli.py's own `demo` parser, as the streamvid command line plugs it in."""
    import argparse

    from streamvid_app.cli import register

    p = argparse.ArgumentParser(prog="streamvid")
    register(p.add_subparsers(dest="command", required=True))
    return p


@pytest.mark.parametrize("argv", [["run", "v.mp4"], ["score", "e.jsonl"], ["demo"], ["serve"]])
def test_dialogue_turns_flag_reaches_the_engine_config(argv):
    from streamvid.cli.main import build_parser, engine_config

    parser = _demo_parser() if argv[0] == "demo" else build_parser()
    assert engine_config(parser.parse_args(argv)).generation.dialogue_turns == 2  # run, score, demo, serve alike
    for n in (0, 5):
        assert engine_config(parser.parse_args([*argv, "--dialogue-turns", str(n)])).generation.dialogue_turns == n


def _other_values(default):
    """Values other than a setting's default, as text for its flag, the likeliest valid first."""
    if isinstance(default, bool):
        return []  # a switch: --name / --no-name
    if isinstance(default, int):
        return [str(default + 1), str(max(1, default - 1))]
    if isinstance(default, float):
        return [repr(default * 0.75), repr(default * 1.25)]
    if isinstance(default, str):
        return ["x" + default, "clip:" + default]
    return ["3", "0.5", "64"]  # None: an int or a float


@pytest.mark.parametrize("command", ["run", "score", "demo", "serve"])
def test_every_engine_setting_has_its_flag_on_every_engine_command(command):
    """The flags are generated from the config's sections: each setting with help is a flag of run, score, demo
    and serve, and the value given reaches that setting (and only it)."""
    from streamvid.cli.main import build_parser, engine_config
    from streamvid.config import DEFAULTS, setting_fields

    parser = _demo_parser() if command == "demo" else build_parser()
    argv = {"run": ["run", "v.mp4"], "score": ["score", "e.jsonl"]}.get(command, [command])
    defaults = DEFAULTS.settings()
    flagged = [f.metadata["setting"] for _, f in setting_fields() if f.metadata["help"]]
    assert {"window_s", "memory_top_k", "max_new_tokens", "trigger_fire", "narrate", "max_batch", "fps",
            "frame_px", "embedder", "dialogue_turns"} <= set(flagged)
    for _, f in setting_fields():
        name = f.metadata["setting"]
        if name not in flagged:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(defaults[name], bool):
            attempts = [[flag] if not defaults[name] else ["--no-" + name.replace("_", "-")]]
        elif f.metadata["flag"].get("choices"):
            attempts = [[flag, c] for c in f.metadata["flag"]["choices"] if c != defaults[name]]
        else:
            attempts = [[flag, v] for v in _other_values(defaults[name])]
        for extra in attempts:
            try:
                config = engine_config(parser.parse_args([*argv, *extra]))
            except (ValueError, SystemExit):
                continue  # not a valid value of this setting (another is tried)
            changed = {k for k, v in config.settings().items() if v != defaults[k]} - {"frame_px"}
            assert changed == ({name} - {"frame_px"}), (name, extra, changed)
            break
        else:
            pytest.fail(f"{flag}: no value tried was taken")
    # the bundled model was trained on 112-px frames (its training.json says so): that is --frame-px's default
    assert engine_config(parser.parse_args(argv)).frame_px == 112
    assert engine_config(parser.parse_args([*argv, "--frame-px", "224"])).frame_px == 224
    # a report names the settings that differ from what this model gets by default: not the folder's frame size
    from streamvid.adapters.model_folder import model_settings

    config = engine_config(parser.parse_args(argv))
    assert config.changed(model_settings(config.model)) == {}
    assert config.changed() == {"frame_px": 112}


def test_negative_dialogue_turns_is_one_line(capsys):
    from streamvid.cli.main import main

    assert main(["run", "clip.mp4", "--dialogue-turns", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dialogue_turns must be >= 0, got -1" in err
