"""Command line.

    streamvid run VIDEO|URL|cam:N [--model M] [--ask T:QUESTION]... [--ask-audio T:FILE.wav]...
                  [--watch T:CONDITION]... [--narrate]
                  [--fps F] [--realtime] [--window-tokens N] [--memory-top-k K] [--session DIR [--autosave-s S]]
                  [--alert-media DIR]
    streamvid demo [--model M] [--video V] [--host 127.0.0.1] [--port 7860] [--auth USER:PASS]
    streamvid score EPISODES.jsonl... [--model M] [--out DIR] [--mode native|replay] [--resume] [--from-trace TRACE]
                    [--memory-top-k K] [--no-plots] [--ray [ADDRESS]] [--ray-workers N] [--judge MODEL]
    streamvid bench [--quick] [--json] [--arch tiny|3b|7b|smolvlm2-256m|smolvlm2-500m|internvl3.5-1b|...] [--layers N]
                    [--device D] [--dtype D] [--out DIR]
    streamvid convert ovo-bench|streamingbench|rvs|proactivevideoqa|svbench FILE... --videos DIR --out EPISODES.jsonl
    streamvid synth --seed S --minutes N --out DIR
    streamvid train-tiny [--out DIR] [--seed S] [--steps N] [--time-budget-min M] [--init DIR]
                        [--vision-refine-steps N] [--block-side | --no-block-side] [--resume DIR]
    streamvid make-tiny --arch qwen2-vl|qwen2.5-vl|qwen3-vl|qwen3.5|llava-onevision|llava-next-video|smolvlm2|internvl3.5
        --out DIR

`run` prints one JSON object per line on stdout, in stream-time order: {"type": "answer", ...} per question (for
"Tell me when ..." an acknowledgement at T), {"type": "alert", "trigger_id", "condition", "t_s", "score",
"evidence_t_s", "text"} when a trigger fires (with --alert-media also "alert_id", "snapshot" and "clip": the
files of its frame and clip), {"type": "say", "t_s", "text"} with --narrate, then
{"type": "stats"}. On a file without --realtime every frame is ingested as fast as possible, a question at T is
answered from exactly the frames up to T, and triggers are probed after every chunk: the output is reproducible.
Errors go to stderr as one line, with a non-zero exit code; `--debug` adds the traceback. Ctrl-C (or SIGTERM) on a
run stops it cleanly: the final stats line is still printed (with "interrupted": true), the session saved, exit 130.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import traceback
from importlib.metadata import entry_points
from pathlib import Path

from streamvid.checkpoints.real_size import ARCHS as REAL_SIZE_ARCHS
from streamvid.cli.engine_flags import (
    add_engine_args, check_model, embedder_checkpoint, engine_config, offline_if_local,
)
from streamvid.cli.run import add_run_parser, print_json

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")



def cmd_score(args: argparse.Namespace) -> int:
    offline_if_local(args.model, args.judge, embedder_checkpoint(args))
    from streamvid.eval.batch import score_files
    from streamvid.eval.report import write_reports
    from streamvid.eval.score import load_all

    if args.from_trace:
        if args.judge:
            raise ValueError("--judge runs a model: judge a finished run with --resume --judge MODEL --out DIR")
        if not args.from_trace.is_file():
            raise ValueError(f"trace not found: {args.from_trace}")
        report = write_reports(load_all(args.episodes), args.from_trace, args.out, [str(p) for p in args.episodes],
                               plots=not args.no_plots)
    else:
        cfg = engine_config(args)
        check_model(cfg.model)
        report = score_files(args.episodes, cfg, args.out, mode=args.mode, resume=args.resume,
                             plots=not args.no_plots, ray=args.ray, ray_workers=args.ray_workers,
                             judge=args.judge)
    print_json(report)
    return 0


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected stream counts like 1,8,32, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"stream counts must be >= 1, got {text!r}")
    return counts


def cmd_bench(args: argparse.Namespace) -> int:
    offline_if_local(None)  # the bundled model, or an architecture built from its config: nothing to download
    from streamvid.cli.bench import BenchConfig, run_bench, summary, write

    changes = {"arch": args.arch, "layers": args.layers, "device": args.device, "dtype": args.dtype,
               "frame_px": args.frame_px}
    changes |= {k: v for k, v in (("minutes", tuple(args.minutes) if args.minutes else None),
                                  ("interference_s", args.interference_s), ("repeats", args.repeats),
                                  ("questions", args.questions), ("streams", args.streams), ("fps", args.fps),
                                  ("streams_seconds", args.streams_seconds)) if v is not None}
    cfg = BenchConfig.quick(**changes) if args.quick else BenchConfig(**changes)
    report = run_bench(cfg, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    if args.out is not None:
        print(f"streamvid bench: wrote {write(report, args.out)}", file=sys.stderr)
    print_json(summary(report) if args.json else {**report, "summary": summary(report)})
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from streamvid.eval.convert import write

    summary = write(args.benchmark, args.files, args.videos, args.out)
    for warning in summary.pop("warnings"):
        print(f"streamvid convert: warning: {warning}", file=sys.stderr)
    print_json(summary)
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    from streamvid.audio.voices import INSTALL, available_voices, load_voice
    from streamvid.config import BUNDLED_MODEL
    from streamvid.synth.episodes import write_dataset
    from streamvid.synth.world import FRAME_PX, cell_grid

    # one world cell per merged vision token of the bundled model (28 px: a 112-px frame is 4 x 4 cells)
    grid = cell_grid(json.loads((BUNDLED_MODEL / "processor_config.json").read_text()), FRAME_PX)
    voices = []
    if args.speech == "auto":  # every installed voice (or the one named): a line is spoken by one of their variants
        voices = [load_voice(name) for name in (available_voices() if args.voice == "all" else [args.voice])]
        if not voices:
            print(f"streamvid synth: no voice installed ({INSTALL['espeak-ng']}, or {INSTALL['piper']}): "
                  "writing streams without a speech track", file=sys.stderr)
    for path in write_dataset(args.seed, args.minutes, args.out, fps=args.fps, size=FRAME_PX, grid=grid,
                              voices=voices):
        print(path)
    return 0


def cmd_train_tiny(args: argparse.Namespace) -> int:
    from streamvid.training.cli import run

    run(args)
    return 0


def cmd_make_tiny(args: argparse.Namespace) -> int:
    from streamvid.checkpoints.families import make_tiny

    print(make_tiny(args.arch, args.out, seed=args.seed))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from streamvid.config import BUNDLED_MODEL

    p = argparse.ArgumentParser(prog="streamvid", description="Online streaming video-LLM assistant.",
                                epilog="Anywhere on the line: -v / --verbose shows what each module does (INFO lines; by "
                                       "default only results, warnings, errors and run's budgets line), --debug adds "
                                       "tracebacks to errors.")
    sub = p.add_subparsers(dest="command", required=True)

    add_run_parser(sub)

    sc = sub.add_parser("score", help="replay stream episodes through the engine and score the answers")
    sc.add_argument("episodes", type=Path, nargs="+", help="stream-episode JSONL files")
    sc.add_argument("--out", type=Path, default=Path("runs/score"))
    sc.add_argument("--from-trace", type=Path, default=None, help="re-score a trace without running the model")
    sc.add_argument("--mode", choices=("native", "replay"), default="native",
                    help="native: one pass per video; replay: each benchmark's protocol (a clip per question)")
    sc.add_argument("--resume", action="store_true", help="keep the episodes finished in DIR/trace.jsonl")
    sc.add_argument("--no-plots", action="store_true", help="skip the PNG timelines")
    sc.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                    help="run episodes as Ray tasks on the cluster at ADDRESS, or on a local one without it")
    sc.add_argument("--ray-workers", type=int, default=None, help="Ray actors (default: one per CPU, or per GPU)")
    sc.add_argument("--judge", default=None, metavar="MODEL",
                    help="an LLM judge (HF checkpoint directory or id) for the open-ended answers")
    add_engine_args(sc)
    sc.set_defaults(func=cmd_score)

    bn = sub.add_parser("bench", help="ingest rate, TTFT against stream length, memory, re-encoding baseline")
    bn.add_argument("--quick", action="store_true", help="streams of 1, 5 and 30 minutes (a few minutes on a CPU)")
    bn.add_argument("--json", action="store_true", help="print only the summary object")
    bn.add_argument("--arch", choices=("tiny", "3b", "7b", *REAL_SIZE_ARCHS), default="tiny",
                    help="tiny: the bundled model; 3b / 7b: Qwen2.5-VL architectures with random weights; "
                         "smolvlm2-256m / smolvlm2-500m / internvl3.5-1b: those real-size architectures with random "
                         "weights; smolvlm2-tiny / internvl3.5-tiny / qwen3.5-tiny: make-tiny's checkpoints")
    bn.add_argument("--layers", type=int, default=None,
                    help="a real-size architecture with at most N decoder layers (and vision layers)")
    bn.add_argument("--device", default="auto")
    bn.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float16", "float32"))
    bn.add_argument("--frame-px", type=int, default=None, help="frame size (default 112 for tiny, 448 otherwise)")
    bn.add_argument("--minutes", type=float, nargs="+", default=None, help="stream lengths at which TTFT is measured")
    bn.add_argument("--interference-s", type=float, default=None, help="seconds of the live run")
    bn.add_argument("--repeats", type=int, default=None, help="re-encoding runs per N")
    bn.add_argument("--questions", type=int, default=None, help="questions per stream length")
    bn.add_argument("--out", type=Path, default=None, help="write the full report to DIR/bench.json")
    bn.add_argument("--fps", type=float, default=None, help="frames per second of each synthetic stream (default 2)")
    bn.add_argument("--streams-seconds", type=float, default=None, metavar="S",
                    help="with --streams: wall seconds of the real-time phase (default 30; --quick 20)")
    bn.add_argument("--streams", type=_counts, default=None, metavar="N[,N...]",
                    help="only the many-streams measurement: N synthetic streams through one engine, batched and one "
                         "forward per stream, side by side (real time at --fps each with a question every 5 s; "
                         "saturated)")
    bn.set_defaults(func=cmd_bench)

    cv = sub.add_parser("convert", help="convert a benchmark's annotation files to stream episodes")
    cv.add_argument("benchmark", choices=("ovo-bench", "streamingbench", "rvs", "proactivevideoqa", "svbench"))
    cv.add_argument("files", type=Path, nargs="+", help="the benchmark's annotation files, as published")
    cv.add_argument("--videos", type=Path, required=True, help="the folder holding the benchmark's videos")
    cv.add_argument("--out", type=Path, required=True, help="the episodes file to write (JSONL)")
    cv.set_defaults(func=cmd_convert)

    s = sub.add_parser("synth", help="write ShapesWorld videos, timelines and episodes")
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--minutes", type=float, required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--fps", type=float, default=2.0)
    s.add_argument("--speech", choices=("auto", "off"), default="auto",
                   help="auto (default): a speech track of short spoken lines, gold in the timeline, with speech "
                        "questions, when a voice is installed; off: video only, as before")
    s.add_argument("--voice", choices=("all", "piper", "espeak-ng"), default="all",
                   help="who speaks: every installed voice (default), or one (piper: pip install 'streamvid[voice]'; "
                        "espeak-ng: apt-get install espeak-ng)")
    s.set_defaults(func=cmd_synth)

    t = sub.add_parser("train-tiny", help="train the bundled ShapesWorld model (resumable: --resume DIR)")
    from streamvid.training.cli import add_arguments as add_training_arguments

    add_training_arguments(t, default_out=BUNDLED_MODEL)
    t.set_defaults(func=cmd_train_tiny)

    mt = sub.add_parser("make-tiny", help="write a small random checkpoint of a supported family (install checks)")
    mt.add_argument("--arch", required=True,
                    choices=("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen3.5", "llava-onevision", "llava-next-video",
                             "smolvlm2", "internvl3.5", "whisper", "vits"))
    mt.add_argument("--out", type=Path, required=True)
    mt.add_argument("--seed", type=int, default=0)
    mt.set_defaults(func=cmd_make_tiny)
    from streamvid.serve.cli import register as _register_serve  # streamvid serve: the HTTP API (docs/api.md)

    _register_serve(sub)
    for command in entry_points(group="streamvid.commands"):  # the applications' commands (demo), by name
        command.load()(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Errors a user can fix are one line on stderr (exit 2), anything else one line naming the error (exit 1);
    `--debug` anywhere on the line (or STREAMVID_DEBUG=1) adds the traceback. Quiet by default: results, warnings,
    errors and one plain sentence of `streamvid run`'s budgets; `-v` / `--verbose` anywhere on the line shows what the modules say they did
    (INFO). Ctrl-C or SIGTERM: exit 130."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("STREAMVID_DEBUG") == "1"
    verbose = bool({"-v", "--verbose"} & set(argv))
    argv = [a for a in argv if a not in ("--debug", "-v", "--verbose")]
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if verbose and not debug:  # what each module says it did: a model folder's settings, sources, servers
        logging.getLogger("streamvid").setLevel(logging.INFO)
    args = build_parser().parse_args(argv)
    main_thread = threading.current_thread() is threading.main_thread()
    # a service manager's stop (SIGTERM) ends a run as Ctrl-C does
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"streamvid {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the one place that turns errors into a line for people
        if debug:
            traceback.print_exc()
        user_error = isinstance(e, (ValueError, OSError, RuntimeError))
        what = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        hint = "" if user_error or debug else " (an internal error: run again with --debug for the traceback)"
        kind = "error" if user_error else f"error: {type(e).__name__}"
        print(f"streamvid {args.command}: {kind}: {what}{hint}", file=sys.stderr)
        return 2 if user_error else 1
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
