"""Batch scoring: run stream episodes natively or by replay, write the trace, then the reports.

    streamvid score EPISODES.jsonl... [--mode native|replay] [--out DIR] [--resume] [--from-trace TRACE]
                    [--ray [ADDRESS]] [--ray-workers N]

* `native` (default): one pass per video through the engine, as the assistant is used. Every question is
  asked at its time as a user would type it (with its options; "tell me when ..." becomes a trigger and its
  alerts are recorded), answered from exactly the frames up to that time.
* `replay`: each benchmark's own protocol. Every question is answered on a fresh cache fed only its clip
  [t0, t] (t0 = 0, or t - protocol.context_window_s) through eval/replay.ClipSource, with the benchmark's prompt
  template (eval/prompts.py); where dialogue turns are kept (SVBench chains, and any episode whose protocol does
  not set `dialogue_turns` 0 while the run keeps turns), the questions asked at one time share one clip and the
  dialogue. A question that carries a polling range (StreamingBench proactive output) is polled once a second
  over the range with the benchmark's yes/no question, incrementally on one pass over the clip from the question
  time (each poll sees exactly the frames from the question time to its own, as the official per-poll clips do);
  the first "yes" (p(yes) >= 0.5) is the reply time, and the question is then answered on the clip from the
  question time to the reply time and recorded as an alert. Proactive questions without a polling rule run
  natively.

Either mode runs with the settings `streamvid run` uses (its defaults and the same engine flags, dialogue turns
included); an episode's `protocol` may set `dialogue_turns` and `decision_hz` for itself (eval/score.py,
`episode_config`): converted benchmarks whose questions stand alone set `dialogue_turns` 0.

The trace (DIR/trace.jsonl) opens with a "run" record (the run's settings, and every engine setting changed from
EngineConfig's defaults), holds one JSON record per answer, probe and alert, and one "stats" record that closes
each episode (with the protocol-settable values it ran with); `--resume` keeps the episodes closed in an existing
trace and runs the rest. Reports are computed from the trace alone (eval/report.py), so `--from-trace`
reproduces them without the model. Progress (episodes done, questions, elapsed, ETA) goes to stderr.

`--ray [ADDRESS]` runs the episodes as Ray tasks on actors that each hold one loaded model (a GPU each when the
device is CUDA), on the cluster at ADDRESS or on a local one; results are written in episode order, so the trace
and the report read as a local run's. Workers need streamvid installed and the videos at the same paths.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from streamvid.adapters.model_folder import model_settings
from streamvid.config import BUNDLED_MODEL, EngineConfig
from streamvid.eval import prompts
from streamvid.eval.replay import ClipSource
from streamvid.eval.score import episode_config, episode_settings, load_all

MODES = ("native", "replay")
_SUM_STATS = ("frames_in", "frames_dropped", "blocks_encoded", "questions_answered", "probes_run", "probes_skipped",
              "probe_forwards", "alerts")


def _queries(ep: dict) -> list[dict]:
    return [e for e in ep["events"] if e["kind"] == "user_query"]


def _proactive_refs(ep: dict) -> set[str]:
    return {e["ref"] for e in ep["events"] if e["kind"] == "expected_response"}


class _Runner:
    """Runs one episode on a loaded adapter; collects trace records and summed statistics."""

    def __init__(self, ep: dict, config: EngineConfig, adapter) -> None:
        # the run's settings (`streamvid run`'s, dialogue turns included) unless the episode's protocol sets them
        self.ep, self.config, self.adapter = ep, episode_config(ep, config), adapter
        self.records: list[dict] = []
        self.stats: dict = {k: 0 for k in _SUM_STATS} | {"encode_s": 0.0, "stream_s": 0.0, "wall_s": 0.0,
                                                          "peak_memory_mb": 0.0, "runs": 0, "polls": 0}

    def _assistant(self):
        from streamvid.assistant.assistant import StreamingAssistant

        return StreamingAssistant(self.config, adapter=self.adapter)

    def _file(self):
        from streamvid.media.file_source import FileSource

        v = self.ep["video"]
        return FileSource(v["path"], fps=self.config.fps, t_start_s=v.get("t_start") or 0.0, t_end_s=v.get("t_end"),
                          size=self.config.frame_px)

    def _clip(self, t: float, t0: float | None = None) -> ClipSource:
        v = self.ep["video"]
        if t0 is None:
            t0 = v.get("t_start") or 0.0
            window = (self.ep.get("protocol") or {}).get("context_window_s")
            if window:
                t0 = max(t0, t - window)
        return ClipSource(v["path"], t0, max(t, t0), self.config.fps, size=self.config.frame_px)

    def run(self, source, questions, probes=(), watches=()) -> list:
        t0 = time.perf_counter()
        with self._assistant() as sa:
            outputs = sa.run_simulated(source, questions, probes, watches)
            st = sa.stats()
        wall = time.perf_counter() - t0
        for k in _SUM_STATS:
            self.stats[k] += st.get(k) or 0
        if st.get("ingest_frames_per_s"):
            self.stats["encode_s"] += st["frames_in"] / st["ingest_frames_per_s"]
        self.stats["stream_s"] += (st.get("frames_in") or 0) / self.config.fps  # stream seconds ingested
        self.stats["wall_s"] += wall
        self.stats["peak_memory_mb"] = max(self.stats["peak_memory_mb"], st.get("peak_memory_mb") or 0.0)
        self.stats["peak_memory_kind"] = st.get("peak_memory_kind")
        self.stats["runs"] += 1
        return outputs

    def record(self, event_id: str | None, out_json: dict) -> None:
        self.records.append({"episode_id": self.ep["episode_id"], "event_id": event_id, **out_json})

    def native(self, queries: list[dict]) -> None:
        probes = [e for e in self.ep["events"] if e["kind"] == "probe"]
        order = sorted([(e["t"], 0, i, e) for i, e in enumerate(queries)] +
                       [(e["t"], 1, i, e) for i, e in enumerate(probes)], key=lambda x: x[0])
        events = [e for *_, e in order]
        outputs = self.run(self._file(), [(e["t"], prompts.native_text(e)) for e in queries],
                           [(e["t"], e["text"]) for e in probes])
        replies = [o for o in outputs if o.kind in ("answer", "probe")]
        event_of = {}
        for event, out in zip(events, replies, strict=True):
            expected = event["text"] if event["kind"] == "probe" else prompts.native_text(event)
            if out.question != expected:
                raise RuntimeError(f"trace out of order at {self.ep['episode_id']}/{event['id']}")
            event_of[out.id] = event["id"]
        for out in outputs:
            if out.kind in ("answer", "probe", "alert"):
                self.record(event_of.get(out.id, out.id), out.to_json())

    def replay(self) -> None:
        proactive = _proactive_refs(self.ep)
        native, chain = [], []
        for e in self.ep["events"]:
            if e["kind"] == "user_query" and e["id"] in proactive:
                if e.get("poll") and e.get("gold_output") is not None:
                    self.poll(e)
                else:
                    native.append(e)
            elif (e["kind"] == "user_query" and self.config.generation.dialogue_turns and chain
                  and chain[0]["t"] == e["t"]):
                chain.append(e)  # the next turn of a dialogue at the same time: one clip, turns kept
            elif e["kind"] == "user_query":
                self.dialogue(chain)
                chain = [e]
            elif e["kind"] == "probe":
                outs = self.run(self._clip(e["t"]), [], [(e["t"], e["text"])])
                self.record(e["id"], next(o for o in outs if o.kind == "probe").to_json())
        self.dialogue(chain)
        if native:
            self.native(native)

    def dialogue(self, chain: list[dict]) -> None:
        """Questions asked at one time on one clip, in order (one question, or the turns of a dialogue)."""
        if not chain:
            return
        t = chain[0]["t"]
        outs = self.run(self._clip(t), [(t, prompts.render(e, self.ep["events"])) for e in chain])
        answers = [o for o in outs if o.kind == "answer"]
        for e, out in zip(chain, answers, strict=True):
            self.record(e["id"], out.to_json())
        chain.clear()

    def answer_at(self, e: dict, t: float, t0: float | None = None):
        text = prompts.render(e, self.ep["events"])
        outs = self.run(self._clip(t, t0), [(t, text)])
        return next(o for o in outs if o.kind == "answer")

    def poll(self, e: dict) -> None:
        start, end = e["poll"]
        times = [start + k for k in range(int(end - start + 1e-6) + 1)]
        question = prompts.poll_text(e)
        # StreamingBenchProactive cuts each poll's clip from the question time to the poll time
        outs = self.run(self._clip(times[-1], t0=e["t"]), [], [(t, question) for t in times])
        polls = [o for o in outs if o.kind == "probe"]
        self.stats["polls"] += len(polls)
        fired = next((o for o in polls if o.text == "yes"), None)
        if fired is None:
            return
        t = fired.data["t_s"]
        answer = self.answer_at(e, t, t0=e["t"])
        self.record(e["id"], {"type": "alert", "trigger_id": e["id"], "condition": e["text"], "t_s": t,
                              "score": fired.data.get("p_yes"), "evidence_t_s": [], "text": answer.text,
                              "ttft_ms": answer.ttft_ms})


def run_episode(ep: dict, config: EngineConfig, adapter, mode: str) -> list[dict]:
    """Trace records for one episode, the closing "stats" record last."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    runner = _Runner(ep, config, adapter)
    if mode == "native":
        runner.native(_queries(ep))
    else:
        runner.replay()
    st = runner.stats
    return [*runner.records, {"episode_id": ep["episode_id"], "event_id": None, "type": "stats", "mode": mode,
                              **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in st.items()},
                              **episode_settings(runner.config)}]


