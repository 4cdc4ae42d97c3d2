"""Reports from a trace: report.json, report.md (Markdown tables) and one PNG timeline per episode.

Everything here reads the episodes and the trace only (no model), so `streamvid score --from-trace` gives the
same report as the run that wrote the trace. report.json holds:

* what eval/score.score_trace reports: accuracy per task (each episode's own scorer), overall, TTFT median,
  and "proactive" (Timeliness-F1 K=1/K=5, precision/recall at ±1/2/3 s, delay, false alerts; eval/timeliness.py);
* "categories": accuracy per category (OVO backward / realtime / forward, StreamingBench subsets, ...);
* "multiple_choice": per benchmark, category and task: strict first letter, lenient and the benchmark's own
  rule ("official": OVO-Bench gold letter anywhere in the reply; StreamingBench first character);
* "ovo_bench": OVO-Bench's aggregation: per task the mean over questions (forward tasks over probes, with
  OVO's REC / SSR / CRR rules), per category the mean of its tasks, overall the mean of the three categories;
* "streamingbench_proactive": per task, the share of questions whose reply came within ±2 s of the gold time
  and the share that also contained the gold output (StreamingBench count.py);
* "system": TTFT p50/p90, ingest frames per second, real-time factor (wall seconds per stream second), frames
  dropped, peak memory;
* "judge" and "judged": with `--judge MODEL` (eval/judge.py), the judge model and the judged accuracy of the
  open-ended answers per task; without one, "judge" says that only substring/exact matching was used;
* "run": the run's settings from the trace's "run" record (mode, model, fps, window_tokens, memory_top_k,
  dialogue_turns, decision_hz), "changed_from_defaults" (every engine setting not at EngineConfig's default) and
  "protocol_overrides" (settings that episodes' protocols changed for themselves, e.g. {"dialogue_turns":
  {"0": 12}}: 12 episodes ran without earlier turns); report.md prints them above the tables.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

from streamvid.eval import timeliness
from streamvid.eval.metrics import mc_lenient, mc_official, mc_strict, score
from streamvid.eval.score import protocol_overrides, score_trace

JUDGE_NOTE = ("no LLM judge: open-ended answers are scored by substring/exact matching only (the benchmarks' "
              "GPT judges and ProactiveVideoQA's PAUC are not reproduced)")


def _read(trace_path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(trace_path).read_text().splitlines() if line.strip()]


def scored_items(episodes: list[dict], records: list[dict]) -> list[dict]:
    """One row per scored question: its reply, time, correctness (the episode's scorer) and MC variants."""
    replies = {(r["episode_id"], r["event_id"]): r for r in records if r.get("type") in ("answer", "probe")}
    rows = []
    for ep in episodes:
        bench = (ep.get("source") or {}).get("benchmark", "unknown")
        events = {e["id"]: e for e in ep["events"] if "id" in e}
        for e in ep["events"]:
            if e["kind"] == "expected_answer":
                q, scorer = events[e["ref"]], e["scorer"]
                gold = e["gold"]["letter"] if scorer == "mc_first_letter" else e["gold"].get("text", "")
            elif e["kind"] == "probe":
                q, gold, scorer = e, e["gold"], "exact"
            else:
                continue
            rec = replies.get((ep["episode_id"], q["id"]))
            text = rec["text"] if rec is not None else None
            row = {"episode_id": ep["episode_id"], "event_id": q["id"], "benchmark": bench,
                   "category": q.get("category") or (ep.get("source") or {}).get("task", "unknown"),
                   "task": q.get("task") or (ep.get("source") or {}).get("task", "unknown"),
                   "t": q["t"], "scorer": scorer, "gold": gold, "reply": text,
                   "ttft_ms": rec.get("ttft_ms") if rec else None,
                   "correct": bool(text is not None and score(text, gold, scorer))}
            if scorer == "mc_first_letter":
                row["strict"] = text is not None and mc_strict(text, gold)
                row["lenient"] = text is not None and mc_lenient(text, gold, q.get("options"))
                row["official"] = None if text is None else mc_official(bench, text, gold)
            rows.append(row)
    return rows


def _acc(rows: list[dict], key: str = "correct") -> dict:
    n = len(rows)
    c = sum(1 for r in rows if r.get(key))
    return {"correct": c, "n": n, "accuracy": round(c / n, 4) if n else None}


def _pct(values: list[float], q: float) -> float | None:
    v = timeliness.percentile(values, q)
    return None if v is None else round(v, 1)


def build_report(episodes: list[dict], trace_path: str | Path) -> dict:
    records = _read(trace_path)
    base = score_trace(episodes, trace_path)
    rows = scored_items(episodes, records)
    by_cat: dict[str, list] = defaultdict(list)
    for r in rows:
        by_cat[f"{r['benchmark']}/{r['category']}"].append(r)
    report = {**base, "categories": {k: _acc(v) for k, v in sorted(by_cat.items())}}

    mc: dict[str, dict] = {}
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        if r["scorer"] == "mc_first_letter":
            groups[(r["benchmark"], r["category"], r["task"])].append(r)
    for (b, c, t), rs in sorted(groups.items()):
        entry = {"n": len(rs), "strict": _acc(rs, "strict")["accuracy"], "lenient": _acc(rs, "lenient")["accuracy"]}
        if any(r["official"] is not None for r in rs):
            entry["official"] = _acc(rs, "official")["accuracy"]
        mc.setdefault(b, {}).setdefault(c, {})[t] = entry
    if mc:
        report["multiple_choice"] = mc

    ovo = [r for r in rows if r["benchmark"] == "ovo-bench"]
    if ovo:
        report["ovo_bench"] = ovo_aggregate(ovo)
    sbp = streamingbench_proactive(episodes, records)
    if sbp:
        report["streamingbench_proactive"] = sbp
    report["system"] = system_figures(records)
    verdicts = {(r["episode_id"], r["event_id"]): r for r in records if r.get("type") == "judge"}
    judged = [(r, verdicts[(r["episode_id"], r["event_id"])]) for r in rows
              if (r["episode_id"], r["event_id"]) in verdicts]
    if judged:
        names = sorted({v["judge"] for _, v in judged})
        report["judge"] = {"model": names[0] if len(names) == 1 else names, "n": len(judged),
                           "rule": "the judge's p(yes) >= 0.5 that the reply matches the gold answer"}
        per: dict[str, list] = defaultdict(list)
        for r, v in judged:
            per[f"{r['benchmark']}/{r['category']}/{r['task']}"].append({"correct": v["verdict"]})
        report["judged"] = {k: _acc(v) for k, v in sorted(per.items())}
    elif any(r["scorer"] in ("substring", "exact") and r["benchmark"] != "shapesworld" for r in rows):
        report["judge"] = JUDGE_NOTE
    run = next((r for r in records if r.get("type") == "run"), None)
    if run is not None:
        report["run"] = {k: v for k, v in run.items() if k not in ("episode_id", "event_id", "type")}
        overrides = protocol_overrides(records, run)
        if overrides:
            report["run"]["protocol_overrides"] = overrides
    return report


def ovo_aggregate(rows: list[dict]) -> dict:
    """OVO-Bench's own numbers: task accuracy (official rule for multiple choice), category = mean of tasks,
    overall = mean of the categories present."""
    tasks: dict[str, list] = defaultdict(list)
    cat_of = {}
    for r in rows:
        ok = r["official"] if r["scorer"] == "mc_first_letter" else r["correct"]
        tasks[r["task"]].append(bool(ok))
        cat_of[r["task"]] = r["category"]
    task_acc = {t: round(100 * sum(v) / len(v), 2) for t, v in sorted(tasks.items())}
    cats: dict[str, list] = defaultdict(list)
    for t, a in task_acc.items():
        cats[cat_of[t]].append(a)
    cat_acc = {c: round(sum(v) / len(v), 2) for c, v in sorted(cats.items())}
    return {"tasks": task_acc, "categories": cat_acc,
            "overall": round(sum(cat_acc.values()) / len(cat_acc), 2) if cat_acc else None}


def streamingbench_proactive(episodes: list[dict], records: list[dict]) -> dict | None:
    first_alert: dict[tuple, dict] = {}
    for r in records:
        if r.get("type") == "alert":
            key = (r["episode_id"], r["event_id"])
            if key not in first_alert or r["t_s"] < first_alert[key]["t_s"]:
                first_alert[key] = r
    per_task: dict[str, list] = defaultdict(list)
    for ep in episodes:
        if (ep.get("source") or {}).get("benchmark") != "streamingbench":
            continue
        events = {e["id"]: e for e in ep["events"] if "id" in e}
        for e in ep["events"]:
            if e["kind"] != "expected_response":
                continue
            q = events[e["ref"]]
            alert = first_alert.get((ep["episode_id"], q["id"]))
            timely = alert is not None and abs(alert["t_s"] - e["t_gold"]) <= 2.0 + 1e-9
            right = timely and e["gold"]["text"] in (alert.get("text") or "")
            per_task[q.get("task", "unknown")].append((timely, right))
    if not per_task:
        return None
    return {t: {"n": len(v), "time_accuracy": round(sum(a for a, _ in v) / len(v), 4),
                "answer_accuracy": round(sum(b for _, b in v) / len(v), 4)} for t, v in sorted(per_task.items())}


def system_figures(records: list[dict]) -> dict:
    ttfts = [r["ttft_ms"] for r in records if r.get("type") in ("answer", "alert") and r.get("ttft_ms") is not None]
    stats = [r for r in records if r.get("type") == "stats"]
    frames = sum(s.get("frames_in") or 0 for s in stats)
    encode_s = sum(s.get("encode_s") or 0.0 for s in stats)
    wall = sum(s.get("wall_s") or 0.0 for s in stats)
    stream = sum(s.get("stream_s") or 0.0 for s in stats)
    peaks = [s["peak_memory_mb"] for s in stats if s.get("peak_memory_mb")]
    return {"ttft_ms_p50": _pct(ttfts, 0.5), "ttft_ms_p90": _pct(ttfts, 0.9),
            "ingest_frames_per_s": round(frames / encode_s, 2) if encode_s else None,
            "real_time_factor": round(wall / stream, 3) if stream else None,
            "frames_in": frames, "frames_dropped": sum(s.get("frames_dropped") or 0 for s in stats),
            "peak_memory_mb": max(peaks) if peaks else None,
            "peak_memory_kind": next((s.get("peak_memory_kind") for s in stats if s.get("peak_memory_kind")), None)}


def markdown(report: dict) -> str:
    """The report as Markdown tables."""
    lines = ["# streamvid score report", ""]
    run = report.get("run") or {}
    if run:
        plain = {k: v for k, v in run.items() if k not in ("changed_from_defaults", "protocol_overrides")}
        lines += [", ".join(f"{k}: {v}" for k, v in plain.items()), ""]
        if run.get("changed_from_defaults"):
            lines += ["Changed from the engine defaults: "
                      + ", ".join(f"{k} {v}" for k, v in run["changed_from_defaults"].items()) + ".", ""]
        if run.get("protocol_overrides"):
            lines += ["Set by the episodes' protocols: " + "; ".join(
                f"{k} {value} in {n} episode{'s' if n != 1 else ''}"
                for k, values in run["protocol_overrides"].items() for value, n in values.items()) + ".", ""]
    lines += ["| task | n | correct | accuracy |", "|---|---:|---:|---:|"]
    lines += [f"| {t} | {v['n']} | {v['correct']} | {_f(v['accuracy'])} |" for t, v in report["tasks"].items()]
    lines += [f"| **overall** | {report['n']} | | {_f(report['overall'])} |", ""]
    if report.get("categories"):
        lines += ["| category | n | accuracy |", "|---|---:|---:|"]
        lines += [f"| {c} | {v['n']} | {_f(v['accuracy'])} |" for c, v in report["categories"].items()] + [""]
    for bench, cats in (report.get("multiple_choice") or {}).items():
        lines += [f"Multiple choice, {bench}:", "", "| category | task | n | strict | lenient | official |",
                  "|---|---|---:|---:|---:|---:|"]
        for c, tasks in cats.items():
            lines += [f"| {c} | {t} | {v['n']} | {_f(v['strict'])} | {_f(v['lenient'])} | {_f(v.get('official'))} |"
                      for t, v in tasks.items()]
        lines.append("")
    if report.get("ovo_bench"):
        o = report["ovo_bench"]
        lines += ["OVO-Bench (percent; category = mean of its tasks):", "",
                  "| " + " | ".join([*o["tasks"], *o["categories"], "overall"]) + " |",
                  "|" + "---:|" * (len(o["tasks"]) + len(o["categories"]) + 1),
                  "| " + " | ".join(_f(v) for v in [*o["tasks"].values(), *o["categories"].values(), o["overall"]])
                  + " |", ""]
    if report.get("streamingbench_proactive"):
        lines += ["StreamingBench proactive output:", "", "| task | n | within ±2 s | and right output |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {t} | {v['n']} | {_f(v['time_accuracy'])} | {_f(v['answer_accuracy'])} |"
                  for t, v in report["streamingbench_proactive"].items()] + [""]
    p = report.get("proactive")
    if p:
        lines += ["Proactive replies (Timeliness-F1):", "",
                  ("| questions | windows | replies | F1 K=1 | F1 K=5 | P@±2s | R@±2s | delay p50 s | "
                   "false / 10 min |"),
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
                  (f"| {p['questions']} | {p['gold_windows']} | {p['replies']} | {_f(p['timeliness_f1_k1']['f1'])} | "
                   f"{_f(p['timeliness_f1_k5']['f1'])} | {_f(p['at_2s']['precision'])} | "
                   f"{_f(p['at_2s']['recall'])} | {_f(p['delay_s_median'])} | {_f(p['false_alerts_per_10min'])} |"),
                  ""]
    s = report["system"]
    lines += ["| TTFT p50 ms | TTFT p90 ms | ingest frames/s | real-time factor | frames | dropped | peak MB |",
              "|---:|---:|---:|---:|---:|---:|---:|",
              (f"| {_f(s['ttft_ms_p50'])} | {_f(s['ttft_ms_p90'])} | {_f(s['ingest_frames_per_s'])} | "
               f"{_f(s['real_time_factor'])} | {s['frames_in']} | {s['frames_dropped']} | {_f(s['peak_memory_mb'])} |"),
              ""]
    if report.get("judged"):
        j = report["judge"]
        lines += [f"Judged by {j['model']} ({j['rule']}):", "", "| benchmark/category/task | n | judged accuracy |",
                  "|---|---:|---:|"]
        lines += [f"| {k} | {v['n']} | {_f(v['accuracy'])} |" for k, v in report["judged"].items()] + [""]
    elif report.get("judge"):
        lines += [f"Note: {report['judge']}.", ""]
    return "\n".join(lines)


def _f(v) -> str:
    return "–" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def plot_timeline(ep: dict, records: list[dict], rows: list[dict], path: str | Path) -> Path:
    """One PNG: questions (green right, red wrong, grey unanswered) at their times, alerts, gold windows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = {r["event_id"]: r["correct"] for r in rows if r["episode_id"] == ep["episode_id"]}
    answered = {r["event_id"] for r in records if r.get("episode_id") == ep["episode_id"]
                and r.get("type") in ("answer", "probe")}
    alerts = [r for r in records if r.get("episode_id") == ep["episode_id"] and r.get("type") == "alert"]
    queries = [e for e in ep["events"] if e["kind"] in ("user_query", "probe")]
    windows = [e for e in ep["events"] if e["kind"] == "expected_response"]
    fig, ax = plt.subplots(figsize=(10, 2.9), dpi=100)
    for w in windows:
        ax.axvspan(w["window"][0], w["window"][1], ymin=0.05, ymax=0.35, color="tab:blue", alpha=0.25)
        ax.axvline(w["t_gold"], ymin=0.05, ymax=0.35, color="tab:blue", lw=1)
    for e in queries:
        colour = "grey" if e["id"] not in answered else ("tab:green" if ok.get(e["id"]) else "tab:red")
        if e["id"] not in ok and e["id"] in answered:
            colour = "black"  # asked, nothing to score (e.g. a proactive question's acknowledgement)
        ax.plot([e["t"]], [0.7], marker="v", color=colour, ms=8, ls="none")
    if alerts:
        ax.plot([a["t_s"] for a in alerts], [0.2] * len(alerts), marker="x", color="tab:orange", ms=9, ls="none")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    legend = [Line2D([], [], marker="v", color=c, ls="none", label=lab) for c, lab in
              (("tab:green", "right"), ("tab:red", "wrong"), ("black", "not scored"), ("grey", "no reply"))]
    legend += [Patch(color="tab:blue", alpha=0.25, label="gold window"),
               Line2D([], [], marker="x", color="tab:orange", ls="none", label="alert")]
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.32), ncol=6, fontsize=8, frameon=False)
    ax.set_ylim(0, 1)
    ax.set_yticks([0.2, 0.7], ["alerts / gold windows", "questions"])
    ax.set_xlabel("stream time (s)")
    end = ep["video"].get("t_end")
    ts = [e["t"] for e in queries] + [a["t_s"] for a in alerts] + [w["window"][1] for w in windows]
    ax.set_xlim(0, max([end or 0.0, *ts, 1.0]) * 1.02)
    right = sum(1 for v in ok.values() if v)
    ax.set_title(f"{ep['episode_id']}: {right}/{len(ok)} right, {len(alerts)} alerts", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:120] or "episode"


def write_reports(episodes: list[dict], trace_path: str | Path, out_dir: str | Path, episode_files: list[str],
                  plots: bool = True) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = {"episodes": episode_files, **build_report(episodes, trace_path)}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(markdown(report))
    if plots:
        records = _read(trace_path)
        rows = scored_items(episodes, records)
        (out / "timelines").mkdir(exist_ok=True)
        for ep in episodes:
            plot_timeline(ep, records, rows, out / "timelines" / f"{_safe(ep['episode_id'])}.png")
    return report
