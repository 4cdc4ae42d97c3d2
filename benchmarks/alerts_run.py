"""Alerts as a user of `streamvid run` gets them: Timeliness-F1, false alerts per 10 minutes and delay of the
"tell me when" questions of held-out ShapesWorld streams, asked with `--ask T:QUESTION`.

    python benchmarks/alerts_run.py [--seeds 1001-1010] [--minutes 10] [--work DIR] [--said] [-- EXTRA RUN FLAGS]

For each seed: `streamvid synth --seed S --minutes M --speech off` (held-out seeds: the bundled model trains on
others), then one `streamvid run shapes_S.mp4 --ask T:Q ...` with every "forward" question of the stream at its
time and nothing else changed (the defaults a user gets; EXTRA RUN FLAGS are added when given and named in the
summary). Each question's acknowledgement (an answer with `trigger_id`) ties it to its trigger; the trigger's
alert lines are its replies, scored against the question's gold windows with the same rules as `streamvid score`
(`eval.timeliness.report`: K=1 Timeliness-F1, false replies per 10 min, delay after the event). A false alert
is listed with the timeline around it so its cause can be read.

`--said`: the "said" questions ("Tell me when someone says 'stop'.", family forward_said) of streams with sound
(synth's default voices) instead of the forward questions of silent streams; a false alert lists what was heard.

Prints progress on stderr and one JSON summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streamvid.eval import timeliness

TARGETS = {"f1": 0.90, "false_per_10min": 1.0, "delay_median_s": 2.0}


def log(msg: str) -> None:
    print(f"[alerts_run {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def seeds(spec: str) -> list[int]:
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def forward_questions(ep: dict, said: bool = False) -> list[tuple[dict, list[timeliness.Gold]]]:
    golds: dict[str, list[timeliness.Gold]] = {}
    for e in ep["events"]:
        if e["kind"] == "expected_response":
            timing = e.get("timing") or {}
            golds.setdefault(e["ref"], []).append(timeliness.Gold(
                e["t_gold"], tuple(e["window"]), **{k: timing[k] for k in ("sigma_early", "sigma_late") if k in timing}))
    return [(e, golds[e["id"]]) for e in ep["events"] if e["kind"] == "user_query" and e["id"] in golds
            and (e.get("task") == "forward_said") == said]


def run_stream(video: Path, asks: list[dict], extra: list[str]) -> tuple[list[dict], float]:
    cmd = [sys.executable, "-m", "streamvid.cli", "run", str(video), *extra]
    for e in asks:
        cmd += ["--ask", f"{e['t']}:{e['text']}"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")], time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1001-1010")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--said", action="store_true", help="the said questions of streams with sound")
    ap.add_argument("extra", nargs="*", help="flags added to every `streamvid run` (after --)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="alerts_run_"))
    questions: list[timeliness.Question] = []
    false_alerts, stream_s, wall_s = [], 0.0, 0.0
    for seed in seeds(args.seeds):
        out = work / f"s{seed}"
        if not (out / "episodes.jsonl").is_file():
            subprocess.run([sys.executable, "-m", "streamvid.cli", "synth", "--seed", str(seed), "--minutes",
                            str(args.minutes), "--out", str(out), "--speech", "auto" if args.said else "off"],
                           check=True, stdout=subprocess.DEVNULL)
        ep = json.loads((out / "episodes.jsonl").read_text().splitlines()[0])
        timeline = json.loads((out / f"shapes_{seed}.timeline.json").read_text())
        asked = forward_questions(ep, args.said)
        lines, wall = run_stream(out / f"shapes_{seed}.mp4", [e for e, _ in asked], args.extra)
        wall_s += wall
        stream_s += ep["video"]["t_end"] - ep["video"]["t_start"]
        acks = [o for o in lines if o.get("type") == "answer" and o.get("trigger_id")]
        by_text = {}
        for o in acks:
            by_text.setdefault(o["question"], []).append(o["trigger_id"])
        alerts: dict[str, list[float]] = {}
        heard: dict[float, str] = {}
        for o in lines:
            if o.get("type") == "alert":
                alerts.setdefault(o["trigger_id"], []).append(o["t_s"])
                heard[o["t_s"]] = o.get("heard")
        n_false = 0
        for e, golds in asked:
            trigger = by_text.get(e["text"], [None]).pop(0) if by_text.get(e["text"]) else None
            replies = alerts.get(trigger, []) if trigger else []
            questions.append(timeliness.Question(golds, replies))
            m = timeliness.match(replies, golds)
            for t in m.false_replies:
                n_false += 1
                false_alerts.append({"seed": seed, "question": e["text"], "asked_t": e["t"], "alert_t": t,
                                     "gold_windows": [g.window for g in golds],
                                     **({"heard": heard.get(t)} if args.said
                                        else {"on_screen": scene_at(timeline, t)})})
        log(f"seed {seed}: {len(asked)} questions, {sum(len(v) for v in alerts.values())} alerts, "
            f"{n_false} false, {wall:.0f} s")
    report = timeliness.report(questions, stream_s)
    summary = {"settings": "streamvid run defaults" + (f" plus {' '.join(args.extra)}" if args.extra else ""),
               "asked": "said" if args.said else "forward", "seeds": args.seeds, "minutes_each": args.minutes,
               "stream_min": round(stream_s / 60, 1),
               "x_real_time": round(stream_s / wall_s, 2), **report, "false_alert_list": false_alerts}
    summary["met"] = {"f1": report["timeliness_f1_k1"]["f1"] >= TARGETS["f1"],
                      "false_per_10min": report["false_alerts_per_10min"] <= TARGETS["false_per_10min"],
                      "delay": (report["delay_s_median"] or 1e9) <= TARGETS["delay_median_s"]}
    print(json.dumps(summary, indent=1))
    return 0


def scene_at(timeline: dict, t: float) -> list[str]:
    """What was on screen around stream time t (the timeline's states from 2 s before), to read a false alert's
    cause: "12.0: red circle, blue star"."""
    out = []
    for state in timeline["states"]:
        if t - 2.0 <= state["t"] <= t + 0.5:
            out.append(f"{state['t']}: " + ", ".join(f"{o['colour']} {o['shape']}" for o in state["objects"]))
    return out


if __name__ == "__main__":
    sys.exit(main())
