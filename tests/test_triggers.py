"""Standing triggers, "tell me when" questions and narration through the real engine.

The model here is the tiny random Qwen2.5-VL (it sees nothing), wrapped so that its yes/no probes answer from the
ShapesWorld ground truth of the demo clip: the machinery (probing on each chunk, firing, alerts, ordering, the
change gate, questions first) is checked independently of what a trained model sees. The bundled model on the
same clips is tested in test_speaking_bundled.py.
"""

from __future__ import annotations

import itertools
import json
import math
import queue
import re
import time

import numpy as np
import pytest
import torch
from conftest import wait_until

from streamvid.adapters.row_by_row import RowByRow
from streamvid.assets import DEMO_VIDEOS
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.media.file_source import FileSource
from streamvid.language.asked import Question
from streamvid.types import Output

DEMO = DEMO_VIDEOS / "shapes_7"
CLIP = DEMO / "shapes_7.mp4"
FPS = 2.0
_PAIR = re.compile(r"Is there an? (\w+) (\w+) now\?")
COLOURS = ["red", "orange", "yellow", "green", "blue", "purple"]
SHAPES = ["circle", "square", "triangle", "star", "hexagon", "diamond"]


class Truth:
    """Which (colour, shape) pairs the demo clip shows at a stream time, read from its timeline file."""

    def __init__(self, path):
        d = json.loads(path.read_text())
        self.fps, self.tracks = d["fps"], d["tracks"]

    def pairs(self, t: float) -> set[tuple[str, str]]:
        tf = math.floor(t * self.fps + 1e-6) / self.fps
        return {([c for s, c in tr["colours"] if s <= tf + 1e-6][-1], tr["shape"]) for tr in self.tracks
                if tr["enter_s"] - 1e-6 <= tf < tr["leave_s"] - 1e-6}

    def enters(self, pair) -> list[float]:
        return [tr["enter_s"] for tr in self.tracks if (tr["colours"][0][1], tr["shape"]) == pair]

    def shown(self) -> set[tuple[str, str]]:
        return {(c, tr["shape"]) for tr in self.tracks for _, c in tr["colours"]}


TRUTH = Truth(DEMO / "shapes_7.timeline.json")
EPISODE = json.loads((DEMO / "episodes.jsonl").read_text().splitlines()[0])
FORWARD = [(q, r) for q in EPISODE["events"] for r in EPISODE["events"]
           if r["kind"] == "expected_response" and r["ref"] == q.get("id")]
OFTEN = max(sorted(TRUTH.shown()), key=lambda p: len(TRUTH.enters(p)))  # the pair that enters most often
NEVER = next((c, s) for c in ("red", "orange", "yellow", "green", "blue", "purple")
             for s in ("circle", "square", "triangle", "star", "hexagon", "diamond") if (c, s) not in TRUTH.shown())
FIRST = (TRUTH.tracks[0]["colours"][0][1], TRUTH.tracks[0]["shape"])  # on screen from the first seconds


def _a(pair) -> str:
    return f"{'an' if pair[0][0] in 'aeiou' else 'a'} {pair[0]} {pair[1]}"


def decision_times(t_end: float) -> list[float]:
    """When the engine decides in a replay: the last frame of each 2-frame chunk, and the last frame of the stream
    (its unfinished chunk is flushed at the end). Questions do not change the chunking: an unfinished chunk is
    encoded for the answer alone (an independent model of Ingest + run_simulated)."""
    n = round(t_end * FPS)
    return [k / FPS for k in range(1, n, 2)] + ([(n - 1) / FPS] if n % 2 else [])


