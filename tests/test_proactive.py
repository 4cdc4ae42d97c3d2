"""The pure decision logic of speaking up: firing rule, change gate, narration policy (a fake clock drives them)."""

from __future__ import annotations

import numpy as np
import pytest

from streamvid.engine.proactive import ChangeGate, FiringRule, NarrationPolicy, Thresholds, novelty, same_remark


class FakeClock:
    """Stream time that moves only when told to: one tick per decided chunk."""

    def __init__(self, step_s: float = 1.0, t_s: float = 0.0):
        self.step_s, self.t_s = step_s, t_s

    def tick(self) -> float:
        t, self.t_s = self.t_s, self.t_s + self.step_s
        return t


def fired_at(rule: FiringRule, scores, clock: FakeClock) -> list[float]:
    out = []
    for s in scores:
        t = clock.tick()
        if rule.update(s, t):
            out.append(t)
    return out


def test_rising_edge_fires_once_and_rearms_only_below_reset():
    rule = FiringRule(Thresholds(fire=0.6, reset=0.4, k=2, cooldown_s=0.0))
    #        t = 0    1    2    3    4    5    6    7    8    9
    scores = [0.2, 0.7, 0.7, 0.7, 0.5, 0.7, 0.7, 0.3, 0.7, 0.7]
    # fires at t=2 (2nd positive in a row); 0.5 (between reset and fire) does not re-arm, so t=5..6 are silent;
    # 0.3 < reset re-arms at t=7; the next two positives fire at t=9
    assert fired_at(rule, scores, FakeClock()) == [2.0, 9.0]


def test_k_consecutive_positive_chunks_are_required():
    flicker = [0.9, 0.1] * 5
    assert fired_at(FiringRule(Thresholds(k=2, cooldown_s=0.0)), flicker, FakeClock()) == []
    assert fired_at(FiringRule(Thresholds(k=1, cooldown_s=0.0)), flicker, FakeClock()) == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert fired_at(FiringRule(Thresholds(k=3, cooldown_s=0.0)), [0.9, 0.9, 0.1, 0.9, 0.9, 0.9], FakeClock()) == [5.0]


def test_cooldown_holds_a_second_event_until_it_ends():
    rule = FiringRule(Thresholds(fire=0.6, reset=0.4, k=1, cooldown_s=10.0))
    scores = [0.9, 0.1] + [0.9] * 10  # the event comes back at t=2, inside the cooldown, and stays
    assert fired_at(rule, scores, FakeClock()) == [0.0, 10.0]
    rule = FiringRule(Thresholds(fire=0.6, reset=0.4, k=1, cooldown_s=10.0))
    assert fired_at(rule, [0.9, 0.1, 0.9, 0.1] + [0.1] * 8, FakeClock()) == [0.0]  # gone before the cooldown ends


def test_one_event_one_alert_on_an_uneven_clock():
    rule = FiringRule(Thresholds(k=2, cooldown_s=5.0))
    times = [0.0, 0.5, 1.5, 1.75, 4.0, 30.0]
    scores = [0.7, 0.8, 0.9, 0.95, 0.99, 0.99]
    assert [t for t, s in zip(times, scores) if rule.update(s, t)] == [0.5]


def test_time_must_not_go_back_and_thresholds_are_checked():
    rule = FiringRule(Thresholds())
    rule.update(0.1, 5.0)
    with pytest.raises(ValueError, match="went back"):
        rule.update(0.1, 4.0)
    with pytest.raises(ValueError, match="reset <= fire"):
        Thresholds(fire=0.3, reset=0.5)
    with pytest.raises(ValueError, match="k must be >= 1"):
        Thresholds(k=0)
    with pytest.raises(ValueError, match="unknown trigger thresholds"):
        Thresholds().replace(fire=0.7, patience=3)
    assert Thresholds(k=3).replace(fire=0.7) == Thresholds(fire=0.7, k=3)


def _unit(v):
    v = np.asarray(v, np.float32)
    return v / np.linalg.norm(v)


