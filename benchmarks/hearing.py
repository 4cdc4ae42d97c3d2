"""Hearing the stream: recognition accuracy and cost of the sound pipeline, with the settings a user gets.

    python benchmarks/hearing.py [--quick] [--work DIR]

Everything runs with `streamvid run`'s defaults (`--audio auto`, `--asr whisper-tiny.en`, `--fps 2`, the bundled
model, CPU); the only setting changed anywhere is the one a measurement is about (`--audio off`, `--realtime`,
`--asr pocketsphinx`), and each is named in the summary.

1. Recognition. Held-out ShapesWorld streams (`streamvid synth --seed S --minutes M --voice V`, seeds 9101-9105,
   never used for training) are replayed through `streamvid run FILE` (a subprocess: the file's audio track ->
   audio.pcm.file_audio -> vad.Segmenter -> the recogniser, what a user gets) and the {"type": "transcript"} lines
   are compared with the gold speech of the stream's timeline, separately per voice (espeak-ng, piper). Real
   footage: gradio's `world.mp4` (30 s, its own sound track is silent) with a synthesized speech track muxed in
   instead (`synth.speech.speak` + `mux_track`, seeds 9201-...), replayed in this process exactly as `streamvid
   run` replays a file (the CLI's parser and `engine_config`, `open_source`, `run_simulated`).
   Matching: a transcript and a gold line belong together when their time spans overlap (with TOL_S of slack);
   the connected groups of that relation are scored as one (reference, hypothesis) pair each, so a gold line with
   no transcript is all deletions and a transcript with no gold line is all insertions (`eval.wer.corpus_wer`,
   numbers written as words equal to digits). Start error: |first overlapping transcript's t_s - gold t_s| per
   gold line (a line with no transcript counts as not within 1 s).
2. Cost. (a) `streamvid run FILE` on a 3-minute synth stream with speech, with sound (default) and `--audio off`,
   in ABBA order in this one run: process wall time, and x real time (stream seconds / wall seconds); also the
   same from the run's "budgets" log line (model loaded and warm) to its exit. (b) `--realtime`: a child process
   (fresh, so the recogniser is loaded as a user's first run loads it) does what `streamvid run FILE --realtime`
   does (`_run`/`_run_live` of cli.py through public calls) and timestamps every transcript output as it arrives
   and every speech block as it appears in the KV window (`window.snapshot()`, polled every POLL_S); the delay of
   a gold line is that time minus (the wall time pacing started + the line's gold end). Pacing's t = 0 is taken
   right after `open_source` returns (the frames' clock starts at the first frame decoded).
3. `--asr pocketsphinx` for comparison: the same chunks (`FileSource(...).sound()`), the same Segmenter, the
   pocketsphinx recogniser, the Listener's filter of empty texts; no VLM (it does not change the words).

Prints progress on stderr and one JSON summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SYNTH_SEEDS = (9101, 9102, 9103, 9104, 9105)
WORLD_SEEDS = (9201, 9202, 9203, 9204, 9205, 9206)
COST_SEED, REALTIME_SEED = 9106, 9107
VOICES = ("espeak-ng", "piper")
TOL_S = 0.25  # slack when matching a transcript's span to a gold line's
POLL_S = 0.02  # how often the realtime child looks at the window
TARGETS = {"wer": {"espeak-ng": 0.35, "piper": 0.20}, "start_within_1s": 1.0, "ingest_x_realtime": 4.0,
           "speech_end_to_window_s": 1.5}


def log(msg: str) -> None:
    print(f"[hearing {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- matching and scores --------------------------------------------------------------------------------------
def match(gold: list[dict], hyps: list[dict], tol_s: float = TOL_S) -> list[tuple[list[dict], list[dict]]]:
    """Groups (gold lines, transcripts) connected by overlapping spans; unmatched items form groups of their own."""
    items = [("g", g) for g in gold] + [("h", h) for h in hyps]
    parent = list(range(len(items)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, g in enumerate(gold):
        for j, h in enumerate(hyps):
            if max(g["t_s"], h["t_s"]) < min(g["t_end_s"], h["t_end_s"]) + tol_s:
                parent[find(i)] = find(len(gold) + j)
    groups: dict[int, tuple[list, list]] = {}
    for k, (side, item) in enumerate(items):
        gs, hs = groups.setdefault(find(k), ([], []))
        (gs if side == "g" else hs).append(item)
    return [(sorted(gs, key=lambda x: x["t_s"]), sorted(hs, key=lambda x: x["t_s"])) for gs, hs in groups.values()]


def score(gold: list[dict], hyps: list[dict]) -> dict:
    """WER (with its edits), start errors and counts of one set of streams' gold lines and transcripts."""
    from streamvid.eval.wer import Errors, corpus_wer, errors

    groups = match(gold, hyps)
    pairs = [(" ".join(g["text"] for g in gs), " ".join(h["text"] for h in hs)) for gs, hs in groups]
    total = Errors(0, 0, 0, 0)
    for ref, hyp in pairs:
        total += errors(ref, hyp)
    starts = []
    for gs, hs in groups:
        for g in gs:
            over = [h for h in hs if max(g["t_s"], h["t_s"]) < min(g["t_end_s"], h["t_end_s"]) + TOL_S]
            if over:
                starts.append(abs(min(h["t_s"] for h in over) - g["t_s"]))
    worst = sorted(((errors(r, h).edits, r, h) for r, h in pairs), reverse=True)[:3]
    return {"wer": round(corpus_wer(pairs), 4), "reference_words": total.reference_words,
            "substitutions": total.substitutions, "deletions": total.deletions, "insertions": total.insertions,
            "gold_lines": len(gold), "transcripts": len(hyps),
            "gold_lines_without_transcript": sum(1 for gs, hs in groups if gs and not hs),
            "transcripts_without_gold": sum(len(hs) for gs, hs in groups if hs and not gs),
            "start_error_median_s": round(statistics.median(starts), 3) if starts else None,
            "start_within_1s": round(sum(s <= 1.0 for s in starts) / max(1, len(gold)), 4),
            "start_within_1s_of_matched": round(sum(s <= 1.0 for s in starts) / max(1, len(starts)), 4),
            "worst_groups": [{"edits": e, "gold": r, "heard": h[:120]} for e, r, h in worst if e]}