class OracleAdapter(RowByRow):
    """The real adapter for encoding and generating (one row per forward); probes answer from the ground truth at
    the last frame of the newest chunk in the context (p(yes) 0.95 if the asked pair is on screen, else 0.05). It finds that chunk by
    its KV values (position-free) and the chunk's time by its last frame, looked up in the decoded clip.
    `truth_scene` gives a chunk's scene as a one-hot of the pairs on screen (a perfect change signal)."""

    def __init__(self, real, frame_times: dict[bytes, float]):
        self._real = real
        self._frame_times = frame_times
        self._chunks: list[tuple[torch.Tensor, float]] = []
        self.calls: list[str] = []
        self.prompts: list[str] = []
        self.on_probe = None  # called inside each probe forward (a test hook)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def encode_chunk(self, frames, past, seconds_per_chunk, **kw):
        enc = self._real.encode_chunk(frames, past, seconds_per_chunk, **kw)
        t = self._frame_times.get(np.ascontiguousarray(frames[-1]).tobytes())
        if t is not None:
            self._chunks.append((enc.values[0], t))
        return enc

    def truth_scene(self, block) -> np.ndarray:
        v = np.zeros(len(COLOURS) * len(SHAPES) + 1, np.float32)
        for c, s in TRUTH.pairs(self._time_of(block)):
            v[COLOURS.index(c) * len(SHAPES) + SHAPES.index(s)] = 1.0
        v[-1] = 1.0
        return v

    def _time_of(self, context) -> float:
        """The time of the chunk that `context` (or a block) ends with."""
        tail = context.values[0]
        for values, t in reversed(self._chunks):
            n = values.shape[2]
            if tail.shape[2] >= n and torch.equal(tail[:, :, -n:], values):
                return t
        raise AssertionError("the probe context does not end with an encoded chunk")

    def probe_rows(self, rows):
        """One batched forward: each (context, question) row answered from the truth at its context's newest chunk."""
        self.calls.append("probe")
        if self.on_probe is not None:
            self.on_probe()
        return [self._p_yes(context, q) for context, q in rows]

    def _p_yes(self, context, question) -> float:
        visible = TRUTH.pairs(self._time_of(context))
        return 0.95 if (m := _PAIR.match(question)) and m.groups() in visible else 0.05

    def generate(self, context, prompt, max_new_tokens, stop=None):
        self.calls.append("generate")
        self.prompts.append(prompt)
        for piece in self._real.generate(context, prompt, max_new_tokens, stop):
            self.calls.append("token")
            yield piece


@pytest.fixture(scope="module")
def frame_times():
    src = FileSource(CLIP, fps=FPS)
    times = {}
    while (f := src.read()) is not None:
        times.setdefault(f.image.tobytes(), f.t_s)
    return times


def _cfg(**kw) -> EngineConfig:
    """The change gate is off unless a test turns it on: the random model's chunk vectors mean nothing."""
    return EngineConfig.from_settings(**{"model": "unused", "fps": FPS, "window_tokens": 60, "max_new_tokens": 3,
                           "memory_top_k": 0, "gate_min_novelty": 0.0, **kw})


def _run(adapter, frame_times, t_end=60.0, questions=(), watches=(), thresholds=None, monkeypatch=None, **cfg):
    oracle = OracleAdapter(adapter, frame_times)
    if monkeypatch is not None:  # the change gate compares chunks by their true content
        monkeypatch.setattr("streamvid.engine.reasoning.scene_features", oracle.truth_scene)
    sa = StreamingAssistant(_cfg(**cfg), adapter=oracle)
    for condition in thresholds or {}:
        sa.watch(condition, **thresholds[condition])
    outs = sa.run_simulated(FileSource(CLIP, fps=FPS, t_end_s=t_end), questions, watches_at=watches)
    return sa, outs


def test_probe_many_equals_one_probe_at_a_time(adapter):
    from conftest import random_frames

    from streamvid.kv.positions import concat
    from streamvid.kv.window import Block

    sinks = adapter.encode_text(adapter.sink_text, None)
    sink = Block(-1, 0.0, 0.0, sinks.keys, sinks.values, 0, sinks.pos_span)
    enc = adapter.encode_chunk(random_frames(2), concat([sink], sinks.pos_span), 1.0)
    block = Block(0, 0.0, 1.0, enc.keys, enc.values, sinks.pos_span, enc.pos_span)
    context = concat([sink, block], sinks.pos_span + enc.pos_span)
    questions = ["Is there a blue star now? Answer yes or no.", "Is there an orange hexagon now? Answer yes or no.",
                 "Is it true now that the door opens? Answer yes or no.", "Red?"]  # different lengths: padding
    one = np.array([adapter.probe(context, q) for q in questions])
    many = np.array(adapter.probe_many(context, questions))
    assert np.ptp(one) > 1e-5, "the questions must score differently for this check to mean anything"
    assert np.abs(one - many).max() < 1e-6
    assert adapter.probe_many(context, []) == []


