"""OVO-Bench (`ovo_bench_new.json`) to stream episodes.

Source read: JoeLeelyf/OVO-Bench — `data/ovo_bench_new.json` (the annotations), `utils/OVOBench.py` (the
offline loader and prompt building), `constant.py` (task lists and prompt templates), `utils/OVOBenchScore.py`
(scoring), `utils/chunk_videos.py` (the clip each question sees).

The file is one JSON list; each record has `id` (int), `task`, `video` (a path relative to the source-video
folder, e.g. "COIN/Hf2AisK1wHY.mp4"). By task:

* Backward tracing (EPM, ASI, HLD) and real-time perception (STU, OJR, ATR, ACR, OCR, FPD): `question`,
  `options` (a list of option texts), `gt` (the index of the right option; the gold letter is chr(65 + gt)),
  `realtime` (seconds, int or float): the question time. One `user_query` at `realtime` with options lettered
  "A. ..." and an `expected_answer` {"letter", "text"} scored by first letter. Official scoring
  (`calculate_score_backward_realtime`): correct when the gold letter occurs anywhere in the reply
  (`gt in response`, case-sensitive); the report gives that as "official" next to strict and lenient letter
  matching.
* Forward active responding: the question is asked again at every `test_info[i].realtime`:
  - REC: `activity`, `test_info[i].count`; the question is "How many times did they <activity>?"; correct
    when the digits of the reply, joined, equal the count (`get_score_REC`).
  - SSR: `test_info[i].step` and `type` (1: the step is being performed now, 0: not); yes/no.
  - CRR: `question`, `test_info[i].type` (1: the clue has been shown by then, 0: not); yes/no.
  Yes/no probes are correct when "Yes"/"No" occurs in the reply, case-sensitive, or the reply is exactly
  "Y"/"N" (`get_score_SSR_CRR`). Each probe is one `user_query` with its own `expected_answer`.

Prompts: each query carries `prompt` naming its OVO template (`ovo-bench`, `ovo-bench-rec`, `ovo-bench-ssr`,
`ovo-bench-crr`, rendered by eval/prompts.py as `constant.py` words them; backward/real-time options are joined
"A. x; B. y;").

What the model may see: OVO cuts the source video from 0 to ceil(realtime) per question (`chunk_videos.py`);
here a question at `realtime` sees frames up to `realtime` exactly (at most one second less than OVO's clip).
Scores: per task the mean over its questions (forward: over probes), per category the mean of its tasks, and
overall the mean of the three categories (`OVOBenchOfflineScore.score`).

Dialogue: OVO asks every question, and every forward probe, in a prompt of its own on its own clip
(`OVOBenchOffline.eval`: one `inference(clip, prompt)` per question, no earlier question or answer in it), so
each episode's `protocol.dialogue_turns` is 0: the scorer keeps no earlier turns for these questions.

Episodes: one per source video, holding every question on it (`video.path` = --videos / `video`).
"""

from __future__ import annotations

from pathlib import Path

from .common import LETTERS, EpisodeBuilder, Record, group, lettered, read_json, records, video_under

BACKWARD = ("EPM", "ASI", "HLD")
REALTIME = ("STU", "OJR", "ATR", "ACR", "OCR", "FPD")
FORWARD = ("REC", "SSR", "CRR")
CATEGORY = {**{t: "backward" for t in BACKWARD}, **{t: "realtime" for t in REALTIME},
            **{t: "forward" for t in FORWARD}}


def convert(files: list[str | Path], videos_dir: str | Path) -> list[dict]:
    recs: list[Record] = []
    for f in files:
        recs += records(read_json(f), Path(f).name, label_key="id")
    seen: dict[int, Record] = {}
    keyed = []
    for rec in recs:
        rec.check_object()
        rid = rec.integer("id")
        if rid in seen:
            raise rec.fail("id", f"repeats the id of {seen[rid].where}")
        seen[rid] = rec
        task = rec.text("task")
        if task not in CATEGORY:
            raise rec.fail("task", f"expected one of {', '.join(CATEGORY)}, got {task!r}")
        keyed.append((rec.text("video"), rec))
    episodes = []
    for video, items in group(keyed).items():
        ep = EpisodeBuilder("ovo-bench", video, video_under(videos_dir, video), task="mixed",
                            protocol={"context": "prefix", "context_window_s": None, "decision_hz": None,
                                      "dialogue_turns": 0})  # each question asked on its own
        for rec in items:
            _events(ep, rec)
        ep.orig_id = sorted(rec.data["id"] for rec in items)
        episodes.append(ep.build())
    return episodes


def _events(ep: EpisodeBuilder, rec: Record) -> None:
    task, rid = rec.data["task"], rec.data["id"]
    category = CATEGORY[task]
    if category != "forward":
        t = rec.number("realtime")
        question = rec.text("question")
        options = rec.items("options", min_len=2)
        for i, opt in enumerate(options):
            if not isinstance(opt, str):
                raise rec.fail("options", f"expected text options, got option {i} = {opt!r}")
        if len(options) > len(LETTERS):
            raise rec.fail("options", f"expected at most {len(LETTERS)} options, got {len(options)}")
        gt = rec.integer("gt")
        if not 0 <= gt < len(options):
            raise rec.fail("gt", f"expected an option index 0..{len(options) - 1}, got {gt}")
        qid = ep.query(t, question, task=task, category=category, options=lettered(options), prompt="ovo-bench",
                       orig_id=rid)
        ep.answer(qid, {"letter": LETTERS[gt], "text": options[gt]}, "mc_first_letter")
        return
    tests = rec.items("test_info", min_len=1)
    if task == "REC":
        activity = rec.text("activity")
    elif task == "CRR":
        question = rec.text("question")
    for i in range(len(tests)):
        info = rec.child("test_info", i)
        t = info.number("realtime")
        if task == "REC":
            count = info.integer("count")
            if count < 0:
                raise info.fail("count", f"expected a count >= 0, got {count}")
            qid = ep.query(t, f"How many times did they {activity}?", task=task, category=category,
                           prompt="ovo-bench-rec", orig_id=rid, probe_index=i)
            ep.answer(qid, {"text": str(count)}, "ovo_count")
            continue
        kind = info.integer("type")
        if kind not in (0, 1):
            raise info.fail("type", f"expected 0 or 1, got {kind}")
        text = info.text("step") if task == "SSR" else question
        qid = ep.query(t, text, task=task, category=category, prompt=f"ovo-bench-{task.lower()}", orig_id=rid,
                       probe_index=i)
        ep.answer(qid, {"text": "Yes" if kind == 1 else "No"}, "ovo_yes_no")
