"""ShapesWorld: determinism, invariants, gold answers against pixels, mp4 round trip, episode format."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from streamvid.synth import ALL_FAMILIES, COLOURS, SHAPES, describe, generate, render, sample_qa, write_dataset
from streamvid.synth.questions import FAMILIES
from streamvid.synth.world import (CELL_PX, FRAME_PX, MIN_STAY_S, Obj, Timeline, cell_grid, h264_encoder, shape_mask,
                                   write_mp4)

WINDOW_S = 16.0
PALETTE = np.array(list(COLOURS.values()), float)
NAMES = list(COLOURS)


@pytest.fixture(scope="module")
def long_tl() -> Timeline:
    return generate(11, 600.0)


@pytest.fixture(scope="module")
def long_frames(long_tl) -> list[list]:
    return [long_tl.objects_at(k / long_tl.fps) for k in range(long_tl.n_frames)]


def _words(text: str, vocab) -> list[str]:
    return [w for w in re.findall(r"[a-z]+", text.lower()) if w in vocab]


def _nearest_colour(rgb) -> tuple[str, float]:
    d = np.abs(PALETTE - np.asarray(rgb, float)).mean(1)
    return NAMES[int(d.argmin())], float(d.min())


def test_same_seed_same_stream_other_seed_differs():
    a, b, c = generate(5, 90.0), generate(5, 90.0), generate(6, 90.0)
    assert a.to_json() == b.to_json()
    assert a.to_json()["tracks"] != c.to_json()["tracks"]
    for t in (0.0, 12.5, 47.0, 89.9):
        assert np.array_equal(render(a, t), render(b, t))
    assert any(not np.array_equal(render(a, t), render(c, t)) for t in (10.0, 30.0, 60.0))
    assert Timeline.from_json(json.loads(json.dumps(a.to_json()))).to_json() == a.to_json()


def test_invariants_over_ten_minutes(long_tl, long_frames):
    shapes, colours = set(), set()
    for objs in long_frames:
        assert len(objs) <= 3
        assert len({o.shape for o in objs}) == len(objs) and len({o.colour for o in objs}) == len(objs)
        assert len({o.cell for o in objs}) == len(objs)  # one object per cell
        for o in objs:
            col, row = o.cell
            assert abs(o.x - (col + 0.5) / 4) <= 1.5 / FRAME_PX + 1e-9 and abs(o.y - (row + 0.5) / 4) <= 1.5 / FRAME_PX + 1e-9
            assert 0.7 * 0.25 <= o.size <= 0.85 * 0.25  # fills most of its cell
            shapes.add(o.shape)
            colours.add(o.colour)
    assert len(shapes) >= 5 and colours == set(COLOURS)
    counts = {len(objs) for objs in long_frames}
    assert counts == {0, 1, 2, 3}
    for tr in long_tl.tracks:
        assert tr.leave_s - tr.enter_s >= MIN_STAY_S - 1e-6 or tr.leave_s >= long_tl.duration_s - 1e-6
    once = [s for s in SHAPES if sum(tr.shape == s for tr in long_tl.tracks) == 1]
    assert len(once) >= 2  # the one-off appearances memory questions rely on
    for e in long_tl.events:  # events agree with the frame states
        k = long_tl.frame_index(e.t_s)
        here = {o.id: o.colour for o in long_frames[k]}
        before = {o.id: o.colour for o in long_frames[k - 1]} if k else {}
        if e.kind == "enter":
            assert here[e.obj_id] == e.colour and e.obj_id not in before
        elif e.kind == "leave":
            assert e.obj_id in before and e.obj_id not in here
        elif e.kind == "move":
            old = {o.id: o.cell for o in long_frames[k - 1]}
            new = {o.id: o.cell for o in long_frames[k]}
            assert (old[e.obj_id], new[e.obj_id]) == (e.old_cell, e.cell) and e.cell != e.old_cell
        else:
            assert (before[e.obj_id], here[e.obj_id]) == (e.old_colour, e.colour)


def test_every_object_stays_inside_one_token_cell_in_the_pixels(long_tl):
    """From the rendered pixels alone: each shape colour's pixels fall inside exactly one 28-px cell, the cell the
    timeline names, and the objects move by hopping between cells."""
    assert cell_grid({"video_processor": {"patch_size": 14, "merge_size": 2}}) == FRAME_PX // CELL_PX == 4
    checked, moves = 0, sum(e.kind == "move" for e in long_tl.events)
    for k in range(0, long_tl.n_frames, 7):
        img = render(long_tl, k / long_tl.fps).reshape(-1, 3).astype(float)
        d = np.abs(img[:, None] - PALETTE[None]).mean(2)
        for o in long_tl.objects_at(k / long_tl.fps):
            i = NAMES.index(o.colour)
            ys, xs = np.divmod(np.flatnonzero((d.argmin(1) == i) & (d.min(1) < 12)), FRAME_PX)
            assert len(ys) > 100, (k, o)
            assert {(int(x) // CELL_PX, int(y) // CELL_PX) for x, y in zip(xs, ys)} == {o.cell}, (k, o)
            checked += 1
    assert checked > 100 and moves > 20


def test_render_shapes_are_drawn_at_their_centres():
    for shape in SHAPES:
        mask = shape_mask(Obj(0, shape, "red", 0.5, 0.5, 0.2), 112)
        assert mask[56, 56] and 120 < mask.sum() < 0.2 * 112 * 112 * 0.8, (shape, mask.sum())
    masks = {s: shape_mask(Obj(0, s, "red", 0.5, 0.5, 0.4), 112) for s in SHAPES}
    assert len({m.tobytes() for m in masks.values()}) == len(SHAPES)


def test_realtime_gold_agrees_with_pixels():
    tl, rng = generate(3, 120.0), np.random.default_rng(0)
    checked = 0
    for k in range(0, tl.n_frames, 3):
        t = k / tl.fps
        img = render(tl, t)
        d = np.abs(img.reshape(-1, 1, 3).astype(float) - PALETTE[None]).mean(2)  # (pixels, colours)
        areas = {c: int(((d.argmin(1) == i) & (d.min(1) < 30)).sum()) for i, c in enumerate(NAMES)}
        if (qa := FAMILIES["realtime_count"](tl, t, rng, WINDOW_S)) is not None:
            assert qa.answer == str(sum(a >= 60 for a in areas.values())), (t, areas)
            checked += 1
        if (qa := FAMILIES["realtime_colour"](tl, t, rng, WINDOW_S)) is not None:
            (shape,) = _words(qa.text, SHAPES)
            (obj,) = [o for o in tl.objects_at(t) if o.shape == shape]
            centre = img[min(111, int(obj.y * 112)), min(111, int(obj.x * 112))]
            assert _nearest_colour(centre)[0] == qa.answer
            checked += 1
        if (qa := FAMILIES["realtime_shape"](tl, t, rng, WINDOW_S)) is not None:
            (colour,) = _words(qa.text, COLOURS)
            (obj,) = [o for o in tl.objects_at(t) if o.shape == qa.answer]
            assert _nearest_colour(img[min(111, int(obj.y * 112)), min(111, int(obj.x * 112))])[0] == colour
    assert checked > 40


def test_yes_no_families_are_right_and_balanced(long_tl):
    rng = np.random.default_rng(1)
    for fam in ("realtime_exists", "probe"):
        answers = []
        for t in rng.uniform(0, long_tl.duration_s, 300):
            if (qa := FAMILIES[fam](long_tl, float(t), rng, WINDOW_S)) is None:
                continue
            (colour,), (shape,) = _words(qa.text, COLOURS), _words(qa.text, SHAPES)
            assert qa.answer == ("yes" if (colour, shape) in describe(long_tl, t) else "no")
            answers.append(qa.answer)
        assert 0.35 < answers.count("yes") / len(answers) < 0.65, (fam, len(answers))


def test_memory_and_forward_questions_hold_their_conditions(long_tl, long_frames):
    rng, fps = np.random.default_rng(2), long_tl.fps
    seen = {f: 0 for f in ("backward_colour", "backward_shape", "backward_at_time", "forward")}
    for t in np.arange(20.0, long_tl.duration_s, 7.5):
        k = long_tl.frame_index(t)
        now = long_frames[k]
        for fam in seen:
            if (qa := FAMILIES[fam](long_tl, float(t), rng, WINDOW_S)) is None:
                continue
            seen[fam] += 1
            if fam in ("backward_colour", "backward_shape"):  # recomputed from frame states alone
                attr, other = ("shape", "colour") if fam == "backward_colour" else ("colour", "shape")
                (asked,) = _words(qa.text, SHAPES if attr == "shape" else COLOURS)
                hits = [(j, o) for j in range(k + 1) for o in long_frames[j] if getattr(o, attr) == asked]
                assert len({o.id for _, o in hits}) == 1  # unique so far
                assert {getattr(o, other) for _, o in hits} == {qa.answer}  # one colour: never recoloured
                assert len({o.colour for j in range(k + 1) for o in long_frames[j] if o.id == hits[0][1].id}) == 1
                assert all(getattr(o, attr) != asked for o in now)
                assert (hits[-1][0] + 1) / fps <= t - WINDOW_S + 1e-6  # left more than window_s ago
            elif fam == "backward_at_time":
                m, s = map(int, re.search(r"(\d\d):(\d\d)", qa.text).groups())
                tau = 60 * m + s
                assert tau <= t - WINDOW_S
                want = ", ".join(f"{c} {sh}" for c, sh in describe(long_tl, tau)) or "nothing"
                assert qa.answer == want
                assert all(describe(long_tl, tau + d / fps) == describe(long_tl, tau) for d in range(-2, 3))
            else:
                t_gold = float(qa.answer)
                assert qa.evidence_s == (t_gold, t_gold) and 2.0 <= t_gold - long_tl.frame_time(t) <= 60.0
                (colour,), (shape,) = _words(qa.text, COLOURS), _words(qa.text, SHAPES)
                kg = long_tl.frame_index(t_gold)
                assert (colour, shape) in {(o.colour, o.shape) for o in long_frames[kg]}
                assert all((colour, shape) not in {(o.colour, o.shape) for o in long_frames[j]} for j in range(k, kg))
    assert all(n >= 5 for n in seen.values()), seen


def test_sample_qa_draws_valid_families():
    tl, rng = generate(4, 120.0), np.random.default_rng(3)
    fams = {qa.family for t in np.arange(0, 120, 2.0) if (qa := sample_qa(tl, float(t), rng, WINDOW_S))}
    assert len(fams) >= 7 and fams <= set(ALL_FAMILIES)
    only = [sample_qa(tl, float(t), rng, WINDOW_S, families=["realtime_count"]) for t in range(0, 120, 5)]
    assert {qa.family for qa in only if qa} == {"realtime_count"}
    with pytest.raises(ValueError, match="unknown families"):
        sample_qa(tl, 60.0, rng, WINDOW_S, families=["nope"])
    with pytest.raises(ValueError, match="t_s must lie"):
        tl.objects_at(121.0)


def test_mp4_round_trip_keeps_frames_and_colours(tmp_path):
    import av

    tl = generate(8, 60.0)
    path = write_mp4(tl, tmp_path / "s.mp4")
    assert h264_encoder() in ("libx264", "h264") and path.stat().st_size < 1_000_000
    with av.open(str(path)) as c:
        assert c.streams.video[0].codec_context.name == "h264"
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert len(frames) == tl.n_frames == 120
    errs = [np.abs(frames[k][shape_mask(o, 112)].astype(float) - COLOURS[o.colour]).mean()
            for k in range(0, 120, 5) for o in tl.objects_at(k / tl.fps)]
    assert errs and max(errs) < 40, max(errs)


def test_write_dataset_writes_valid_episodes(tmp_path):
    video, tl_path, eps_path = write_dataset(9, 1.5, tmp_path)
    assert video.name == "shapes_9.mp4" and video.exists() and tl_path.name == "shapes_9.timeline.json"
    tl = Timeline.from_json(json.loads(tl_path.read_text()))
    (ep,) = [json.loads(line) for line in eps_path.read_text().splitlines()]
    assert ep["schema"] == "stream-episode/1"
    assert {"episode_id", "source", "video", "protocol", "events", "meta"} <= set(ep)
    assert ep["source"]["benchmark"] == "shapesworld" and (tmp_path / ep["video"]["path"]).exists()
    events, ids = ep["events"], [e["id"] for e in ep["events"]]
    assert len(ids) == len(set(ids))
    queries = {e["id"]: e for e in events if e["kind"] == "user_query"}
    times = [e["t"] for e in events if "t" in e]
    assert times == sorted(times) and all(0 <= t < tl.duration_s for t in times)
    tasks = set()
    for e in events:
        assert e["kind"] in ("user_query", "expected_answer", "probe", "expected_response")
        if e["kind"] in ("user_query", "probe"):
            assert e["task"] in ALL_FAMILIES and e["text"]
            tasks.add(e["task"])
        if e["kind"] == "probe":
            assert e["gold"] in ("Yes", "No")
        if e["kind"] == "expected_answer":
            assert e["ref"] in queries and e["gold"]["text"] and e["scorer"] in ("exact", "substring")
        if e["kind"] == "expected_response":
            q = queries[e["ref"]]
            assert q["task"] == "forward" and q["t"] < e["t_gold"] < tl.duration_s
            assert e["window"] == [e["t_gold"] - 1.0, e["t_gold"] + 3.0] and e["gold_text"]
    assert len(tasks) >= 8, tasks
