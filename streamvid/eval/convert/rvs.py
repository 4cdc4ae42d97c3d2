"""RVS-Ego / RVS-Movie (the real-time subsets of VStream-QA) to stream episodes, in both published packagings.

Sources read:
* ReKV packaging — Becomebright/ReKV: `video_qa/rekv_stream_vqa.py` (the streaming loader), `video_qa/base.py`,
  `video_qa/run_eval.py` (files `data/rvs/ego/ego4d_oe.json`, `data/rvs/movie/movienet_oe.json`),
  `video_qa/eval/eval_open_ended.py` (GPT judge). A JSON list of videos {`video_id`, `video_path`,
  `conversations`: [{`question`, `answer`, `start_time`, `end_time`}, ...]}; the loader encodes the video up to
  `end_time` (seconds) and then asks the question, so `end_time` is the question time and [start_time,
  end_time] the span the answer is about.
* Flash-VStream packaging — IVGSZ/Flash-VStream: `Flash-VStream-Qwen/eval_any_dataset.py` (files
  `vstream-realtime/test_qa_ego4d.json`, `test_qa_movienet.json`), `Flash-VStream-Qwen/inference_mcq_vqa.py`
  (prompt "Answer the following open-ended question based on the video. " + question),
  `Flash-VStream-LLaVA/flash_vstream/eval_video/model_msvd_qa_featuresloader.py` (`id`, `video_id`, `question`,
  `answer`, `answer_type`), and the VStream-QA dataset card (huggingface.co/datasets/IVGSZ/VStream-QA: clips
  cut from the source videos per `rvs_ego.json` / `rvs_movie.json` entries {`video_id`, `original_video`,
  `start_time`, `end_time`} and saved as `<video_id>.mp4`). The per-question `start_time` / `end_time` fields
  are not shown by the official code; third-party preparation scripts read them in seconds. When the clip list
  is given as well, question times that all fall inside the clip's span on the source video and beyond the
  clip's own length are taken as source-video times and shifted to the clip's clock.

Both: open-ended answers, officially judged by GPT-3.5 (yes/no and a 0-5 score). Without a judge the report
gives substring matching of the gold answer only and says so.

Dialogue: both packagings ask every question in a prompt of its own (ReKV: `get_prompt(question)` per question
after the video is encoded up to its time; Flash-VStream: one call per question record), without earlier
questions or answers, so each episode's `protocol.dialogue_turns` is 0: the scorer keeps no earlier turns.

Episodes: one per clip (`video_id`), `video.path` = --videos / `<video_id>.mp4` (ReKV: the file name of
`video_path`); each question is a `user_query` at `end_time` with `evidence` [start_time, end_time], and an
`expected_answer` {"text": answer} scored "substring". `category` is rvs-ego or rvs-movie (from the file name:
ego4d/ego or movienet/movie), `task` the `answer_type` when given, else "open-ended".
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from .common import ConvertError, EpisodeBuilder, Record, read_json, records, video_under

PROMPT = "rvs"
# each question asked on its own (see "Dialogue" above): no earlier turns
PROTOCOL = {"context": "prefix", "context_window_s": None, "decision_hz": None, "dialogue_turns": 0}


def convert(files: list[str | Path], videos_dir: str | Path) -> list[dict]:
    qa_files, clip_index = [], {}
    for f in files:
        name = Path(f).name
        data = read_json(f)
        recs = records(data, name, label_key="video_id")
        kind = _kind(name, recs)
        if kind == "clips":
            for rec in recs:
                vid = str(rec.get("video_id", (str, int)))
                clip_index[vid] = rec
        else:
            qa_files.append((name, kind, recs))
    if not qa_files:
        raise ConvertError("rvs: no question file among the inputs (expected ego4d_oe.json / movienet_oe.json, "
                           "or test_qa_ego4d.json / test_qa_movienet.json)")
    episodes = []
    for name, kind, recs in qa_files:
        category = _category(name)
        if kind == "rekv":
            episodes += [_rekv_video(rec, category, videos_dir) for rec in recs]
        else:
            episodes += _flash(recs, category, videos_dir, clip_index)
    ids = [ep["episode_id"] for ep in episodes]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ConvertError(f"rvs: clips appear in more than one record or file: {', '.join(dup[:5])}")
    return episodes


def _kind(name: str, recs: list[Record]) -> str:
    if not recs:
        raise ConvertError(f"{name}: empty list")
    first = recs[0].check_object().data
    if "conversations" in first:
        return "rekv"
    if "question" in first:
        return "flash"
    if "video_id" in first and ("start_time" in first or "start_shot" in first):
        return "clips"
    raise ConvertError(f"{name}: record [0]: expected RVS questions ('conversations' per video, or 'question' "
                       f"per record) or a clip list ('video_id' with 'start_time'), got fields {sorted(first)}")


def _category(name: str) -> str:
    low = name.lower()
    if "ego" in low:
        return "rvs-ego"
    if "movie" in low:
        return "rvs-movie"
    return "rvs"


def _rekv_video(rec: Record, category: str, videos_dir) -> dict:
    vid = str(rec.get("video_id", (str, int)))
    path = rec.text("video_path", optional=True)
    file_name = PurePosixPath(path).name if path else f"{vid}.mp4"
    ep = EpisodeBuilder("rvs", f"{category}/{vid}", video_under(videos_dir, file_name), orig_id=vid, task=category,
                        protocol=dict(PROTOCOL))
    convs = rec.items("conversations", min_len=1)
    for i in range(len(convs)):
        c = rec.child("conversations", i)
        start, end = c.number("start_time"), c.number("end_time")
        if start > end:
            raise c.fail("start_time", f"expected start_time <= end_time ({end:g}), got {start:g}")
        _question(ep, c, end, (start, end), category)
    if rec.has("duration"):
        ep.t_end = rec.number("duration")
    return ep.build()


def _flash(recs: list[Record], category: str, videos_dir, clip_index: dict[str, Record]) -> list[dict]:
    by_clip: dict[str, list[Record]] = {}
    seen: set = set()
    for rec in recs:
        qid = rec.get("id", (str, int))
        if qid in seen:
            raise rec.fail("id", f"repeats question id {qid!r}")
        seen.add(qid)
        by_clip.setdefault(str(rec.get("video_id", (str, int))), []).append(rec)
    episodes = []
    for vid, items in by_clip.items():
        ep = EpisodeBuilder("rvs", f"{category}/{vid}", video_under(videos_dir, f"{vid}.mp4"), orig_id=vid,
                            task=category, protocol=dict(PROTOCOL))
        spans = []
        for rec in items:
            for key in ("start_time", "end_time"):
                if isinstance(rec.data.get(key), str) and rec.data[key].startswith("shot_"):
                    raise rec.fail(key, f"expected seconds, got a MovieNet shot name {rec.data[key]!r}; "
                                        "convert RVS-Movie from the ReKV packaging (movienet_oe.json)")
            spans.append((rec.time("start_time"), rec.time("end_time")))
        shift = _clip_shift(vid, spans, clip_index)
        for rec, (start, end) in zip(items, spans, strict=True):
            if start > end:
                raise rec.fail("start_time", f"expected start_time <= end_time ({end:g}), got {start:g}")
            _question(ep, rec, end - shift, (start - shift, end - shift), category, orig_id=rec.data["id"])
        if vid in clip_index:
            ep.meta["clip"] = {k: clip_index[vid].data[k] for k in ("original_video", "start_time", "end_time")
                               if k in clip_index[vid].data}
        episodes.append(ep.build())
    return episodes


def _clip_shift(vid: str, spans: list[tuple[float, float]], clip_index: dict[str, Record]) -> float:
    clip = clip_index.get(vid)
    if clip is None or not clip.has("start_time"):
        return 0.0
    c0, c1 = clip.number("start_time"), clip.number("end_time")
    length = c1 - c0
    ends = [e for _, e in spans]
    if c0 > 0 and all(c0 <= e <= c1 + 1e-6 for e in ends) and max(ends) > length + 1e-6:
        return c0
    return 0.0


def _question(ep: EpisodeBuilder, rec: Record, t: float, evidence: tuple[float, float], category: str,
              orig_id=None) -> None:
    answer = rec.get("answer", (str, int, float))
    task = rec.data.get("answer_type") if isinstance(rec.data.get("answer_type"), str) else "open-ended"
    qid = ep.query(t, rec.text("question"), task=task or "open-ended", category=category, prompt=PROMPT,
                   orig_id=orig_id, evidence=[round(evidence[0], 3), round(evidence[1], 3)])
    ep.answer(qid, {"text": str(answer)}, "substring")
