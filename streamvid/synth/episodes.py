"""ShapesWorld evaluation episodes in the stream-episode/1 format (docs/evaluation.md).

`streamvid synth --seed S --minutes N --out DIR` calls `write_dataset`, which writes
  DIR/shapes_<S>.mp4            the stream (H.264, see world.write_mp4)
  DIR/shapes_<S>.timeline.json  the exact timeline (world.Timeline.to_json; Timeline.from_json rebuilds it)
  DIR/episodes.jsonl            one episode: many families, each user_query / probe event carries "task"

The episode's video path is relative to the folder of episodes.jsonl. Given voices (`streamvid.audio.voices`), the
stream gets a speech track (`speech.py`): the mp4 carries it as AAC beside the same video, the timeline JSON its
gold lines ("speech"), and the episode the SPEECH_FAMILIES too, sampled after the visual families (whose
questions stay those of the same seed without sound).

Events per family:
- probe: a `probe` event (no `ref`) with gold "Yes"/"No".
- forward: `user_query` + `expected_response` with t_gold = the entry time, window [t_gold - 1, t_gold + 3].
- forward_said: the same, with t_gold = the end of the word (the end of its line) and gold_text the word.
- all others: `user_query` + `expected_answer` with gold {"text": answer}. Scorers assume case and punctuation
  are normalised: "exact" for yes/no and count answers (one token, where containment would be gamed by "yes or
  no"); "substring" (gold inside the reply) for colour / shape words and "colour shape" lists, so a reply such as
  "The star was red." scores. The speech families' answers (a line's words, a time "mm:ss") score by
  substring too: "Someone said alice stop." and "At 01:23." score.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from streamvid.audio.voices import Voice

from .questions import ALL_FAMILIES, FAMILIES, QA, SPEECH_FAMILIES, SPEECH_QUESTIONS
from .speech import SPEECH_RATE, speak, write_speech_mp4
from .world import CELL_PX, EPS, FRAME_PX, Timeline, generate, write_mp4

EXACT = {"realtime_count", "realtime_exists", "probe"}
TIMING = {"sigma_early": 1.5, "sigma_late": 0.75}


def _sample(tl: Timeline, family: str, rng, window_s: float, n: int, used: set[float]) -> list[QA]:
    """Up to n questions at distinct frame times; yes/no families alternate yes and no."""
    got: list[QA] = []
    for _ in range(60 * n):
        if len(got) >= n:
            break
        t = int(rng.integers(tl.n_frames)) / tl.fps
        qa = None if t in used else {**FAMILIES, **SPEECH_QUESTIONS}[family](tl, t, rng, window_s)
        if qa is None or (qa.answer in ("yes", "no") and qa.answer != ("yes", "no")[len(got) % 2]):
            continue
        got.append(qa)
        used.add(t)
    return got


def _events(tl: Timeline, i: int, qa: QA) -> list[dict]:
    if qa.family == "probe":
        return [{"id": f"p{i}", "t": qa.t_s, "kind": "probe", "text": qa.text, "gold": qa.answer.capitalize(),
                 "task": qa.family}]
    query = {"id": f"q{i}", "t": qa.t_s, "kind": "user_query", "text": qa.text, "task": qa.family}
    if qa.options:
        query["options"] = list(qa.options)
    if qa.family == "forward":
        t_gold = qa.evidence_s[0]
        tr = next(tr for tr in tl.tracks if abs(tr.enter_s - t_gold) < EPS)
        return [query, {"id": f"r{i}", "kind": "expected_response", "ref": f"q{i}", "t_gold": t_gold,
                        "window": [t_gold - 1.0, t_gold + 3.0], "gold_text": f"{tr.colours[0][1]} {tr.shape}",
                        "timing": dict(TIMING)}]
    if qa.family == "forward_said":
        t_gold = qa.evidence_s[1]
        line = next(u for u in tl.speech if abs(u.t_end_s - t_gold) < EPS)
        return [query, {"id": f"r{i}", "kind": "expected_response", "ref": f"q{i}", "t_gold": t_gold,
                        "window": [t_gold - 1.0, t_gold + 3.0], "gold_text": line.text.split()[-1],
                        "timing": dict(TIMING)}]
    scorer = "exact" if qa.family in EXACT else "substring"
    return [query, {"id": f"a{i}", "kind": "expected_answer", "ref": f"q{i}", "gold": {"text": qa.answer},
                    "scorer": scorer}]


def make_episode(timeline: Timeline, video_path: str | Path, rng: np.random.Generator, window_s: float = 16.0,
                 n_questions_per_family: int = 3, families=None) -> dict:
    """One stream-episode/1 dict with up to n questions per family (fewer where a family is rarely valid);
    families defaults to ALL_FAMILIES, then SPEECH_FAMILIES when the timeline has speech."""
    used: set[float] = set()
    families = families or (*ALL_FAMILIES, *(SPEECH_FAMILIES if timeline.speech else ()))
    qas = [qa for fam in families
           for qa in _sample(timeline, fam, rng, window_s, n_questions_per_family, used)]
    qas.sort(key=lambda qa: qa.t_s)
    return {
        "schema": "stream-episode/1",
        "episode_id": f"shapesworld-{timeline.seed}",
        "source": {"benchmark": "shapesworld", "task": "mixed", "orig_id": timeline.seed},
        "video": {"path": str(video_path), "t_start": 0.0, "t_end": timeline.duration_s},
        "protocol": {"context": "incremental", "context_window_s": None, "decision_hz": timeline.fps / 2},
        "events": [ev for i, qa in enumerate(qas) for ev in _events(timeline, i, qa)],
        "meta": {"seed": timeline.seed, "fps": timeline.fps, "window_s": window_s,
                 "tasks": sorted({qa.family for qa in qas})},
    }


def write_dataset(seed: int, minutes: float, out_dir: str | Path, fps: float = 2.0, size: int = FRAME_PX,
                  window_s: float = 16.0, n_questions_per_family: int | None = None, grid: int | None = None,
                  voices: Sequence[Voice] = ()) -> list[Path]:
    """Write the mp4, the timeline JSON and episodes.jsonl; returns their paths in that order.

    n_questions_per_family defaults to 3 per minute of stream (at least 2); grid (cells per side) defaults to one
    cell per 28-px token of a `size`-px frame. With voices, the stream gets a speech track spoken by them (each
    line by one of their variants); without, it has no audio stream."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tl = generate(seed, minutes * 60.0, fps, grid or size // CELL_PX)
    if voices:
        tl, track = speak(tl, voices, SPEECH_RATE)
        video = write_speech_mp4(tl, out / f"shapes_{seed}.mp4", track, SPEECH_RATE, size=size)
    else:
        video = write_mp4(tl, out / f"shapes_{seed}.mp4", size=size)
    tl_path = out / f"shapes_{seed}.timeline.json"
    tl_path.write_text(json.dumps(tl.to_json()))
    n = n_questions_per_family or max(2, round(3 * minutes))
    ep = make_episode(tl, video.name, np.random.default_rng([seed, 1]), window_s, n)
    ep["meta"].update(size=size, timeline=tl_path.name)
    if tl.speech is not None:
        ep["meta"]["speech"] = {"lines": len(tl.speech), "rate": SPEECH_RATE, "voices": [v.name for v in voices]}
    eps_path = out / "episodes.jsonl"
    eps_path.write_text(json.dumps(ep) + "\n")
    return [video, tl_path, eps_path]