def test_tell_me_when_is_acknowledged_then_alerts_once_at_the_event(adapter, frame_times):
    q, gold = FORWARD[0]
    pair = tuple(gold["gold_text"].split())
    assert pair not in TRUTH.pairs(q["t"]) and gold["t_gold"] in TRUTH.enters(pair)
    t_end = gold["t_gold"] + 10.0
    decisions = [d for d in decision_times(t_end) if d > q["t"] - 1.0]
    seen = [pair in TRUTH.pairs(d) for d in decisions]
    i = next(i for i in range(len(seen) - 1) if seen[i] and seen[i + 1])  # k=2: two positive chunks in a row
    sa, outs = _run(adapter, frame_times, t_end=t_end,
                    questions=[(q["t"], q["text"]), (1.0, f"Tell me when {_a(NEVER)} appears.")])
    kinds = [(o.kind, o.id) for o in outs]
    assert kinds == [("answer", "q0"), ("answer", "q1"), ("alert", "q1")]  # never an alert for NEVER
    ack, alert = outs[1], outs[2]
    assert ack.text == f"OK, I will tell you when {_a(pair)} appears." and ack.data["t_s"] == q["t"]
    assert ack.data["trigger_id"] == "q1"
    assert alert.to_json() == {"type": "alert", "trigger_id": "q1", "condition": f"{_a(pair)} appears",
                               "t_s": decisions[i + 1], "score": 0.95,
                               "evidence_t_s": [[decisions[i] - 0.5, decisions[i + 1] + 0.5]],
                               "text": f"There is {_a(pair)} now."}
    assert gold["window"][0] <= alert.data["t_s"] <= gold["window"][1]
    assert [t["trigger_id"] for t in sa.triggers()] == ["q0"]  # q1 answered: retired; q0 still waits
    assert sa.stats()["alerts"] == 1


class WindowOracleAdapter(OracleAdapter):
    """Probes say yes when the pair is on screen in any chunk of the context: a model that cannot tell the newest
    chunk from the rest of the window (the bundled model on an object that left a few seconds ago)."""

    def __init__(self, real, frame_times):
        super().__init__(real, frame_times)
        self.seen: list[tuple[list[float], list[float]]] = []  # per probe: chunk times of its context, of the window
        self.window = None

    def _times_of(self, values) -> list[float]:
        times, tail = [], values
        while True:
            hit = next(((v, t) for v, t in reversed(self._chunks)
                        if tail.shape[2] >= v.shape[2] and torch.equal(tail[:, :, -v.shape[2]:], v)), None)
            if hit is None:
                return times[::-1]
            times.append(hit[1])
            tail = tail[:, :, :-hit[0].shape[2]]

    def _p_yes(self, context, question) -> float:
        times = self._times_of(context.values[0])
        window = [b.t_end_s for b in self.window.snapshot().blocks]
        self.seen.append((times, window))
        visible = set().union(*(TRUTH.pairs(t) for t in times))
        return 0.95 if (m := _PAIR.match(question)) and m.groups() in visible else 0.05


def test_a_trigger_looks_only_at_what_came_after_it_was_made(adapter, frame_times):
    """"Tell me when a red star appears" asked 2 s after one left: the window still shows it, yet the trigger waits
    for the next red star (enters at 68 s) instead of firing on the one that left."""
    pair, left, again = ("red", "star"), 44.0, 68.0
    assert pair in TRUTH.pairs(left - 0.5) and not any(pair in TRUTH.pairs(t / 2) for t in range(88, 136))
    assert again in TRUTH.enters(pair)
    oracle = WindowOracleAdapter(adapter, frame_times)
    sa = StreamingAssistant(_cfg(window_tokens=None, window_s=8.0), adapter=oracle)
    oracle.window = sa.window
    outs = sa.run_simulated(FileSource(CLIP, fps=FPS, t_end_s=again + 6.0),
                            [(left + 2.0, f"Tell me when {_a(pair)} appears.")])
    alerts = [o for o in outs if o.kind == "alert"]
    assert len(alerts) == 1 and again <= alerts[0].data["t_s"] <= again + 2.0
    times, window = oracle.seen[0]  # the first probe: the window held the red star that left, the context did not
    assert any(pair in TRUTH.pairs(t) for t in window) and times and min(times) > left + 1.0
    assert [t for t, w in oracle.seen if len(w) and len(t) == len(w)], "once the window is all new, it is all seen"


