"""ProactiveVideoQA (`<subset>/anno.json`, subsets WEB, EGO, TV, VAD) to stream episodes.

Source read: the official repository (yellow-binary-tree/ProactiveVideoQA) could not be fetched here; the
schema follows the published `anno.json` records as redistributed in jxb1st/proactivevideoqa-viewer
(`EGO/anno.json`, `TV/anno.json`, `VAD/anno.json`, `WEB/anno.json`, and its README describing the subsets).

Each file is a JSON list of questions {`video`, `question_id`, `conversation`, `answer`, `duration`, and for TV
`frame`, `audio`}:
* `conversation`: user turns {`role`: "user", `time` (seconds), `content`}. The first turn is the question (at
  `time`, usually 0); in TV, later turns are subtitles ("Subtitle: (Speaker:)text") at their times.
* `answer`: the replies expected of the assistant {`role`: "assistant", `content`, `reply_timespan` [a, b]
  (when a reply is due), `related_timespan` [a, b] (what it is about), and `type` (EGO: step / substep) or
  `num_captions` (VAD)}.

Mapping: the question becomes a `user_query` at its time; each subtitle a `context` event at its time (kept in
the episode; the engine takes no timed text, so the model does not see them: TV questions are answered from
the frames alone); each
expected reply an `expected_response` with window = `reply_timespan`, `t_gold` = its start and the reply text as
gold, scored by Timeliness-F1 (eval/timeliness.py; K=1 and K=5 replies per window) and precision/recall at ±d s.
The benchmark's own metric, PAUC (an LLM judge scores each reply's content against the gold replies over time),
needs a judge model and is not reproduced. `category` is the subset (from the folder holding anno.json, or
the file name), `task` "proactive".

Dialogue: `protocol.dialogue_turns` is not set (the run's setting applies). Each episode holds one question, so
there is no earlier question of the episode to keep or to leave out, and the benchmark is a conversation (the
question, subtitles and the model's replies as turns), not a list of questions asked on their own.

Episodes: one per question (`question_id`), `video.path` = --videos / `video`, `t_end` = `duration`.
"""

from __future__ import annotations

from pathlib import Path

from .common import ConvertError, EpisodeBuilder, Record, read_json, records, video_under

SUBSETS = ("WEB", "EGO", "TV", "VAD")
SUBTITLE = "Subtitle:"


def convert(files: list[str | Path], videos_dir: str | Path) -> list[dict]:
    episodes, seen = [], {}
    for f in files:
        path = Path(f)
        subset = _subset(path)
        for rec in records(read_json(path), path.name, label_key="question_id"):
            rec.check_object()
            qid = str(rec.get("question_id", (str, int)))
            key = f"{subset}/{qid}"
            if key in seen:
                raise rec.fail("question_id", f"repeats {seen[key]}")
            seen[key] = rec.where
            episodes.append(_episode(rec, subset, key, videos_dir))
    return episodes


def _subset(path: Path) -> str:
    for name in (path.parent.name, path.stem):
        if name.upper() in SUBSETS:
            return name.upper()
    raise ConvertError(f"{path}: cannot tell the subset; keep the published layout <subset>/anno.json with "
                       f"subset one of {', '.join(SUBSETS)}")


def _episode(rec: Record, subset: str, key: str, videos_dir) -> dict:
    video = rec.text("video")
    ep = EpisodeBuilder("proactivevideoqa", key, video_under(videos_dir, video), orig_id=rec.data["question_id"],
                        task=subset, protocol={"context": "incremental", "context_window_s": None,
                                               "decision_hz": None})
    duration = rec.number("duration")
    ep.t_end = duration
    turns = rec.items("conversation", min_len=1)
    question = None
    for i in range(len(turns)):
        turn = rec.child("conversation", i)
        role = turn.text("role")
        if role != "user":
            raise turn.fail("role", f"expected 'user', got {role!r}")
        t, content = turn.time("time"), turn.text("content")
        if question is None:
            if content.startswith(SUBTITLE):
                raise turn.fail("content", "expected the question as the first user turn, got a subtitle")
            question = ep.query(t, content, task="proactive", category=subset, prompt="proactivevideoqa")
        else:
            ep.context(t, content, subtitle=content.startswith(SUBTITLE))
    replies = rec.items("answer", min_len=1)
    for k in range(len(replies)):
        reply = rec.child("answer", k)
        role = reply.text("role")
        if role != "assistant":
            raise reply.fail("role", f"expected 'assistant', got {role!r}")
        a, b = reply.span("reply_timespan")
        extra = {"related": list(reply.span("related_timespan"))} if reply.has("related_timespan") else {}
        if isinstance(reply.data.get("type"), str):
            extra["type"] = reply.data["type"]
        ep.response(question, a, (a, b), reply.text("content"), k=k, **extra)
    return ep.build()
