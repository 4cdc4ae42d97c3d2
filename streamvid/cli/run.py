"""`streamvid run`: watch a file, URL or camera, ask and watch at stream times, print JSON lines (the command's
parser and its run; streamvid/cli/main.py has the other commands and the entry point).

    streamvid run VIDEO|URL|cam:N [--ask T:QUESTION]... [--ask-audio T:FILE.wav]... [--watch T:CONDITION]...
                  [--realtime] [--session DIR [--autosave-s S]] [--alert-media DIR] [engine flags]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from streamvid.cli.engine_flags import (
    add_engine_args, check_model, embedder_checkpoint, engine_config, offline_if_local,
)

log = logging.getLogger("streamvid.cli.main")


def add_run_parser(sub) -> None:
    """The `run` subcommand on the command line's subparsers."""
    r = sub.add_parser("run", help="watch a video file, URL or camera and answer questions (JSON lines)")
    r.add_argument("video", type=_video, help="video file, URL (rtsp/http), cam:N, or a demo clip's name (shapes_7)")
    r.add_argument("--ask", action="append", type=parse_ask, default=[], metavar="T:QUESTION",
                   help='a question at stream time T; "T:Tell me when ..." is acknowledged at T and alerts later')
    r.add_argument("--ask-audio", action="append", type=_ask_audio, default=[], metavar="T:FILE.wav",
                   help="a recorded question at stream time T: the words heard in the WAV (with --asr) are asked")
    r.add_argument("--watch", action="append", type=_watch, default=[], metavar="T:CONDITION",
                   help='a standing trigger from stream time T, e.g. "0:a blue star" (an alert each time it holds)')
    r.add_argument("--realtime", action="store_true", help="pace a file to the wall clock (live semantics)")
    r.add_argument("--session", type=Path, default=None, metavar="DIR",
                   help="resume the session saved in DIR (if any) and save it there on exit")
    r.add_argument("--autosave-s", type=_positive, default=None, metavar="S",
                   help="with --session: also save every S seconds (a crash loses at most S seconds)")
    r.add_argument("--alert-media", type=Path, default=None, metavar="DIR",
                   help="write each alert's frame and a clip around it to DIR/<alert_id>/snapshot.jpg and clip.mp4, "
                        "named in the alert line (--alert-media-before-s, --alert-media-after-s set the clip)")
    add_engine_args(r)
    r.set_defaults(func=cmd_run)


def _log_budgets(sa, video: str) -> None:
    """What the window and memory budgets mean for this model at this input's frame size: one plain sentence on
    stderr, the figures behind it (tokens, MB per hour) with -v."""
    px = sa.config.frame_px
    if px is not None:
        height, width, note = px, px, ""
    else:
        height, width, note = 480, 640, " (frame size assumed 640x480)"
        if Path(video).is_file():
            import av

            try:
                with av.open(video) as container:
                    stream = container.streams.video[0]
                    height, width, note = stream.height, stream.width, ""
            except (av.error.FFmpegError, IndexError):
                pass
    b = sa.budgets(height, width)
    print(f"streamvid run: {b.plain()}", file=sys.stderr)
    log.info("%s%s", b.describe(), note)
    for warning in b.warnings():
        log.warning("%s", warning)


def file_duration_s(video: str) -> float | None:
    """How long a local video file's video stream lasts in seconds (None for a camera, a URL, or a file that does
    not say)."""
    if not Path(video).is_file():
        return None
    import av

    try:
        with av.open(video) as container:
            stream = container.streams.video[0]
            if stream.duration is not None:
                return float(stream.duration * stream.time_base)
            return container.duration / av.time_base if container.duration is not None else None
    except (av.error.FFmpegError, IndexError, OSError):
        return None  # the source says what is wrong with it when it is opened


def check_within_file(video: str, asks: list[tuple[float, str]]) -> None:
    """A question asked past the end of a video file is refused in one line (ValueError) before anything runs: it
    would be answered at a time the video never reaches."""
    end = file_duration_s(video)
    if end is None or not asks or asks[-1][0] <= end:
        return
    t, text = asks[-1]
    raise ValueError(f"--ask at {t:g} s ({text[:40]!r}) is past the end of {Path(video).name}, which lasts "
                     f"{end:.1f} s: ask at a time from 0 to {end:.0f}")


def _timed(spec: str, what: str) -> tuple[float, str]:
    """(T, the rest) of "T:REST", T in seconds >= 0; the one-line argparse error names `what` the rest is."""
    t, sep, rest = spec.partition(":")
    try:
        t_s = float(t)
    except ValueError:
        t_s = -1.0
    if not sep or not rest.strip() or not 0 <= t_s < float("inf"):
        raise argparse.ArgumentTypeError(f"expected T:{what} with T in seconds >= 0, got {spec[:80]!r}")
    return t_s, rest


def _clean_timed(spec: str, what: str) -> tuple[float, str]:
    from streamvid.language.user_text import clean

    t_s, text = _timed(spec, what)
    try:
        return t_s, clean(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e}, in {spec[:80]!r}") from None


def parse_ask(spec: str) -> tuple[float, str]:
    return _clean_timed(spec, "QUESTION")


def _watch(spec: str) -> tuple[float, str]:
    return _clean_timed(spec, "CONDITION")


def _ask_audio(spec: str) -> tuple[float, Path]:
    t_s, path = _timed(spec, "FILE.wav")
    if not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {path[:200]!r}")
    return t_s, Path(path)