def _edges(pair, k_times, rising=True):
    """Stream times (decision times) where the pair's visibility turns on (or off)."""
    seen = [pair in TRUTH.pairs(t) for t in k_times]
    return [t for prev, now, t in zip([not rising] + seen, seen, k_times) if now == rising and prev != rising]


def test_standing_watches_fire_on_every_rising_edge_and_negated_ones_on_falling(adapter, frame_times):
    decisions = decision_times(120.0)  # 0.5, 1.5, ...
    assert decisions[:2] == [0.5, 1.5]
    no_cooldown = {"k": 2, "cooldown_s": 0.0}
    often = _a(OFTEN)
    sa, outs = _run(adapter, frame_times, t_end=120.0, thresholds={often: no_cooldown,
                                                                   f"the {OFTEN[0]} {OFTEN[1]} leaves": no_cooldown},
                    watches=[(0.0, f"Is there {_a(NEVER)}?")])
    ids = [tr["trigger_id"] for tr in sa.triggers()]
    assert ids == ["w0", "w1", "w2"]
    # k=2: an edge fires one chunk later if the new state holds; a trigger starts armed, so "leaves" fires at the
    # start too if the pair is not on screen yet
    expected_on = [t + 1.0 for t in _edges(OFTEN, decisions) if OFTEN in TRUTH.pairs(t + 1.0)]
    expected_off = [t + 1.0 for t in _edges(OFTEN, decisions, rising=False) if OFTEN not in TRUTH.pairs(t + 1.0)]
    assert len(expected_on) >= 2 and len(expected_off) >= 2, "the clip shows the pair at least twice"
    got = {tid: [o.data["t_s"] for o in outs if o.kind == "alert" and o.id == tid] for tid in ids}
    assert got["w0"] == expected_on
    assert got["w1"] == expected_off
    assert got["w2"] == []
    assert [o.data["t_s"] for o in outs] == sorted(o.data["t_s"] for o in outs)  # stream-time order


def test_change_gate_skips_probes_on_unchanged_scenes_without_changing_alerts(adapter, frame_times, monkeypatch):
    watches = [(0.0, _a(OFTEN)), (0.0, _a(FIRST)), (0.0, _a(NEVER))]
    gated, outs_g = _run(adapter, frame_times, watches=watches, monkeypatch=monkeypatch, gate_min_novelty=0.01,
                         gate_max_skip_s=30.0)
    always, outs_a = _run(adapter, frame_times, watches=watches, monkeypatch=monkeypatch, gate_min_novelty=0.0)
    def alerts(outs):
        return [(o.id, o.data["t_s"]) for o in outs if o.kind == "alert"]

    assert alerts(outs_g) == alerts(outs_a) and alerts(outs_a)
    sg, sa_ = gated.stats(), always.stats()
    assert sa_["probes_skipped"] == 0 and sa_["probes_run"] == 3 * 60
    assert sg["probes_run"] + sg["probes_skipped"] == 3 * 60
    assert sg["probes_skipped"] > sg["probes_run"]  # most chunks of this clip change nothing asked about
    assert sg["probe_forwards"] < sa_["probe_forwards"]


def test_questions_come_first_a_probe_delays_an_answer_by_one_forward_at_most(adapter, frame_times):
    oracle = OracleAdapter(adapter, frame_times)
    sa = StreamingAssistant(_cfg(probe_batch=2), adapter=oracle)
    for i in range(6):
        sa.watch(f"a {COLOURS[i]} circle")
    src = FileSource(CLIP, fps=FPS, t_end_s=2.0)
    while (f := src.read()) is not None:
        sa.insert(f)
    asked = []
    oracle.on_probe = lambda: asked.append(sa.ask("How many shapes are there?", t_s=2.0)) if not asked else None
    sa.engine.run_until_idle()
    out = _drain(sa.stream.outputs)
    # a round of 6 probes on a chunk is 3 forwards; the question arrives during the first forward and its answer
    # starts before the second
    assert [c for c in oracle.calls if c != "token"][:4] == ["probe", "generate", "probe", "probe"]
    assert [o.id for o in out if o.kind == "answer"] == asked
    st = sa.stats()
    assert st["probes_run"] + st["probes_skipped"] == 12  # both chunks decided, all six triggers each