def per_variant(gold: list[dict], hyps: list[dict]) -> dict:
    """WER per voice variant ("espeak-ng:en-us@165"): each gold line's group scored under its line's variant."""
    from streamvid.eval.wer import Errors, errors

    out: dict[str, Errors] = {}
    for gs, hs in match(gold, hyps):
        if not gs:
            continue
        e = errors(" ".join(g["text"] for g in gs), " ".join(h["text"] for h in hs))
        out[gs[0].get("voice", "?")] = out.get(gs[0].get("voice", "?"), Errors(0, 0, 0, 0)) + e
    return {k: round(v.wer, 3) for k, v in sorted(out.items())}


def quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(len(xs) - 1, int(k) + 1)
    return round(xs[lo] + (xs[hi] - xs[lo]) * (k - lo), 3)


# ---- streams --------------------------------------------------------------------------------------------------
def synth(seed: int, minutes: float, voice: str | None, out: Path) -> tuple[Path, list[dict], float]:
    """`streamvid synth` (voice None: the default, every installed voice): (mp4, gold speech, duration_s)."""
    cmd = ["streamvid", "synth", "--seed", str(seed), "--minutes", str(minutes), "--out", str(out)]
    if voice:
        cmd += ["--voice", voice]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    timeline = json.loads((out / f"shapes_{seed}.timeline.json").read_text())
    return out / f"shapes_{seed}.mp4", timeline["speech"], float(timeline["duration_s"])


