"""Questions about what was said, as a user of `streamvid run` asks them: the accuracy of the speech families
(realtime_said, backward_said_at_time, when_said) on held-out ShapesWorld streams with sound.

    python benchmarks/speech_run.py [--seeds 9601-9610] [--minutes 5] [--work DIR] [-- EXTRA RUN FLAGS]

For each seed: `streamvid synth --seed S --minutes M` (both voices when installed; held-out seeds: the bundled
model trains on others; an existing folder is reused), then one `streamvid run shapes_S.mp4 --ask T:Q ...` with
every speech question of the stream at its time and nothing else changed: the stream's sound goes through the
default recogniser into speech blocks, as for any user. EXTRA RUN FLAGS (e.g. `--memory-top-k 0`, `--model DIR`)
are added when given and named in the summary. Each answer is scored against the episode's gold with the
episode's scorer (`eval.metrics.score`: case, punctuation and number words normalised), and, apart from what the
recogniser got wrong, against what the stream's own `transcript` lines say ("heard"): the words of the newest
transcript before the question (realtime), of the transcript starting in the named second (backward), the
"mm:ss" of the transcript holding the quoted word (when); a question whose transcript does not exist is left out
of "heard". "recognised": the share of questions whose own transcript answer (the same rule) is right by the
gold, i.e. the recogniser heard the line well enough for a model that copies perfectly to be right; it bounds the
accuracy a model can reach with this recogniser. "accuracy_when_recognised": the accuracy on those questions alone.

Prints progress on stderr and one JSON summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from alerts_run import seeds  # (benchmarks/: "1001-1010,1020" -> the seeds)

from streamvid.eval.metrics import normalise, score

FAMILIES = ("realtime_said", "backward_said_at_time", "when_said")


def log(msg: str) -> None:
    print(f"[speech_run {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def heard_answer(e: dict, heard: list[dict]) -> str | None:
    """What the question's answer is by the stream's own transcripts (None: no transcript answers it)."""
    if e["task"] == "realtime_said":
        before = [h for h in heard if h["t_end_s"] <= e["t"]]
        return before[-1]["text"] if before else None
    if e["task"] == "backward_said_at_time":
        m = re.search(r"(\d\d):(\d\d)", e["text"])
        at = [h for h in heard if int(h["t_s"]) == int(m[1]) * 60 + int(m[2])]
        return at[0]["text"] if at else None
    word = normalise(re.search(r"'([^']+)'", e["text"])[1])
    holding = [h for h in heard if h["t_end_s"] <= e["t"] and f" {word} " in f" {normalise(h['text'])} "]
    if len(holding) != 1:
        return None
    t = int(holding[0]["t_s"])
    return f"{t // 60:02d}:{t % 60:02d}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="9601-9610")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--work", type=Path, default=Path("runs/speech_run"))
    ap.add_argument("extra", nargs="*", help="flags added to every `streamvid run` (after --)")
    args = ap.parse_args()
    right: dict[str, list[bool]] = {f: [] for f in FAMILIES}
    copied: dict[str, list[bool]] = {f: [] for f in FAMILIES}
    recognised: dict[str, list[bool]] = {f: [] for f in FAMILIES}
    right_recognised: dict[str, list[bool]] = {f: [] for f in FAMILIES}
    misses = []
    for seed in seeds(args.seeds):
        folder = args.work / f"s{seed}"
        if not (folder / "episodes.jsonl").exists():
            subprocess.run([sys.executable, "-m", "streamvid.cli", "synth", "--seed", str(seed), "--minutes",
                            str(args.minutes), "--out", str(folder)], check=True, capture_output=True)
        ep = json.loads((folder / "episodes.jsonl").read_text().splitlines()[0])
        gold = {e["ref"]: e for e in ep["events"] if e["kind"] == "expected_answer"}
        asks = sorted((e for e in ep["events"] if e["kind"] == "user_query" and e.get("task") in FAMILIES),
                      key=lambda e: e["t"])
        cmd = [sys.executable, "-m", "streamvid.cli", "run", str(folder / ep["video"]["path"]), *args.extra]
        for e in asks:
            cmd += ["--ask", f"{e['t']}:{e['text']}"]
        t0 = time.monotonic()
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        answers = [o for o in map(json.loads, (x for x in out.splitlines() if x.startswith("{")))
                   if o.get("type") == "answer"]
        by_ask = {(a["question"], round(a["t_s"], 1)): a["text"] for a in answers}
        heard = [o for o in map(json.loads, (x for x in out.splitlines() if x.startswith("{")))
                 if o.get("type") == "transcript"]
        for e in asks:
            reply = by_ask.get((e["text"], round(e["t"], 1)), "")
            if (said := heard_answer(e, heard)) is not None:
                copied[e["task"]].append(score(reply, said, "substring"))
            g = gold[e["id"]]
            ok = score(reply, g["gold"]["text"], g["scorer"])
            right[e["task"]].append(ok)
            rec = said is not None and score(said, g["gold"]["text"], g["scorer"])
            recognised[e["task"]].append(rec)
            if rec:
                right_recognised[e["task"]].append(ok)
            if not ok:
                misses.append({"seed": seed, "t": e["t"], "task": e["task"], "question": e["text"],
                               "gold": g["gold"]["text"], "answer": reply})
        log(f"seed {seed}: {len(asks)} questions in {time.monotonic() - t0:.0f} s")
    def share(v: list[bool]) -> float | None:
        return round(sum(v) / len(v), 3) if v else None

    acc = {f: share(v) for f, v in right.items()}
    heard_acc = {f: [share(v), len(v)] for f, v in copied.items()}
    realtime_backward = right["realtime_said"] + right["backward_said_at_time"]
    summary = {"settings": "streamvid run defaults" + (f" plus {' '.join(args.extra)}" if args.extra else ""),
               "seeds": args.seeds, "minutes": args.minutes, "n": {f: len(v) for f, v in right.items()},
               "accuracy": acc, "heard_accuracy_n": heard_acc,
               "recognised": {f: share(v) for f, v in recognised.items()},
               "accuracy_when_recognised_n": {f: [share(v), len(v)] for f, v in right_recognised.items()},
               "realtime_and_backward": round(sum(realtime_backward) / max(1, len(realtime_backward)), 3),
               "misses": misses}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