def read_trace(path: str | Path) -> tuple[list[dict], set[str]]:
    """The records of a trace and the episodes it closed (a "stats" record ends an episode); a last line cut off
    mid-write is dropped."""
    records, done = [], set()
    lines = Path(path).read_text().splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):  # the last line of a run that was cut off mid-write
                break
            raise ValueError(f"{path}:{n}: not JSON") from None
        records.append(rec)
        if rec.get("type") == "stats":
            done.add(rec["episode_id"])
    return records, done


def _progress(done: int, total: int, q_done: int, q_total: int, t0: float, label: str) -> None:
    elapsed = time.perf_counter() - t0
    eta = elapsed / q_done * (q_total - q_done) if q_done else float("nan")
    print(f"[{done}/{total}] {label}: {q_done}/{q_total} questions, elapsed {elapsed:.1f} s, ETA {eta:.1f} s",
          file=sys.stderr, flush=True)


class EpisodeWorker:
    """One loaded model running whole episodes; the unit of work of a Ray actor (`--ray`)."""

    def __init__(self, config: EngineConfig) -> None:
        from streamvid.adapters.base import adapter_for

        self.config = config
        self.adapter = adapter_for(config)

    def run(self, ep: dict, mode: str) -> list[dict]:
        return run_episode(ep, self.config, self.adapter, mode)