def test_narration_gives_way_to_a_question_within_one_token(adapter, frame_times):
    oracle = OracleAdapter(adapter, frame_times)
    sa = StreamingAssistant(_cfg(narrate=True, max_new_tokens=6), adapter=oracle)
    src = FileSource(CLIP, fps=FPS, t_end_s=1.0)
    real_generate = oracle.generate

    def generate(context, prompt, max_new_tokens, stop=None):
        for i, piece in enumerate(real_generate(context, prompt, max_new_tokens, stop)):
            if i == 0 and "What do you see?" in prompt:
                sa.ask("What colour is the circle?", t_s=1.0)
            yield piece

    oracle.generate = generate
    sa.feed(iter(src.read, None))
    out = _drain(sa.stream.outputs)
    assert oracle.calls[:3] == ["generate", "token", "generate"]  # narration stopped after its first token
    assert next(o.kind for o in out if o.kind != "token") == "answer"
    assert sa.reasoning.narration.last_look_s is None  # the abandoned look is due again at the next chunk


def test_narration_says_something_new_only(adapter, frame_times):
    sa, outs = _run(adapter, frame_times, narrate=True, narrate_min_gap_s=2.0, narrate_max_silence_s=8.0,
                    narrate_min_novelty=0.0, narrate_prompt="What was on screen at {mmss}?")
    says = [o for o in outs if o.kind == "say"]
    prompts = sa.adapter.prompts
    assert len(prompts) >= len(says) and "What was on screen at 00:00?" in prompts[0]
    assert any("What was on screen at 00:10?" in p for p in prompts)  # a look every 2 s: 0.5, 2.5, ... 10.5
    assert says and all(set(o.to_json()) == {"type", "t_s", "text"} for o in says)
    assert all(b.data["t_s"] - a.data["t_s"] >= 2.0 for a, b in itertools.pairwise(says))
    assert all(a.text.lower() != b.text.lower() for a, b in itertools.pairwise(says))


def test_watch_api_and_threaded_alerts(adapter, frame_times):
    oracle = OracleAdapter(adapter, frame_times)
    with StreamingAssistant(_cfg(), adapter=oracle) as sa:
        tid = sa.watch(_a(FIRST), fire=0.7, k=1, cooldown_s=0.0)
        gone = sa.watch(f"Tell me when {_a(NEVER)} appears")
        assert [t["trigger_id"] for t in sa.triggers()] == [tid, gone]
        first = sa.triggers()[0]
        assert (first["condition"], first["probe"], first["fire"], first["k"]) == \
            (_a(FIRST), f"Is there {_a(FIRST)} now? Answer yes or no.", 0.7, 1)
        assert sa.unwatch(gone) and not sa.unwatch(gone) and not sa.unwatch("w99")
        with pytest.raises(ValueError, match="unknown trigger thresholds"):
            sa.watch("a red square", patience=2)
        sa.start(FileSource(CLIP, fps=FPS, t_end_s=30.0))
        alerts = []
        deadline = time.monotonic() + 120
        while not sa.ingest_done.is_set() and time.monotonic() < deadline:
            alerts += [o for o in sa.outputs(timeout_s=0.2) if o.kind == "alert"]
        alerts += [o for o in sa.outputs(timeout_s=1.0) if o.kind == "alert"]
    assert alerts and all(o.id == tid for o in alerts)
    # on a thread, reasoning may decide on fewer chunks than ingest encodes; every alert is still true when made
    assert all(FIRST in TRUTH.pairs(o.data["t_s"]) for o in alerts)


