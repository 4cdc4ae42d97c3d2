"""The batch scorer: replay stream episodes through the engine, write a trace, score the trace.

    streamvid score EPISODES.jsonl... [--model M] [--out DIR] [--memory-top-k K] [--from-trace TRACE]

A run writes `trace.jsonl` (every answer, probe and alert with stream time, TTFT, retrieved blocks) and
`report.json` (accuracy per task; for questions that expect a proactive response, `expected_response`, the timing
metrics of eval/timeliness.py under "proactive"). Metrics are computed from the trace alone, so a trace can be
re-scored without the model.

Runs are native and in one pass: every question is asked at its time, a "tell me when" question becomes a trigger
(acknowledged at once, recorded as an answer) and its alerts are recorded with the question's event id.

Every episode runs with the engine settings `streamvid run` uses (the config given, dialogue turns included),
except what the episode's `protocol` sets for itself (`episode_config`, `PROTOCOL_SETTINGS`): a benchmark whose
questions stand alone writes `"dialogue_turns": 0` into its converted episodes (eval/convert/).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from streamvid.config import EngineConfig
from streamvid.eval import timeliness
from streamvid.eval.metrics import score
from streamvid.eval.recall import retrieval_recall

SCHEMA = "stream-episode/1"
# engine settings an episode's `protocol` may set for its own run; everything else is the run's config
PROTOCOL_SETTINGS = ("dialogue_turns", "decision_hz")


def episode_config(ep: dict, config: EngineConfig) -> EngineConfig:
    """The settings one episode is run with: the run's config (as `streamvid run` uses it, `--dialogue-turns`
    included), with the values its `protocol` sets in PROTOCOL_SETTINGS (absent or null: the run's). A value
    the engine refuses is a ValueError naming the episode."""
    proto = ep.get("protocol") or {}
    changes = {k: proto[k] for k in PROTOCOL_SETTINGS if proto.get(k) is not None}
    if not changes:
        return config
    try:
        return config.replace(**changes)
    except ValueError as e:
        raise ValueError(f"episode {ep.get('episode_id')!r}: protocol: {e}") from None


def episode_settings(config: EngineConfig) -> dict:
    """The protocol-settable values an episode ran with, as its trace's "stats" record holds them."""
    settings = config.settings()
    return {k: settings[k] for k in PROTOCOL_SETTINGS}


def protocol_overrides(records: list[dict], run: dict) -> dict:
    """Settings that episodes' protocols changed from the run's: {setting: {value (JSON text): episodes}}, from
    the "stats" records of a trace (each holds its episode's settings) and the run's settings `run`. Traces
    written before the stats records held them give nothing."""
    out: dict[str, dict[str, int]] = {}
    for rec in records:
        if rec.get("type") != "stats":
            continue
        for k in PROTOCOL_SETTINGS:
            if k in rec and k in run and rec[k] != run[k]:
                value = json.dumps(rec[k])
                out.setdefault(k, {})[value] = out.get(k, {}).get(value, 0) + 1
    return out


def load_episodes(path: str | Path) -> list[dict]:
    """Read and check a stream-episode JSONL file; errors name the line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"episodes file not found: {path}")
    episodes = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            ep = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
        if not isinstance(ep, dict) or ep.get("schema") != SCHEMA:
            got = ep.get("schema") if isinstance(ep, dict) else ep
            raise ValueError(f"{path}:{n}: expected schema {SCHEMA!r}, got {got!r}")
        for key in ("episode_id", "video", "events"):
            if key not in ep:
                raise ValueError(f"{path}:{n}: missing key {key!r}")
        if not isinstance(ep["video"], dict) or not isinstance(ep["video"].get("path"), str):
            raise ValueError(f"{path}:{n}: video.path must be a string")
        if not isinstance(ep["events"], list):
            raise ValueError(f"{path}:{n}: events must be a list, got {type(ep['events']).__name__}")
        for e in ep["events"]:
            if not isinstance(e, dict):
                raise ValueError(f"{path}:{n}: an event must be an object, got {json.dumps(e)[:80]}")
            for key in ("id", "ref", "text"):
                if key in e and not isinstance(e[key], str):
                    raise ValueError(f"{path}:{n}: event {key} must be a string, got {str(e[key])[:80]}")
            if "t" in e and (isinstance(e["t"], bool) or not isinstance(e["t"], (int, float))
                             or not 0 <= e["t"] < float("inf")):
                raise ValueError(f"{path}:{n}: event t must be seconds >= 0, got {str(e['t'])[:80]}")
        proto = ep.get("protocol")
        if proto is not None and not isinstance(proto, dict):
            raise ValueError(f"{path}:{n}: protocol must be an object, got {str(proto)[:80]}")
        turns = (proto or {}).get("dialogue_turns")
        if turns is not None and (isinstance(turns, bool) or not isinstance(turns, int) or turns < 0):
            raise ValueError(f"{path}:{n}: protocol.dialogue_turns must be a whole number >= 0, got {str(turns)[:80]}")
        ids = {e.get("id") for e in ep["events"]}
        for e in ep["events"]:
            need = {"user_query": ("id", "t", "text"), "probe": ("id", "t", "text", "gold"),
                    "expected_answer": ("ref", "gold", "scorer"), "expected_response": ("ref",),
                    "context": ("id", "t", "text")}.get(e.get("kind") if isinstance(e.get("kind"), str) else None)
            if need is None:
                raise ValueError(f"{path}:{n}: event with unknown kind: {str(e)[:80]}")
            missing = [k for k in need if k not in e]
            if missing or ("ref" in e and e["ref"] not in ids):
                raise ValueError(f"{path}:{n}: event {e.get('id', e.get('ref'))!r} lacks {missing or ['a known ref']}")
        video = Path(ep["video"]["path"])
        ep["video"]["path"] = str(video if video.is_absolute() else path.parent / video)
        episodes.append(ep)
    return episodes


def _work(ep: dict) -> tuple[list[tuple[float, str]], list[tuple[float, str]], list[dict]]:
    """Questions and probes to run, and the events they answer (in run order)."""
    queries = [e for e in ep["events"] if e["kind"] == "user_query"]
    probes = [e for e in ep["events"] if e["kind"] == "probe"]
    order = sorted([(e["t"], 0, i, e) for i, e in enumerate(queries)]
                   + [(e["t"], 1, i, e) for i, e in enumerate(probes)],
                   key=lambda x: x[0])
    return ([(e["t"], _question_text(e)) for e in queries], [(e["t"], e["text"]) for e in probes],
            [e for *_, e in order])


def _question_text(event: dict) -> str:
    options = event.get("options") or []
    return "\n".join([event["text"], *options])


def run_episodes(episodes: list[dict], config: EngineConfig, trace_path: str | Path) -> None:
    from streamvid.adapters.base import adapter_for
    from streamvid.assistant.assistant import StreamingAssistant
    from streamvid.media.file_source import FileSource

    adapter = adapter_for(config)
    with open(trace_path, "w") as trace:
        for ep in episodes:
            questions, probes, events = _work(ep)
            video = ep["video"]
            source = FileSource(video["path"], fps=config.fps, t_start_s=video.get("t_start") or 0.0,
                                t_end_s=video.get("t_end"), size=config.frame_px)
            ep_config = episode_config(ep, config)  # run's settings, dialogue included, unless the protocol says
            with StreamingAssistant(ep_config, adapter=adapter) as sa:
                outputs = sa.run_simulated(source, questions, probes)
                stats = sa.reasoning.stats()
            replies = [out for out in outputs if out.kind in ("answer", "probe")]
            event_of = {}  # run question id -> episode event id
            for event, out in zip(events, replies, strict=True):
                if out.question not in (event["text"], _question_text(event)):
                    raise RuntimeError(f"trace out of order at {ep['episode_id']}/{event['id']}")
                event_of[out.id] = event["id"]
            for out in outputs:
                if out.kind in ("answer", "probe", "alert"):
                    trace.write(json.dumps({"episode_id": ep["episode_id"], "event_id": event_of.get(out.id, out.id),
                                            **out.to_json()}) + "\n")
            trace.write(json.dumps({"episode_id": ep["episode_id"], "event_id": None, "type": "stats", **stats,
                                    **episode_settings(ep_config)}) + "\n")


def score_trace(episodes: list[dict], trace_path: str | Path) -> dict:
    outputs = {}
    alerts: dict[tuple[str, str], list[float]] = defaultdict(list)
    last_t: dict[str, float] = defaultdict(float)
    probes = {"run": 0, "skipped": 0, "forwards": 0}
    for line in Path(trace_path).read_text().splitlines():
        rec = json.loads(line)
        key = (rec["episode_id"], rec["event_id"])
        if rec["type"] == "stats":
            for k in probes:
                probes[k] += rec.get(f"probe_{k}" if k == "forwards" else f"probes_{k}", 0)
            continue
        if rec["type"] == "alert":
            alerts[key].append(rec["t_s"])
        elif rec["type"] in ("answer", "probe"):  # not "run" / "judge" records (eval/batch.py, eval/judge.py)
            outputs[key] = rec
        if rec.get("t_s") is not None:
            last_t[rec["episode_id"]] = max(last_t[rec["episode_id"]], rec["t_s"])
    per_task: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    ttfts = []
    forward: list[timeliness.Question] = []
    stream_s = 0.0
    for ep in episodes:
        events = {e["id"]: e for e in ep["events"] if "id" in e}
        golds: dict[str, list[timeliness.Gold]] = defaultdict(list)
        for e in ep["events"]:
            if e["kind"] == "expected_response":
                timing = e.get("timing") or {}
                t_gold = e.get("t_gold", events[e["ref"]]["t"])
                golds[e["ref"]].append(timeliness.Gold(t_gold, tuple(e.get("window") or (t_gold, t_gold)),
                                                       **{k: timing[k] for k in ("sigma_early", "sigma_late")
                                                          if k in timing}))
        forward += [timeliness.Question(g, alerts.get((ep["episode_id"], ref), [])) for ref, g in golds.items()]
        video = ep["video"]
        end = video.get("t_end")
        stream_s += (end if end is not None else last_t[ep["episode_id"]]) - (video.get("t_start") or 0.0)
        for e in ep["events"]:
            if e["kind"] == "expected_answer":
                scorer = e["scorer"]
                q = events[e["ref"]]
                gold = e["gold"]["letter"] if scorer == "mc_first_letter" else e["gold"].get("text", "")
            elif e["kind"] == "probe":
                q, gold, scorer = e, e["gold"], "exact"
            else:
                continue
            task = q.get("task") or ep.get("source", {}).get("task", "unknown")
            rec = outputs.get((ep["episode_id"], q["id"]))
            per_task[task][1] += 1
            if rec is not None:
                per_task[task][0] += score(rec["text"], gold, scorer)
                if rec.get("ttft_ms") is not None:
                    ttfts.append(rec["ttft_ms"])
    tasks = {t: {"correct": c, "n": n, "accuracy": round(c / n, 4)} for t, (c, n) in sorted(per_task.items())}
    total_c, total_n = sum(c for c, _ in per_task.values()), sum(n for _, n in per_task.values())
    return {"tasks": tasks, "overall": round(total_c / total_n, 4) if total_n else None, "n": total_n,
            "retrieval_recall": retrieval_recall(episodes, trace_path),
            "ttft_ms_median": sorted(ttfts)[len(ttfts) // 2] if ttfts else None,
            "proactive": {**timeliness.report(forward, stream_s), "probes": {
                **probes, "skipped_share": round(probes["skipped"] / max(1, probes["run"] + probes["skipped"]), 4)}}
            if forward else None}


def load_all(paths: list[str | Path]) -> list[dict]:
    episodes = [ep for p in paths for ep in load_episodes(p)]
    ids = [ep["episode_id"] for ep in episodes]
    if len(set(ids)) != len(ids):
        raise ValueError(f"episode ids repeat across the files: {sorted({i for i in ids if ids.count(i) > 1})}")
    return episodes


def score_files(paths: list[str | Path], config: EngineConfig, out_dir: str | Path) -> dict:
    episodes = load_all(paths)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_episodes(episodes, config, out / "trace.jsonl")
    records = [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines() if line.strip()]
    report = {"episodes": [str(p) for p in paths], "model": config.model, "memory_top_k": config.memory.top_k,
              "window_tokens": config.window.tokens, "dialogue_turns": config.generation.dialogue_turns,
              "protocol_overrides": protocol_overrides(records, episode_settings(config)),
              **score_trace(episodes, out / "trace.jsonl")}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report
