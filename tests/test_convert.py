"""Benchmark converters on schema-exact fixture records (tests/data/benchmarks), and malformed records."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from streamvid.eval.convert import convert, write
from streamvid.eval.convert.common import ConvertError, parse_time
from streamvid.eval.score import load_episodes

DATA = Path(__file__).parent / "data" / "benchmarks"
SB = [DATA / "streamingbench" / f"questions_{s}.json" for s in ("real", "omni", "sqa", "proactive")]


def _events(ep: dict, kind: str) -> list[dict]:
    return [e for e in ep["events"] if e["kind"] == kind]


def _by_id(episodes: list[dict]) -> dict[str, dict]:
    return {ep["episode_id"]: ep for ep in episodes}


@pytest.mark.parametrize("text,seconds", [
    ("00:03:10", 190.0), ("0:03:10", 190.0), ("03:10", 190.0), ("1:02:03.5", 3723.5), ("62", 62.0), ("62.25", 62.25),
    (7, 7.0), (2.5, 2.5), ("00:00:8", 8.0)])
def test_parse_time(text, seconds):
    assert parse_time(text) == seconds


@pytest.mark.parametrize("bad", ["00:61:00", "1:2:3:4", "ab", "", -1, True, "00:12450", float("nan")])
def test_parse_time_rejects(bad):
    with pytest.raises(ValueError):
        parse_time(bad)


def test_ovo_bench(tmp_path):
    eps = _by_id(convert("ovo-bench", [DATA / "ovo-bench" / "ovo_bench_new.json"], tmp_path / "videos"))
    assert sorted(eps) == ["ovo-bench/COIN/clip_a.mp4", "ovo-bench/COIN/clip_b.mp4"]
    a = eps["ovo-bench/COIN/clip_a.mp4"]
    assert a["video"]["path"] == str(tmp_path / "videos" / "COIN" / "clip_a.mp4")
    q = _events(a, "user_query")
    # EPM at 4 s, OCR at 2.5 s, then the CRR question asked again at each probe time
    assert [(e["task"], e["category"], e["t"]) for e in q] == [
        ("EPM", "backward", 4.0), ("OCR", "realtime", 2.5), ("CRR", "forward", 1.0), ("CRR", "forward", 3.5)]
    assert q[0]["options"] == ["A. a blue cup", "B. a red cup", "C. a plate", "D. a spoon"]
    assert q[0]["prompt"] == "ovo-bench" and q[2]["prompt"] == "ovo-bench-crr"
    golds = {e["ref"]: (e["gold"], e["scorer"]) for e in _events(a, "expected_answer")}
    assert golds[q[0]["id"]] == ({"letter": "B", "text": "a red cup"}, "mc_first_letter")
    assert golds[q[1]["id"]] == ({"letter": "A", "text": "STOP"}, "mc_first_letter")
    assert golds[q[2]["id"]] == ({"text": "No"}, "ovo_yes_no") and golds[q[3]["id"]] == ({"text": "Yes"}, "ovo_yes_no")
    b = _events(eps["ovo-bench/COIN/clip_b.mp4"], "user_query")
    assert [(e["task"], e["text"], e["t"]) for e in b] == [
        ("SSR", "boil water", 1.5), ("SSR", "pour water", 2.5),
        ("REC", "How many times did they clapping?", 2.0), ("REC", "How many times did they clapping?", 4.0)]
    rec_golds = [e["gold"]["text"] for e in _events(eps["ovo-bench/COIN/clip_b.mp4"], "expected_answer")][2:]
    assert rec_golds == ["1", "2"]


def test_streamingbench(tmp_path):
    eps = _by_id(convert("streamingbench", SB, tmp_path))
    assert sorted(eps) == ["streamingbench/omni/sample_2_omni", "streamingbench/proactive/sample_4_proactive",
                           "streamingbench/real/sample_1_real", "streamingbench/sqa/sample_3_sqa"]
    real = eps["streamingbench/real/sample_1_real"]
    assert real["video"]["path"] == str(tmp_path / "sample_1_real.mp4")
    assert [(e["t"], e["task"], e["category"]) for e in _events(real, "user_query")] == [
        (3.0, "Object Recognition", "real"), (5.0, "Counting", "real")]  # "00:05" is MM:SS
    assert [e["gold"]["letter"] for e in _events(real, "expected_answer")] == ["B", "A"]
    omni = _events(eps["streamingbench/omni/sample_2_omni"], "user_query")[0]
    # lettered as the loader does
    assert omni["options"] == ["A. The man.", "B. The woman.", "C. The narrator.", "D. Nobody."]
    assert _events(eps["streamingbench/omni/sample_2_omni"], "expected_answer")[0]["gold"] == {
        "letter": "C", "text": "The narrator."}
    sqa = eps["streamingbench/sqa/sample_3_sqa"]
    assert [e["kind"] for e in sqa["events"]] == ["user_query", "expected_answer", "context"] * 2
    ctx = _events(sqa, "context")[0]
    assert ctx["t"] == 2.0 and ctx["text"].startswith("At timestamp 00:00:02, the following question and answer")
    assert "Answer: A; " in ctx["text"] and _events(sqa, "user_query")[1]["prompt"] == "streamingbench-sqa"
    pro = eps["streamingbench/proactive/sample_4_proactive"]
    q = _events(pro, "user_query")[0]
    assert (q["t"], q["gold_output"], q["poll"]) == (1.0, "3", [2.0, 8.0])
    r = _events(pro, "expected_response")[0]
    assert (r["ref"], r["t_gold"], r["window"], r["gold"]) == (q["id"], 4.0, [2.0, 6.0], {"text": "3"})


def test_rvs_both_packagings(tmp_path):
    eps = _by_id(convert("rvs", [DATA / "rvs" / f for f in ("ego4d_oe.json", "test_qa_movienet.json",
                                                               "rvs_movie.json")], tmp_path))
    ego = eps["rvs/rvs-ego/000246"]
    assert ego["video"] == {"path": str(tmp_path / "000246.mp4"), "t_start": 0.0, "t_end": 6.0}
    assert [(e["t"], e["evidence"], e["prompt"]) for e in _events(ego, "user_query")] == [
        (2.5, [0.0, 2.5], "rvs"), (5.0, [2.0, 5.0], "rvs")]
    assert [(e["gold"], e["scorer"]) for e in _events(ego, "expected_answer")] == [
        ({"text": "a knife"}, "substring"), ({"text": "an onion"}, "substring")]
    movie = eps["rvs/rvs-movie/tt0001"]
    # source-video times 101..105 inside the clip 100..106 of rvs_movie.json: shifted onto the clip's clock
    assert [(e["t"], e["evidence"], e["task"]) for e in _events(movie, "user_query")] == [
        (3.0, [1.0, 3.0], "location"), (5.0, [2.0, 5.0], "person")]
    # without the clip list the times are taken as they are
    alone = _by_id(convert("rvs", [DATA / "rvs" / "test_qa_movienet.json"], tmp_path))["rvs/rvs-movie/tt0001"]
    assert [e["t"] for e in _events(alone, "user_query")] == [103.0, 105.0]


def test_proactivevideoqa(tmp_path):
    eps = _by_id(convert("proactivevideoqa", [DATA / "proactivevideoqa" / s / "anno.json" for s in ("TV", "EGO")],
                         tmp_path))
    tv = eps["proactivevideoqa/TV/house_frames=clip_1.mp4%Q0"]
    assert tv["video"]["path"] == str(tmp_path / "house_frames=clip_1.mp4") and tv["video"]["t_end"] == 6.0
    assert [(e["kind"], e.get("t")) for e in tv["events"]] == [("user_query", 0.0), ("context", 1.5),
                                                               ("expected_response", None)]
    r = _events(tv, "expected_response")[0]
    assert (r["t_gold"], r["window"], r["gold"]["text"]) == (2.0, [2.0, 4.0], "Across the table.")
    ego = eps["proactivevideoqa/EGO/cooking-0-360.mp4"]
    assert [(e["window"], e["type"]) for e in _events(ego, "expected_response")] == [
        ([1.0, 3.0], "step"), ([4.0, 5.5], "substep")]


ALL_FILES = {
    "ovo-bench": [DATA / "ovo-bench" / "ovo_bench_new.json"],
    "streamingbench": SB,
    "rvs": [DATA / "rvs" / f for f in ("ego4d_oe.json", "test_qa_movienet.json", "rvs_movie.json")],  # both packagings
    "proactivevideoqa": [DATA / "proactivevideoqa" / s / "anno.json" for s in ("TV", "EGO")],
    "svbench": [DATA / "svbench" / "video_7.json"],
}
# protocol.dialogue_turns by benchmark: 0 where the official protocol asks every question on its own, SVBench keeps
# its chains, ProactiveVideoQA (one question per episode) leaves it to the run
DIALOGUE = {"ovo-bench": 0, "streamingbench": 0, "rvs": 0, "proactivevideoqa": None, "svbench": 6}


@pytest.mark.parametrize("name", sorted(ALL_FILES))
def test_converted_episodes_say_whether_their_questions_stand_alone(name, tmp_path):
    from streamvid.config import EngineConfig
    from streamvid.eval.score import episode_config

    episodes = convert(name, ALL_FILES[name], tmp_path)
    assert episodes
    run = EngineConfig.from_settings(dialogue_turns=3)  # what `streamvid score --dialogue-turns 3` runs with
    for ep in episodes:
        assert ep["protocol"].get("dialogue_turns") == DIALOGUE[name], ep["episode_id"]
        # the scorer takes it from the episode; an episode that does not set it gets the run's setting
        expected = 3 if DIALOGUE[name] is None else DIALOGUE[name]
        assert episode_config(ep, run).generation.dialogue_turns == expected


def test_svbench(tmp_path):
    [ep] = convert("svbench", [DATA / "svbench" / "video_7.json"], tmp_path)
    assert ep["episode_id"] == "svbench/video_7" and ep["video"]["path"] == str(tmp_path / "video_7.mp4")
    assert ep["protocol"]["dialogue_turns"] == 6
    assert [(e["t"], e["chain"], e["turn"]) for e in _events(ep, "user_query")] == [
        (2.4, 0, 0), (2.4, 0, 1), (5.2, 2, 0)]
    assert [e["gold"]["text"] for e in _events(ep, "expected_answer")] == ["A red ball.", "He throws it.",
                                                                            "In the basket."]


def _copy(tmp_path: Path, rel: str) -> Path:
    dst = tmp_path / "in" / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(DATA / rel, dst)
    return dst


def _mutate(path: Path, fn) -> Path:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))
    return path


MALFORMED = [
    ("ovo-bench", "ovo-bench/ovo_bench_new.json", lambda d: d[0].update(gt=4),
     r"ovo_bench_new.json: record \[0\] \(id 0\): field 'gt': expected an option index 0..3, got 4"),
    ("ovo-bench", "ovo-bench/ovo_bench_new.json", lambda d: d[1].pop("realtime"),
     r"record \[1\] \(id 1\): field 'realtime': missing"),
    ("ovo-bench", "ovo-bench/ovo_bench_new.json", lambda d: d[3]["test_info"][1].update(type=2),
     r"record \[3\] \(id 3\)\.test_info\[1\]: field 'type': expected 0 or 1, got 2"),
    ("ovo-bench", "ovo-bench/ovo_bench_new.json", lambda d: d[4].update(task="XYZ"),
     r"record \[4\] \(id 4\): field 'task': expected one of EPM"),
    ("ovo-bench", "ovo-bench/ovo_bench_new.json", lambda d: d[2].update(id=0),
     r"record \[2\] \(id 0\): field 'id': repeats the id of record \[0\]"),
    ("streamingbench", "streamingbench/questions_real.json",
     lambda d: d[0]["questions"][0].update(time_stamp="3 minutes"),
     r"questions_real.json: segment \[0\]\.questions\[0\] \(task_type 'Object Recognition'\): field 'time_stamp'"),
    ("streamingbench", "streamingbench/questions_real.json", lambda d: d[1]["questions"][0].update(answer="E"),
     r"segment \[1\]\.questions\[0\] \(task_type 'Counting'\): field 'answer': expected the letter of one of"),
    ("streamingbench", "streamingbench/questions_proactive.json",
     lambda d: d[0]["questions"][0].pop("ground_truth_output"), r"field 'ground_truth_output': missing"),
    ("streamingbench", "streamingbench/questions_sqa.json", lambda d: d[0][1].update(video_path="./videos/x.mp4"),
     r"questions_sqa.json: video \[0\]\[1\]: field 'video_path': expected './videos/sample_3_sqa.mp4'"),
    ("rvs", "rvs/ego4d_oe.json", lambda d: d[0]["conversations"][1].update(start_time=9),
     (r"ego4d_oe.json: record \[0\] \(video_id '000246'\)\.conversations\[1\]: field 'start_time': expected "
      r"start_time <= end_time")),
    ("rvs", "rvs/test_qa_movienet.json", lambda d: d[1].update(end_time="shot_0042"),
     r"record \[1\] \(video_id 'tt0001'\): field 'end_time': expected seconds, got a MovieNet shot name"),
    ("proactivevideoqa", "proactivevideoqa/TV/anno.json", lambda d: d[0]["answer"][0].update(reply_timespan=[4, 2]),
     (r"anno.json: record \[0\] \(question_id 'house_frames=clip_1.mp4%Q0'\)\.answer\[0\]: field "
      r"'reply_timespan': expected \[start, end\] with start <= end")),
    ("proactivevideoqa", "proactivevideoqa/EGO/anno.json", lambda d: d[0]["conversation"][0].update(role="bot"),
     r"conversation\[0\]: field 'role': expected 'user', got 'bot'"),
    ("svbench", "svbench/video_7.json", lambda d: d[2]["chain"]["answers"].append("extra"),
     r"video_7.json: scene \[2\]: field 'chain': expected 'answers': 1 texts, one per question, got 2"),
    ("svbench", "svbench/video_7.json", lambda d: d[0].update(qac_timestamps_end="soon"),
     r"scene \[0\]: field 'qac_timestamps_end': expected a time"),
]


@pytest.mark.parametrize("name,rel,fn,message", MALFORMED)
def test_malformed_records_name_the_record_and_field(tmp_path, name, rel, fn, message):
    path = _mutate(_copy(tmp_path, rel), fn)
    with pytest.raises(ConvertError, match=message):
        convert(name, [path], tmp_path / "videos")


def test_not_a_list_and_not_json(tmp_path):
    bad = tmp_path / "questions_real.json"
    bad.write_text("{")
    with pytest.raises(ConvertError, match=r"questions_real.json: not JSON"):
        convert("streamingbench", [bad], tmp_path)
    bad.write_text('{"a": 1}')
    with pytest.raises(ConvertError, match=r"questions_real.json: expected a JSON list of records, got dict"):
        convert("streamingbench", [bad], tmp_path)
    with pytest.raises(ConvertError, match="unknown benchmark 'ovo'; known: ovo-bench, streamingbench"):
        convert("ovo", [bad], tmp_path)


def test_written_episodes_load_with_relative_video_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "videos").mkdir()
    (tmp_path / "videos" / "sample_1_real.mp4").write_bytes(b"")
    summary = write("streamingbench", SB, "videos", "out/episodes.jsonl")
    assert summary == {"benchmark": "streamingbench", "out": "out/episodes.jsonl", "episodes": 4, "questions": 6,
                       "by_category": {"omni": 1, "proactive": 1, "real": 2, "sqa": 2}, "videos_missing": 3,
                       "warnings": []}
    eps = {ep["episode_id"]: ep for ep in load_episodes(tmp_path / "out" / "episodes.jsonl")}
    assert Path(eps["streamingbench/real/sample_1_real"]["video"]["path"]).resolve() == \
        (tmp_path / "videos" / "sample_1_real.mp4").resolve()


def test_cli_convert(tmp_path):
    out = tmp_path / "eps.jsonl"
    ok = subprocess.run([sys.executable, "-m", "streamvid.cli", "convert", "ovo-bench",
                         str(DATA / "ovo-bench" / "ovo_bench_new.json"), "--videos", str(tmp_path), "--out", str(out)],
                        check=False, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["questions"] == 8 and len(out.read_text().splitlines()) == 2
    bad = subprocess.run([sys.executable, "-m", "streamvid.cli", "convert", "svbench", str(tmp_path / "nope.json"),
                          "--videos", str(tmp_path), "--out", str(out)], check=False, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("streamvid convert: error: ") and "annotation file not found" in bad.stderr
