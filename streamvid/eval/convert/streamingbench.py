"""StreamingBench (`questions_real.json`, `questions_omni.json`, `questions_sqa.json`,
`questions_proactive.json`) to stream episodes.

Source read: THUNLP-MT/StreamingBench — `src/data/questions_*.json` (the annotations),
`src/benchmark/StreamingBench.py` (real-time and omni-source loader and prompt),
`src/benchmark/StreamingBenchSQA.py` (sequential QA and its history), `src/benchmark/StreamingBenchProactive.py`
(proactive polling), `src/utils/video_execution.py` (the clip each question sees), `src/data/count.py`
(scoring), `scripts/eval.sh` (CONTEXT_TIME).

Layouts:
* real, omni, proactive: a JSON list of video segments {`video_path`, `questions`: [...], `time`,
  `video_categories`?}; several segments may share one `video_path`.
* sqa: a JSON list of videos, each a list of such segments; the questions of one video form one sequence.

Questions: `time_stamp` is a clock string ("00:03:10"; also "MM:SS"), the question time, read as the loaders
read it (the sum of int(part) * 60**i from the right); a clock that is not canonical (the published
questions_real.json has "00:12450") is read the same way and listed in the episode's `meta.warnings`. Real, omni and sqa
questions carry `task_type`, `question`, `options` (four or more texts, usually already "A. ..."; the loader
adds "A. " ... "D. " when the first option lacks "A.") and `answer` (the letter). The official prompt
(`PROMPT_TEMPLATE`) shows four options and ends "The best option is:"; scoring (`count.py`) takes the reply's
first character and compares it with the letter (this is "official" in the report; strict and lenient are
also given). Proactive questions carry `ground_truth_time_stamp` and `ground_truth_output`.

Sequential QA: each question's prompt holds the earlier questions of the same video with their options and
GOLD answers ("At timestamp T, the following question and answer occurred: ..."). That history becomes
`context` events placed right after each question, shown by the `streamingbench-sqa` template to the later
questions only.

Proactive output: the question is asked at `time_stamp`; the official protocol polls every second from
`time_stamp + 1` to `ground_truth_time_stamp + 4`, asking whether it is the right time to output the gold
output; the first "yes" is the reply time, after which the question is asked for the output. A reply counts as
timely within ±2 s of the gold time and as right when the gold output occurs in it (`count.py`). Here: a
`user_query` plus an `expected_response` with `t_gold` = the gold time, window [t_gold - 2, t_gold + 2] and the
gold output; the query's `poll` field holds the polling range [time_stamp + 1, gold + 4]. Each poll's clip runs
from `time_stamp` to the poll time (`split_video(video_path, start_time, current_time)`), not from 0.

What the model may see: `split_video(video, start, timestamp)` with start = 0 for CONTEXT_TIME = -1 (the
published setting), i.e. the video up to the question time; times are whole seconds in the files.

Options are kept as published, blemishes included (some omni questions have empty or split option entries, or
more than four); the prompt shows the first four entries as the official template does, and such questions
are listed in `meta.warnings`.

Dialogue: every subset asks each question in a prompt of its own (one model call per question on its clip);
the sqa history is the earlier questions with their GOLD answers, written into the prompt by the template (the
`context` events), not the model's own earlier answers. So each episode's `protocol.dialogue_turns` is 0: the
scorer keeps no earlier turns of its own.

Episodes: one per `video_path` (for sqa, one per video sequence); `video.path` = --videos / the file name of
`video_path` (the files use "./videos/<name>.mp4"). `category` is the subset (real, omni, sqa, proactive)
and `task` the `task_type`.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from .common import (
    LETTERS,
    ConvertError,
    EpisodeBuilder,
    Record,
    lettered,
    read_json,
    records,
    video_under,
)

SUBSETS = ("real", "omni", "sqa", "proactive")
POLL_AFTER_GOLD_S = 4.0  # StreamingBenchProactive: max_time = ground truth + 4
TOLERANCE_S = 2.0  # count.py: -2 <= last_time - ground_truth_time <= 2


def convert(files: list[str | Path], videos_dir: str | Path) -> list[dict]:
    episodes: dict[str, EpisodeBuilder] = {}
    for f in files:
        name = Path(f).name
        data = read_json(f)
        subset = _subset(name, data)
        if subset == "sqa":
            for video_rec in records(data, name, where="video"):
                if not isinstance(video_rec.data, list) or not video_rec.data:
                    raise video_rec.fail(None, "expected a non-empty list of segments (the sqa layout)")
                segments = [Record(s, name, f"{video_rec.where}[{j}]").check_object()
                            for j, s in enumerate(video_rec.data)]
                _add_video(episodes, segments, subset, videos_dir, sequence=True)
        else:
            by_video: dict[str, list[Record]] = {}
            for seg in records(data, name, where="segment"):
                seg.check_object()
                by_video.setdefault(seg.text("video_path"), []).append(seg)
            for segments in by_video.values():
                _add_video(episodes, segments, subset, videos_dir, sequence=False)
    return [ep.build() for ep in episodes.values()]


def _subset(name: str, data) -> str:
    stem = Path(name).stem
    for s in SUBSETS:
        if stem == f"questions_{s}" or stem.startswith(f"questions_{s}_") or stem == s:
            if s == "sqa" and not (isinstance(data, list) and data and isinstance(data[0], list)):
                raise ConvertError(f"{name}: expected the sqa layout (a list of videos, each a list of segments)")
            return s
    # not named as published: tell the layouts apart by their content
    if isinstance(data, list) and data and isinstance(data[0], list):
        return "sqa"
    if isinstance(data, list) and data and isinstance(data[0], dict):
        qs = data[0].get("questions") or [{}]
        if isinstance(qs, list) and qs and isinstance(qs[0], dict) and "ground_truth_output" in qs[0]:
            return "proactive"
    raise ConvertError(f"{name}: cannot tell which StreamingBench subset this is; name it "
                       f"questions_{{{','.join(SUBSETS)}}}.json as published")


def _add_video(episodes: dict[str, EpisodeBuilder], segments: list[Record], subset: str, videos_dir,
               sequence: bool) -> None:
    video_path = segments[0].text("video_path")
    for seg in segments[1:]:
        if seg.text("video_path") != video_path:
            raise seg.fail("video_path", f"expected {video_path!r} like the rest of its sequence, "
                                         f"got {seg.data['video_path']!r}")
    file_name = PurePosixPath(video_path).name
    key = f"{subset}/{PurePosixPath(video_path).stem}"
    if key in episodes:
        raise segments[0].fail("video_path", f"video {video_path!r} appears twice in the {subset} subset")
    ep = EpisodeBuilder("streamingbench", key, video_under(videos_dir, file_name), task=subset,
                        protocol={"context": "prefix", "context_window_s": None, "decision_hz": None,
                                  "dialogue_turns": 0})  # each question asked on its own (sqa: gold history)
    ep.orig_id = video_path
    categories = sorted({s.data["video_categories"] for s in segments
                         if isinstance(s.data.get("video_categories"), str)})
    if categories:
        ep.meta["video_categories"] = categories
    for seg in segments:
        questions = seg.items("questions", min_len=1)
        for i in range(len(questions)):
            q = seg.child("questions", i, label_key="task_type")
            if subset == "proactive":
                _proactive(ep, q)
            else:
                _multiple_choice(ep, q, subset, sequence)
    episodes[key] = ep


def _clock(ep: EpisodeBuilder, q: Record, name: str) -> float:
    t, canonical = q.clock(name)
    if not canonical:
        ep.meta.setdefault("warnings", []).append(
            f"{q.where}: {name} {q.data[name]!r} read as {t:g} s, as the official loader reads it")
    return t


def _multiple_choice(ep: EpisodeBuilder, q: Record, subset: str, sequence: bool) -> None:
    t = _clock(ep, q, "time_stamp")
    options = q.items("options", min_len=2)
    for i, opt in enumerate(options):
        if not isinstance(opt, str):
            raise q.fail("options", f"expected option texts, got option {i} = {opt!r}")
    answer = q.text("answer").strip()
    if len(answer) != 1 or answer not in LETTERS:
        raise q.fail("answer", f"expected an option letter A..{LETTERS[-1]}, got {q.data['answer']!r}")
    # the loader letters the options only when the first one lacks "A."
    shown = options if options[0].startswith("A.") else lettered(options)
    labelled = [o for o in shown if o.startswith(f"{answer}.")]
    idx = LETTERS.index(answer)
    if labelled:
        text = labelled[0][2:].strip()
    elif idx < len(shown):
        text = shown[idx]
    else:
        raise q.fail("answer", f"expected the letter of one of the {len(shown)} options, got {answer!r}")
    if len(shown) != 4 or any(not o.startswith(f"{LETTERS[i]}.") for i, o in enumerate(shown)):
        ep.meta.setdefault("warnings", []).append(
            f"{q.where}: options are not four texts lettered A..D ({len(shown)} entries); the prompt shows the "
            "first four entries, as the official template does")
    question = q.text("question")
    qid = ep.query(t, question, task=q.text("task_type"), category=subset, options=shown,
                   prompt="streamingbench-sqa" if sequence else "streamingbench",
                   **({"required_ability": q.data["required_ability"]}
                      if isinstance(q.data.get("required_ability"), str) else {}))
    ep.answer(qid, {"letter": answer, "text": text}, "mc_first_letter")
    if sequence:  # what StreamingBenchSQA appends to the history after this question (gold answer, 4 options)
        ep.context(t, f"At timestamp {q.data['time_stamp']}, the following question and answer occurred: "
                      f"Question: {question}; Options: {', '.join(shown[:4])}; Answer: {answer}; ", ref=qid)


def _proactive(ep: EpisodeBuilder, q: Record) -> None:
    t = _clock(ep, q, "time_stamp")
    t_gold = _clock(ep, q, "ground_truth_time_stamp")
    if t_gold < t:
        raise q.fail("ground_truth_time_stamp", f"expected a time at or after time_stamp ({t:g} s), got {t_gold:g} s")
    output = q.text("ground_truth_output")
    qid = ep.query(t, q.text("question"), task=q.text("task_type"), category="proactive",
                   prompt="streamingbench-proactive", gold_output=output,
                   poll=[t + 1.0, t_gold + POLL_AFTER_GOLD_S])
    ep.response(qid, t_gold, (t_gold - TOLERANCE_S, t_gold + TOLERANCE_S), output)