def _run_local(todo: list[dict], config: EngineConfig, mode: str):
    worker = EpisodeWorker(config)
    for ep in todo:
        yield ep, worker.run(ep, mode)


def _run_ray(todo: list[dict], config: EngineConfig, mode: str, address: str, workers: int | None):
    """Episodes as Ray tasks on `workers` actors (one loaded model each; a GPU each when the config asks for
    CUDA); results come back in episode order. address "local" starts a local cluster."""
    try:
        import ray
    except ImportError:
        raise ValueError('--ray needs Ray: pip install -e ".[ray]"') from None
    started = not ray.is_initialized()
    if started:
        if address == "local":
            ray.init(num_cpus=workers or None, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        else:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        resources = ray.cluster_resources()
        gpu = config.device.startswith("cuda") or (config.device == "auto" and resources.get("GPU", 0) > 0)
        n = workers or max(1, int(resources.get("GPU" if gpu else "CPU", 1)))
        n = max(1, min(n, len(todo)))
        actor = ray.remote(num_cpus=0 if gpu else 1, num_gpus=1 if gpu else 0)(EpisodeWorker)
        pool = [actor.remote(config) for _ in range(n)]
        pending = {}
        for i, ep in enumerate(todo):
            pending[pool[i % n].run.remote(ep, mode)] = i
        done: dict[int, list[dict]] = {}
        emit = 0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                done[pending.pop(ref)] = ray.get(ref)
            while emit in done:  # hand back in episode order, so the trace reads as a local run's
                yield todo[emit], done.pop(emit)
                emit += 1
    finally:
        if started:
            ray.shutdown()


def run_all(episodes: list[dict], config: EngineConfig, trace_path: str | Path, mode: str = "native",
            resume: bool = False, progress: Callable[..., None] | None = _progress, ray: str | None = None,
            ray_workers: int | None = None) -> None:
    """Run every episode not yet closed in the trace, appending its records episode by episode (in episode order,
    also on Ray: `ray` is a cluster address, or "local" for a local cluster of `ray_workers` workers)."""
    trace_path = Path(trace_path)
    model = "bundled streamvid-tiny" if config.model == str(BUNDLED_MODEL) else config.model
    run_header = {"episode_id": None, "event_id": None, "type": "run", "mode": mode, "model": model,
                  "fps": config.fps, "window_tokens": config.window.tokens, "memory_top_k": config.memory.top_k,
                  **episode_settings(config), "changed_from_defaults": config.changed(model_settings(config.model))}
    kept, done = [], set()
    if resume and trace_path.is_file():
        records, done = read_trace(trace_path)
        header = next((r for r in records if r.get("type") == "run"), None)
        if header is not None and header.get("mode") != mode:
            raise ValueError(f"--resume: the trace was run with --mode {header.get('mode')}, not {mode}")
        kept = [r for r in records if r.get("type") == "run" or r.get("episode_id") in done]
    if not kept:
        kept = [run_header]
    with open(trace_path, "w") as f:  # rewrite: drops the records of an episode that was cut off
        f.writelines(json.dumps(r) + "\n" for r in kept)
    todo = [ep for ep in episodes if ep["episode_id"] not in done]
    if not todo:
        return
    q_total = sum(len(_queries(ep)) for ep in todo)
    q_done, t0 = 0, time.perf_counter()
    results = _run_local(todo, config, mode) if ray is None else _run_ray(todo, config, mode, ray, ray_workers)
    for i, (ep, recs) in enumerate(results, 1):
        with open(trace_path, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in recs)
        q_done += len(_queries(ep))
        if progress is not None:
            progress(len(done) + i, len(episodes), q_done, q_total, t0, ep["episode_id"])


def score_files(paths: list[str | Path], config: EngineConfig, out_dir: str | Path, mode: str = "native",
                resume: bool = False, plots: bool = True, ray: str | None = None,
                ray_workers: int | None = None, judge: str | None = None) -> dict:
    """Run, judge the open-ended answers when a judge model is named (eval/judge.py), then write report.json,
    report.md and the timelines; returns the report."""
    from streamvid.eval.report import write_reports

    episodes = load_all(paths)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_all(episodes, config, out / "trace.jsonl", mode, resume, ray=ray, ray_workers=ray_workers)
    if judge is not None:
        from streamvid.eval.judge import judge_trace

        judge_trace(episodes, out / "trace.jsonl", config.replace(model=judge))
    return write_reports(episodes, out / "trace.jsonl", out, [str(p) for p in paths], plots=plots)