def spoken_questions(items: list[tuple[float, Path]], cfg) -> list[tuple[float, str]]:
    """Recorded questions (WAV files) as (T, the words heard), with the stream's recogniser; a leading wake word is
    left out. ValueError (one line) for a file that is not a WAV or in which no words are heard."""
    from streamvid.assistant.hearing import asr_device
    from streamvid.audio.asr import load_recognizer
    from streamvid.audio.pcm import wav_samples
    from streamvid.language.wake_word import spoken_question

    if not items:
        return []
    recognizer = load_recognizer(cfg.asr, asr_device(cfg))
    out = []
    for t_s, path in items:
        try:
            samples = wav_samples(path.read_bytes())
        except ValueError as e:
            raise ValueError(f"--ask-audio {path}: {e}") from None
        text = recognizer.transcribe(samples, cfg.wake_word)
        text = spoken_question(text, cfg.wake_word)
        if not text.strip(" .,!?-"):
            raise ValueError(f"--ask-audio {path}: no words were heard in it")
        out.append((t_s, text))
    return out


def _video(spec: str) -> str:
    """A bundled demo clip's name ("shapes_7") stands for its file, unless a file of that name is here."""
    from streamvid import assets

    if not Path(spec).exists() and spec in assets.demo_clips():
        return str(assets.demo_clip(spec))
    return spec


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def print_json(obj: dict) -> None:
    """One JSON object on its own line of stdout, flushed."""
    print(json.dumps(obj), flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    offline_if_local(args.model, embedder_checkpoint(args))
    cfg = engine_config(args)
    check_model(cfg.model)
    asks = sorted(args.ask + spoken_questions(args.ask_audio, cfg), key=lambda a: a[0])
    watches = sorted(args.watch, key=lambda a: a[0])
    check_within_file(args.video, asks)
    t0 = time.perf_counter()
    from streamvid.hub.session_folders import StreamSession

    # the session folder's lifecycle is the hub's (one lock, resume, autosaves), on any folder
    session = StreamSession.take(args.session, args.autosave_s) if args.session else None
    try:
        return _run(args, cfg, asks, watches, t0, session)
    finally:
        if session is not None:
            session.release()


def _run(args: argparse.Namespace, cfg, asks: list[tuple[float, str]], watches: list[tuple[float, str]],
         t0: float, session) -> int:
    """One `streamvid run`: a fresh or resumed session; outputs, then (Ctrl-C or not) the final stats line, and the
    session saved when --session is given. 130 after Ctrl-C, else 0."""
    from streamvid.assistant.assistant import StreamingAssistant
    from streamvid.media.source_spec import open_source

    sa = session.assistant(cfg) if session is not None else StreamingAssistant(cfg)
    if args.alert_media is not None:
        sa.keep_alert_media(args.alert_media)
    interrupted = False
    saved = None
    try:
        if session is not None and session.resume:
            print_json({"type": "status", "event": "session_resumed", "t_s": round(sa.stream_offset_s, 3),
                    "session": str(args.session), "blocks_in_memory": len(sa.memory) if sa.memory else 0})
        if session is not None:
            session.start_autosave(sa)
        try:
            # opened once the model is loaded and warm: a live source starts its clock when opened
            sa.engine.warm_up()
            source = open_source(args.video, fps=cfg.fps, realtime=args.realtime, size=cfg.frame_px)
            _log_budgets(sa, args.video)
            if not source.live:
                outs = sa.run_simulated(source, asks, watches_at=watches)
                if sa.alert_media is not None:  # the files exist when their lines are printed
                    sa.alert_media.flush()
                for out in outs:
                    print_json(_line(sa, out))
            else:
                _run_live(sa, source, asks, watches)
        except KeyboardInterrupt:
            interrupted = True
    finally:
        if session is not None:
            session.stop_autosave()
        done = sa.stats()
        changed = done["frames_in"] > 0 or done["questions_answered"] > 0
        saved = sa.stop(save_to=session.folder if session is not None and changed else None)
    stats = {"type": "stats", **sa.stats(), "wall_s": round(time.perf_counter() - t0, 2)}
    if session is not None:
        stats["session_saved"] = saved
        stats["autosaves"] = session.autosaves
    if interrupted:
        stats["interrupted"] = True
    print_json(stats)
    if interrupted:
        where = f"; session saved in {args.session}" if saved else ""
        print(f"streamvid run: interrupted{where}", file=sys.stderr)
    return 130 if interrupted else 0


def _run_live(sa, source, asks: list[tuple[float, str]], watches: list[tuple[float, str]] = ()) -> None:
    """Each question is asked (each watch started) once the stream reaches its time (Stream.schedule); answers,
    alerts and remarks print as they come. A live stream runs until it ends or is interrupted."""
    off = sa.stream_offset_s  # T is the input's own time; the session's clock may have started earlier
    for t, text in watches:
        sa.schedule(off + t, text, watch=True)
    for t, text in asks:
        sa.schedule(off + t, text)
    sa.start(source)
    answered = 0
    while answered < len(asks) or not sa.ended:
        for out in sa.outputs(timeout_s=0.2):
            if out.kind == "answer":
                answered += 1
            if out.kind in ("answer", "alert", "say", "status", "transcript"):
                print_json(_line(sa, out))


def _line(sa, out) -> dict:
    """An output's JSON line; an alert's names its snapshot and clip files with --alert-media (the clip's is
    written once the seconds after the alert have arrived)."""
    line = out.to_json()
    if out.kind == "alert" and sa.alert_media is not None and out.alert_id is not None:
        line.update(sa.alert_media.files(out.alert_id))
    return line