def world_clip(seed: int, voice, out: Path) -> tuple[Path, list[dict], float] | None:
    """gradio's world.mp4 with the speech track of `seed` (spoken by `voice`) muxed in instead of its own sound."""
    try:
        import gradio
    except ImportError:
        return None
    world = Path(gradio.__file__).parent / "media_assets" / "videos" / "world.mp4"
    if not world.is_file():
        return None
    import av

    from streamvid.synth.speech import SPEECH_RATE, mux_track, speak
    from streamvid.synth.world import generate

    with av.open(str(world)) as c:
        duration = float(c.streams.video[0].duration * c.streams.video[0].time_base)
    tl, track = speak(generate(seed, duration), voice, SPEECH_RATE)
    path = mux_track(world, track, SPEECH_RATE, out / f"world_{voice.name}_{seed}.mp4")
    return path, [{"t_s": s.t_s, "t_end_s": s.t_end_s, "text": s.text, "voice": s.voice} for s in tl.speech], duration


def run_cli(path: Path, *flags: str) -> dict:
    """`streamvid run PATH FLAGS...`: transcripts, stats, process wall time and the time of its budgets line."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(["streamvid", "run", str(path), *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    stamps: dict[str, float] = {}
    err_tail: list[str] = []

    def read_err() -> None:
        for line in proc.stderr:
            if "budgets" not in stamps and "streamvid.cli.main: window" in line:
                stamps["budgets"] = time.perf_counter() - t0
            err_tail.append(line.rstrip())
            del err_tail[:-20]

    th = threading.Thread(target=read_err, daemon=True)
    th.start()
    outs = [json.loads(line) for line in proc.stdout if line.strip().startswith("{")]
    rc = proc.wait()
    wall = time.perf_counter() - t0
    th.join()
    if rc != 0:
        raise RuntimeError(f"streamvid run {path.name} {' '.join(flags)} exited {rc}: {' | '.join(err_tail[-3:])}")
    stats = next((o for o in outs if o.get("type") == "stats"), {})
    return {"transcripts": [o for o in outs if o.get("type") == "transcript"], "stats": stats, "wall_s": wall,
            "budgets_s": stamps.get("budgets")}


def replay_in_process(path: Path) -> list[dict]:
    """What `streamvid run PATH` does for a file (defaults), in this process: the transcript outputs."""
    from streamvid.assistant.assistant import StreamingAssistant
    from streamvid.cli.engine_flags import engine_config, offline_if_local
    from streamvid.cli.main import build_parser
    from streamvid.media.source_spec import open_source

    args = build_parser().parse_args(["run", str(path)])
    offline_if_local(args.model)
    cfg = engine_config(args)
    sa = StreamingAssistant(cfg)
    try:
        sa.engine.warm_up()
        source = open_source(str(path), fps=cfg.fps, realtime=False, size=cfg.frame_px)
        return [o.to_json() for o in sa.run_simulated(source, []) if o.kind == "transcript"]
    finally:
        sa.stop()


def realtime_child(path: str) -> dict:
    """What `streamvid run PATH --realtime` does, with arrival times (seconds after pacing started) of each
    transcript output and of each speech block in the window."""
    from streamvid.assistant.assistant import StreamingAssistant
    from streamvid.cli.engine_flags import engine_config, offline_if_local
    from streamvid.cli.main import build_parser
    from streamvid.media.source_spec import open_source

    args = build_parser().parse_args(["run", path, "--realtime"])
    offline_if_local(args.model)
    cfg = engine_config(args)
    sa = StreamingAssistant(cfg)
    seen: dict[tuple, float] = {}
    stop = threading.Event()
    transcripts, ended_at = [], None
    try:
        sa.engine.warm_up()
        source = open_source(path, fps=cfg.fps, realtime=True, size=cfg.frame_px)
        t0 = time.perf_counter()

        def poll() -> None:
            while not stop.wait(POLL_S):
                now = time.perf_counter() - t0
                for b in sa.window.snapshot().blocks:
                    if b.speech is not None:
                        seen.setdefault((round(b.t_start_s, 3), b.speech), now)

        sa.start(source)
        start_call_s = time.perf_counter() - t0
        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        linger_until = None
        while True:  # as cli._run_live, and then 3 s more, to see whether anything still comes after the frames
            for out in sa.outputs(timeout_s=0.2):
                if out.kind == "transcript":
                    transcripts.append({**out.to_json(), "arrived_s": round(time.perf_counter() - t0, 3),
                                        "after_frames_ended": ended_at is not None})
            if sa.ended and ended_at is None:
                ended_at = time.perf_counter() - t0
                linger_until = time.perf_counter() + 3.0
            if linger_until is not None and time.perf_counter() >= linger_until:
                break
        stop.set()
        poller.join()
        stats = sa.stats()
    finally:
        stop.set()
        sa.stop()
    window = [{"t_s": k[0], "text": k[1], "in_window_s": round(v, 3)} for k, v in sorted(seen.items())]
    return {"transcripts": transcripts, "window": window, "frames_ended_s": round(ended_at, 3),
            "start_call_s": round(start_call_s, 3), "frames_dropped": stats.get("frames_dropped"),
            "utterances": stats.get("utterances")}


def realtime_delays(gold: list[dict], child: dict) -> dict:
    """Per gold line: transcript arrival and speech block in the window, minus the line's gold end."""
    to_out, to_window, missing = [], [], 0
    for gs, hs in match(gold, child["transcripts"]):
        for g in gs:
            over = [h for h in hs if max(g["t_s"], h["t_s"]) < min(g["t_end_s"], h["t_end_s"]) + TOL_S]
            if not over:
                missing += 1
                continue
            h = over[0]
            to_out.append(h["arrived_s"] - g["t_end_s"])
            blk = [w["in_window_s"] for w in child["window"] if abs(w["t_s"] - h["t_s"]) < 0.01]
            if blk:
                to_window.append(blk[0] - g["t_end_s"])
    return {"gold_lines": len(gold), "lines_without_transcript": missing,
            "transcript_delay_s": {"median": quantile(to_out, 0.5), "p95": quantile(to_out, 0.95),
                                   "max": quantile(to_out, 1.0)},
            "window_delay_s": {"median": quantile(to_window, 0.5), "p95": quantile(to_window, 0.95),
                               "max": quantile(to_window, 1.0), "n": len(to_window)},
            "transcripts_after_frames_ended": sum(t["after_frames_ended"] for t in child["transcripts"]),
            "start_call_s": child["start_call_s"], "frames_dropped": child["frames_dropped"]}


