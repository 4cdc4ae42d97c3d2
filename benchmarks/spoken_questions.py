"""Spoken against typed questions in a replay: the same questions asked at the same stream times, once written
(`--ask T:Q`) and once as recordings (`--ask-audio T:FILE.wav`), through `streamvid run` with its defaults.

    python benchmarks/spoken_questions.py [--seeds 1001-1005] [--work runs/heldout] [-- EXTRA RUN FLAGS]

For each seed: the silent held-out stream `streamvid synth --seed S --minutes 10 --speech off` (an existing folder
is reused), and its user questions about now and the past (the realtime and backward families but the one naming a
time, unless `--families` names it; "tell me when" requests are watches, not questions). Each recording is
"Assistant, <question>" in espeak-ng's en-us voice (the voice of benchmarks/voice_loop.py, a voice train-tiny's
spoken questions never use), heard by the stream's recogniser as `--ask-audio` hears it (Whisper tiny.en by
default, told the wake word). Both runs replay the whole stream with every question at its time, so answers differ
only by the words asked. Each answer is scored against the episode's gold with its scorer (`eval.metrics.score`).
"heard_as_written": the share of recordings whose words, normalised as the scorer normalises answers, are the
question's ("color" counted as "colour", as the bundled tokenizer reads it); "spoken_accuracy_n" splits the spoken
answers by it. EXTRA RUN FLAGS (e.g. `--model DIR`) go to both runs and are named in the summary.

The real-time loop through the realtime socket, with its latency, is benchmarks/voice_loop.py; this one asks
many more questions, deterministically, in a few minutes.

Prints progress on stderr and one JSON summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from alerts_run import seeds  # (benchmarks/: "1001-1010,1020" -> the seeds)

from streamvid.eval.metrics import normalise, score

# by default not backward_at_time (`--families backward_at_time` asks it): its times are spoken digit by digit
# ("zero four thirteen") and heard as "4.13" or "413" (streamvid/language/spoken_times.py reads those)
FAMILIES = ("realtime_colour", "realtime_shape", "realtime_count", "realtime_exists", "backward_colour",
            "backward_shape")


def log(msg: str) -> None:
    print(f"[spoken_questions {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def answers(cmd: list[str]) -> list[dict]:
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [o for o in map(json.loads, (x for x in out.splitlines() if x.startswith("{"))) if o.get("type") == "answer"]


def words(text: str) -> str:
    return normalise(re.sub(r"\bcolor", "colour", text, flags=re.I))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1001-1005")
    ap.add_argument("--work", type=Path, default=Path("runs/heldout"))
    ap.add_argument("--families", default=",".join(FAMILIES), help="question families asked, comma separated")
    ap.add_argument("extra", nargs="*", help="flags added to both `streamvid run`s (after --)")
    args = ap.parse_args()
    families = tuple(f for f in args.families.split(",") if f)
    if shutil.which("espeak-ng") is None:
        print("espeak-ng is needed to speak the questions: apt-get install espeak-ng", file=sys.stderr)
        return 2
    right = {m: {f: [] for f in families} for m in ("typed", "spoken")}
    as_written: dict[str, list[bool]] = {f: [] for f in families}
    spoken_by_hearing: dict[bool, list[bool]] = {True: [], False: []}  # heard as written? -> spoken answers right
    misses = []
    for seed in seeds(args.seeds):
        folder = args.work / f"s{seed}"
        if not (folder / "episodes.jsonl").exists():
            subprocess.run([sys.executable, "-m", "streamvid.cli", "synth", "--seed", str(seed), "--minutes", "10",
                            "--speech", "off", "--out", str(folder)], check=True, capture_output=True)
        ep = json.loads((folder / "episodes.jsonl").read_text().splitlines()[0])
        gold = {e["ref"]: e for e in ep["events"] if e["kind"] == "expected_answer"}
        asks = sorted((e for e in ep["events"] if e["kind"] == "user_query" and e.get("task") in families),
                      key=lambda e: e["t"])
        if len({round(e["t"], 1) for e in asks}) != len(asks):
            raise SystemExit(f"seed {seed}: two questions at one time; the answers could not be told apart")
        rec = folder / "spoken"
        rec.mkdir(exist_ok=True)
        typed_cmd = [sys.executable, "-m", "streamvid.cli", "run", str(folder / ep["video"]["path"]), *args.extra]
        spoken_cmd = list(typed_cmd)
        for i, e in enumerate(asks):
            wav = rec / f"q{i:03d}.wav"
            subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(wav), f"Assistant, {e['text']}"], check=True,
                           timeout=30)
            typed_cmd += ["--ask", f"{e['t']}:{e['text']}"]
            spoken_cmd += ["--ask-audio", f"{e['t']}:{wav}"]
        t0 = time.monotonic()
        runs = {"typed": answers(typed_cmd), "spoken": answers(spoken_cmd)}
        by_time = {m: {round(a["t_s"], 1): a for a in rs} for m, rs in runs.items()}
        for e in asks:
            g = gold[e["id"]]
            row = {"seed": seed, "t": e["t"], "task": e["task"], "question": e["text"], "gold": g["gold"]["text"]}
            for mode in ("typed", "spoken"):
                a = by_time[mode].get(round(e["t"], 1), {})
                ok = score(a.get("text", ""), g["gold"]["text"], g["scorer"])
                right[mode][e["task"]].append(ok)
                row[mode] = a.get("text")
                if mode == "spoken":
                    row["heard"] = a.get("question")
                    as_written[e["task"]].append(words(a.get("question", "")) == words(e["text"]))
                    spoken_by_hearing[as_written[e["task"]][-1]].append(ok)
            if row["typed"] is None or row["spoken"] is None or \
                    right["typed"][e["task"]][-1] != right["spoken"][e["task"]][-1]:
                misses.append(row)
        log(f"seed {seed}: {len(asks)} questions, both runs in {time.monotonic() - t0:.0f} s")

    def share(v: list[bool]) -> float | None:
        return round(sum(v) / len(v), 3) if v else None

    every = {m: [x for v in fs.values() for x in v] for m, fs in right.items()}
    summary = {"settings": "streamvid run defaults" + (f" plus {' '.join(args.extra)}" if args.extra else ""),
               "voice": "espeak-ng en-us", "seeds": args.seeds, "n": {f: len(v) for f, v in as_written.items()},
               "accuracy": {m: {"all": share(every[m]), **{f: share(v) for f, v in fs.items()}}
                            for m, fs in right.items()},
               "spoken_minus_typed": round(share(every["spoken"]) - share(every["typed"]), 3),
               "heard_as_written": {"all": share([x for v in as_written.values() for x in v]),
                                    **{f: share(v) for f, v in as_written.items()}},
               "spoken_accuracy_n": {"heard_as_written": [share(spoken_by_hearing[True]), len(spoken_by_hearing[True])],
                                     "misheard": [share(spoken_by_hearing[False]), len(spoken_by_hearing[False])]},
               "differ": misses}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
