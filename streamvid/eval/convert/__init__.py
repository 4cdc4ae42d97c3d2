"""Benchmark annotation files to stream episodes (docs/evaluation.md): one module per benchmark.

    streamvid convert ovo-bench|streamingbench|rvs|proactivevideoqa|svbench FILE... --videos DIR --out EPISODES.jsonl

Each module's docstring cites the official loader and evaluation code it follows and says what it maps where.
A record that breaks the published schema stops the conversion with one line naming the file, the record and
the field. Videos are not opened here: `video.path` is DIR / the benchmark's file name for the video, written
relative to the folder of EPISODES.jsonl when DIR is relative (so the file can be moved with its videos) and
absolute when DIR is absolute.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from . import ovo_bench, proactivevideoqa, rvs, streamingbench, svbench
from .common import ConvertError

CONVERTERS: dict[str, Callable[[list, str | Path], list[dict]]] = {
    "ovo-bench": ovo_bench.convert,
    "streamingbench": streamingbench.convert,
    "rvs": rvs.convert,
    "proactivevideoqa": proactivevideoqa.convert,
    "svbench": svbench.convert,
}


def convert(name: str, files: list[str | Path], videos_dir: str | Path) -> list[dict]:
    """Episodes (dicts) converted from `files`; video paths are under `videos_dir` as given."""
    if name not in CONVERTERS:
        raise ConvertError(f"unknown benchmark {name!r}; known: {', '.join(CONVERTERS)}")
    if not files:
        raise ConvertError(f"{name}: no annotation files given")
    episodes = CONVERTERS[name](list(files), videos_dir)
    if not episodes:
        raise ConvertError(f"{name}: the files hold no questions")
    ids = Counter(ep["episode_id"] for ep in episodes)
    dup = [i for i, n in ids.items() if n > 1]
    if dup:
        raise ConvertError(f"{name}: episode ids repeat across the files: {', '.join(sorted(dup)[:5])}")
    return episodes


def write(name: str, files: list[str | Path], videos_dir: str | Path, out: str | Path) -> dict:
    """Convert and write EPISODES.jsonl; returns a summary (episodes, questions per category, missing videos)."""
    out = Path(out)
    videos = Path(videos_dir)
    episodes = convert(name, files, videos)
    out.parent.mkdir(parents=True, exist_ok=True)
    missing = 0
    lines = []
    for ep in episodes:
        video = Path(ep["video"]["path"])
        missing += not video.is_file()
        if not videos.is_absolute():
            ep["video"]["path"] = os.path.relpath(video, out.parent.resolve()) if video.is_absolute() else \
                os.path.relpath(video.resolve(), out.parent.resolve())
        lines.append(json.dumps(ep, ensure_ascii=False))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    queries = [e for ep in episodes for e in ep["events"] if e["kind"] == "user_query"]
    return {"benchmark": name, "out": str(out), "episodes": len(episodes), "questions": len(queries),
            "by_category": dict(sorted(Counter(e.get("category", "?") for e in queries).items())),
            "videos_missing": missing,
            "warnings": [f"{ep['episode_id']}: {w}" for ep in episodes for w in ep["meta"].get("warnings", [])]}