# ---- the benchmark --------------------------------------------------------------------------------------------
def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="one seed per voice, 1-minute streams, no ABBA repeat")
    p.add_argument("--work", type=Path, default=None, help="keep the generated streams here (default: a temp dir)")
    p.add_argument("--realtime-child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.realtime_child:
        print(json.dumps(realtime_child(args.realtime_child)))
        return 0
    with tempfile.TemporaryDirectory(prefix="streamvid-hearing-") as tmp:
        return bench(args.work or Path(tmp), args.quick)


def bench(work: Path, quick: bool) -> int:
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    seeds = SYNTH_SEEDS[:1] if quick else SYNTH_SEEDS
    minutes = 1 if quick else 2
    summary: dict = {"quick": quick, "cpu_cores": os.cpu_count(),
                     "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
                     "settings": "streamvid run defaults (--audio auto, --asr whisper-tiny.en, --fps 2, bundled model, "
                                 "CPU); changed only where a measurement says so",
                     "targets": TARGETS}

    # 1. recognition on held-out synth streams, per voice, through `streamvid run FILE`
    recognition: dict = {}
    ingest_on: list[dict] = []
    streams: dict[str, list] = {}
    for voice in VOICES:
        gold_all, hyp_all = [], []
        for seed in seeds:
            log(f"synth {voice} seed {seed} ({minutes} min), then streamvid run")
            path, gold, duration = synth(seed, minutes, voice, work / voice / f"s{seed}")
            run = run_cli(path)
            streams.setdefault(voice, []).append((path, gold))
            ingest_on.append({"stream_s": duration, "wall_s": run["wall_s"]})
            # one seed's lines and transcripts, offset so that streams never overlap when pooled
            off = 10_000.0 * seed
            gold_all += [{**g, "t_s": g["t_s"] + off, "t_end_s": g["t_end_s"] + off} for g in gold]
            hyp_all += [{**h, "t_s": h["t_s"] + off, "t_end_s": h["t_end_s"] + off} for h in run["transcripts"]]
        recognition[voice] = {**score(gold_all, hyp_all), "per_variant_wer": per_variant(gold_all, hyp_all),
                              "streams": len(seeds), "minutes_each": minutes}
        log(f"{voice}: WER {recognition[voice]['wer']}")
    summary["recognition_synth"] = recognition
    summary["recognition_synth_commands"] = [
        f"streamvid synth --seed S --minutes {minutes} --voice V --out DIR   (S in {list(seeds)}, V in {list(VOICES)})",
        "streamvid run DIR/shapes_S.mp4   (the transcript lines)"]

    # real footage: gradio's world.mp4 with speech muxed in (in this process, as `streamvid run` replays a file)
    from streamvid.audio.voices import load_voice

    world: dict = {}
    for voice_name in VOICES:
        voice = load_voice(voice_name)
        gold_all, hyp_all = [], []
        for seed in WORLD_SEEDS[:2] if quick else WORLD_SEEDS:
            clip = world_clip(seed, voice, work)
            if clip is None:
                world = {"skipped": "gradio's world.mp4 is not installed"}
                break
            path, gold, _ = clip
            log(f"world.mp4 + {voice_name} speech of seed {seed}")
            hyps = replay_in_process(path)
            off = 10_000.0 * seed
            gold_all += [{**g, "t_s": g["t_s"] + off, "t_end_s": g["t_end_s"] + off} for g in gold]
            hyp_all += [{**h, "t_s": h["t_s"] + off, "t_end_s": h["t_end_s"] + off} for h in hyps]
        if "skipped" in world:
            break
        world[voice_name] = {**score(gold_all, hyp_all), "per_variant_wer": per_variant(gold_all, hyp_all),
                             "clips": len(WORLD_SEEDS[:2] if quick else WORLD_SEEDS)}
        log(f"world {voice_name}: WER {world[voice_name]['wer']}")
    summary["recognition_world_mp4"] = world

    # 3. pocketsphinx on the same streams' sound (same chunks, same Segmenter; the Listener's empty-text filter)
    try:
        from streamvid.audio.asr import load_recognizer
        from streamvid.audio.vad import Segmenter
        from streamvid.media.file_source import FileSource

        sphinx = load_recognizer("pocketsphinx")
        summary["recognition_pocketsphinx"] = {}
        for voice, items in streams.items():
            gold_all, hyp_all = [], []
            for k, (path, gold) in enumerate(items):
                src = FileSource(str(path), fps=2.0)
                seg, heard = Segmenter(), []
                for chunk in src.sound() or ():
                    heard += seg.feed(chunk)
                heard += seg.flush()
                src.close()
                off = 10_000.0 * k
                for s in heard:
                    text = sphinx.transcribe(s.samples)
                    if text.strip(" .,!?-"):
                        hyp_all.append({"t_s": s.t_s + off, "t_end_s": s.t_end_s + off, "text": text})
                gold_all += [{**g, "t_s": g["t_s"] + off, "t_end_s": g["t_end_s"] + off} for g in gold]
            r = score(gold_all, hyp_all)
            keep = ("wer", "reference_words", "substitutions", "deletions", "insertions", "start_within_1s")
            summary["recognition_pocketsphinx"][voice] = {k: r[k] for k in keep}
            log(f"pocketsphinx {voice}: WER {r['wer']}")
    except ValueError as e:
        summary["recognition_pocketsphinx"] = {"skipped": str(e)}

    # 2a. ingest cost: sound on (default) against --audio off, ABBA, on one 3-minute stream
    cost_min = 1 if quick else 3
    log(f"synth seed {COST_SEED} ({cost_min} min, every installed voice) for the cost runs")
    path, gold, duration = synth(COST_SEED, cost_min, None, work / "cost")
    order = ["on", "off"] if quick else ["on", "off", "off", "on"]
    runs: dict[str, list] = {"on": [], "off": []}
    for which in order:
        log(f"cost run: audio {which}")
        r = run_cli(path, *(["--audio", "off"] if which == "off" else []))
        runs[which].append(r)
    cost = {"stream_s": duration, "command": "streamvid run FILE   vs   streamvid run FILE --audio off", "order": order}
    for which, rs in runs.items():
        walls = [r["wall_s"] for r in rs]
        after = [r["wall_s"] - r["budgets_s"] for r in rs if r["budgets_s"] is not None]
        cost[which] = {"wall_s": [round(w, 2) for w in walls],
                       "x_realtime": round(duration / statistics.mean(walls), 2),
                       "wall_after_load_s": [round(w, 2) for w in after],
                       "x_realtime_after_load": round(duration / statistics.mean(after), 2) if after else None,
                       "utterances": [r["stats"].get("utterances") for r in rs],
                       "audio_s_in": rs[0]["stats"].get("audio_s_in")}
    cost["wall_ratio_on_over_off"] = round(statistics.mean(cost["on"]["wall_s"]) /
                                           statistics.mean(cost["off"]["wall_s"]), 3)
    on_runs = runs["on"][0]["transcripts"]
    cost["wer_of_this_stream_mixed_voices"] = score(gold, on_runs)["wer"]
    cost["recognition_runs_x_realtime"] = round(sum(r["stream_s"] for r in ingest_on) /
                                                sum(r["wall_s"] for r in ingest_on), 2)
    summary["ingest_cost"] = cost

    # 2b. speech end -> transcript and speech block in the window, live pacing (--realtime), in a fresh process
    rt_min = 1 if quick else 2
    log(f"synth seed {REALTIME_SEED} ({rt_min} min, every installed voice); realtime run ({rt_min * 60} s)")
    path, gold, duration = synth(REALTIME_SEED, rt_min, None, work / "realtime")
    out = subprocess.run([sys.executable, __file__, "--realtime-child", str(path)], check=True, capture_output=True,
                         text=True)
    child = json.loads(out.stdout.strip().splitlines()[-1])
    summary["realtime_latency"] = {"command": "streamvid run FILE --realtime (its loop, instrumented)",
                                   "stream_s": duration, **realtime_delays(gold, child),
                                   "wer_of_this_stream": score(gold, child["transcripts"])["wer"]}

    summary["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary["bench_wall_s"] = round(time.perf_counter() - started, 1)
    summary["verdict"] = verdict(summary)
    print(json.dumps(summary, indent=1))
    return 0


def verdict(s: dict) -> dict:
    v = {}
    for voice, target in TARGETS["wer"].items():
        r = s["recognition_synth"].get(voice)
        if r:
            v[f"synth_wer_{voice}<= {target}"] = r["wer"] <= target
            v[f"synth_starts_within_1s_{voice}"] = r["start_within_1s"]
        w = s["recognition_world_mp4"].get(voice)
        if isinstance(w, dict):
            v[f"world_wer_{voice}<= {target}"] = w["wer"] <= target
    v["ingest_x_realtime>=4"] = s["ingest_cost"]["on"]["x_realtime"] >= TARGETS["ingest_x_realtime"]
    d = s["realtime_latency"]["window_delay_s"]
    v["speech_end_to_window_p95<=1.5s"] = d["p95"] is not None and d["p95"] <= TARGETS["speech_end_to_window_s"]
    return v


if __name__ == "__main__":
    sys.exit(main())