@pytest.mark.parametrize("follow_up", [0, 1])
def test_change_gate_skips_unchanged_scenes_and_looks_after_max_skip(follow_up):
    gate = ChangeGate(min_novelty=0.05, max_skip_s=3.0, follow_up=follow_up)
    a, a2, b = _unit([1, 0, 0]), _unit([1, 0.1, 0]), _unit([0, 1, 0])
    assert novelty(a, a2) == pytest.approx(1 - 1 / np.sqrt(1.01), abs=1e-6)  # 0.005: below the gate
    assert novelty(a, b) == pytest.approx(1.0, abs=1e-6) and novelty(a, None) == 1.0
    clock = FakeClock()
    decisions = []
    for v in [a, a2, a, a2, a, b, b, a]:
        t = clock.tick()
        look = gate.should_look(v, t)
        decisions.append(look)
        gate.look(v, t) if look else gate.skip()
    # t=0 first look; t=1,2 unchanged; t=3 max_skip reached (no change: no follow-up); t=4 unchanged; t=5 new
    # scene; t=6 same scene, looked at again as the follow-up of that change; t=7 changed
    assert decisions == [True, False, False, True, False, True, follow_up == 1, True]
    assert (gate.looked, gate.skipped) == (4 + follow_up, 4 - follow_up)
    always = ChangeGate(min_novelty=0.0, max_skip_s=3.0)
    always.look(a, 0.0)
    assert always.should_look(a, 0.5)


def test_token_novelty_ignores_where_a_token_sits_and_sees_a_new_one():
    e = np.eye(4, dtype=np.float32)
    scene = np.stack([e[0], e[0], e[1]])  # background, background, an object
    moved = np.stack([e[1], e[0], e[0]])  # the object in another cell
    assert novelty(moved, scene) == pytest.approx(0.0, abs=1e-9)
    came = np.stack([e[0], e[2], e[1]])  # a new object: nothing like it before
    assert novelty(came, scene) == pytest.approx(1.0)
    went = np.stack([e[0], e[0], e[0]])  # the object left: a reference token has no twin any more
    assert novelty(went, scene) == pytest.approx(1.0)
    half = np.stack([e[0], e[0], (e[1] + e[3]) / np.sqrt(2)])  # the object changed halfway: cos 1/sqrt(2)
    assert novelty(half, scene) == pytest.approx(1 - 1 / np.sqrt(2))
    assert novelty(scene, None) == 1.0 and novelty(scene, e[0]) == 1.0  # no reference / not comparable


@pytest.mark.parametrize("a,b,same", [
    ("blue star, red circle", "Red circle, blue star.", True),
    ("blue star and red circle", "blue star, red circle", True),
    ("blue star", "blue star, red circle", False),
    ("nothing", "Nothing", True),
    ("two shapes", "three shapes", False),
])
def test_same_remark(a, b, same):
    assert same_remark(a, b) is same


def test_narration_speaks_on_change_keeps_a_gap_breaks_silence_and_never_repeats():
    policy = NarrationPolicy(min_gap_s=2.0, max_silence_s=6.0, min_novelty=0.1)
    a, b = _unit([1, 0, 0]), _unit([0, 1, 0])
    said = []

    def chunk(t, v, text):
        if policy.due(v, t) and policy.offer(text, v, t):
            said.append((t, text))

    chunk(0.0, a, "blue star")  # first look: speaks
    chunk(1.0, b, "red circle")  # changed, but within the minimum gap
    chunk(2.0, b, "red circle")  # gap passed, scene moved from the last look: speaks
    chunk(3.0, b, "red circle")  # too soon
    chunk(4.0, b, "red circle")  # unchanged since the last look, silence 2 s < 6 s: not due
    chunk(8.0, b, "Red circle.")  # silent 6 s: due, but it would repeat itself: stays silent
    chunk(9.0, b, "red circle")  # looked at 8: gap not passed
    chunk(14.0, b, "red circle, green square")  # silence since 2 s (said) and since 8 s (looked) -> due; new text
    chunk(15.0, a, "")  # too soon
    chunk(16.0, a, "")  # due (changed) but empty: nothing said
    assert said == [(0.0, "blue star"), (2.0, "red circle"), (14.0, "red circle, green square")]
    with pytest.raises(ValueError, match="min_gap_s <= max_silence_s"):
        NarrationPolicy(min_gap_s=5.0, max_silence_s=1.0, min_novelty=0.1)