def test_cli_run_prints_alerts_in_stream_order_with_answers(tiny_model_dir):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "streamvid.cli", "run", str(CLIP), "--model", str(tiny_model_dir),
                        "--max-new-tokens", "2", "--ask", "9.5:Tell me when a green circle appears.",
                        "--ask", "20:How many shapes are there?", "--watch", f"0:{_a(NEVER)}", "--narrate"],
                       check=False, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert lines[-1]["type"] == "stats" and lines[-1]["triggers_active"] >= 1
    ack = next(x for x in lines if x["type"] == "answer")
    assert ack["t_s"] == 9.5 and ack["trigger_id"] == ack["id"]
    times = [x["t_s"] for x in lines[:-1]]
    assert times == sorted(times)
    assert {x["type"] for x in lines[:-1]} <= {"answer", "alert", "say"}
    assert any(x["type"] == "say" for x in lines)
    bad = subprocess.run([sys.executable, "-m", "streamvid.cli", "run", str(CLIP), "--watch", "soon:a star"],
                         check=False, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "expected T:CONDITION" in bad.stderr


def _answer(sa: StreamingAssistant, qid: str, timeout_s: float) -> Output | None:
    """The answer to question `qid` as soon as it comes, or None after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for o in sa.outputs(timeout_s=0.05):
            if o.kind == "answer" and o.id == qid:
                return o
    return None


def test_the_scheduler_wakes_for_a_question_and_new_frames(adapter, frame_times):
    """The scheduler thread sleeps up to the read timeout (an hour here) only when there is nothing to do: a
    question and new frames wake it at once. Each wait below ends when what it waits for happens, bounded at a
    minute: far less than the hour a scheduler that slept through the work would take."""
    oracle = OracleAdapter(adapter, frame_times)
    sa = StreamingAssistant(_cfg(read_timeout_s=3600.0), adapter=oracle)
    sa.engine.start()
    try:
        sa.watch(_a(FIRST))
        src = FileSource(CLIP, fps=FPS, t_end_s=1.0)
        while (f := src.read()) is not None:
            sa.insert(f)
        assert wait_until(lambda: "probe" in oracle.calls, timeout_s=60), "the new block was not decided on"
        qid = sa.ask("How many shapes are there?", t_s=1.0)
        answer = _answer(sa, qid, timeout_s=60)
        assert answer is not None and answer.data["question"] == "How many shapes are there?"
    finally:
        sa.stop()


def _drain(q: queue.Queue) -> list[Output]:
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out


def test_ack_is_recorded_like_an_answer(adapter, frame_times):
    oracle = OracleAdapter(adapter, frame_times)
    sa = StreamingAssistant(_cfg(), adapter=oracle)
    ack = sa.reasoning.handle(Question("q7", "Notify me whenever you see a red square.", 3.0))
    assert ack.kind == "answer" and ack.data["trigger_id"] == "q7"
    assert sa.triggers()[0]["once"] is False  # "whenever": a standing trigger


def test_score_runs_forward_questions_natively_and_reports_timeliness(adapter, frame_times, monkeypatch, tmp_path):
    """With probes that see the truth, every "tell me when" question of the demo episode is answered on time."""
    import streamvid.adapters.base
    from streamvid.eval.score import score_files

    monkeypatch.setattr(streamvid.adapters.base, "load_adapter", lambda *a, **k: OracleAdapter(adapter, frame_times))
    cfg = _cfg(max_new_tokens=2, memory_top_k=2)
    report = score_files([DEMO / "episodes.jsonl"], cfg, tmp_path)
    pro = report["proactive"]
    forward = [e for e in json.loads((DEMO / "episodes.jsonl").read_text())["events"] if e.get("task") == "forward"]
    assert pro["questions"] == pro["gold_windows"] == len(forward) >= 3
    assert pro["timeliness_f1_k1"] == {"f1": 1.0, "precision": 1.0, "recall": 1.0}
    assert pro["false_alerts"] == 0 and pro["missed_windows"] == 0
    assert 0.0 <= pro["delay_s_median"] <= pro["delay_s_p90"] <= 2.5
    trace = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    alerts = [r for r in trace if r["type"] == "alert"]
    assert sorted(r["event_id"] for r in alerts) == sorted(e["id"] for e in forward)
    acks = [r for r in trace if r["type"] == "answer" and r.get("trigger_id")]
    assert sorted(r["event_id"] for r in acks) == sorted(e["id"] for e in forward)
