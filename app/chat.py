"""What the page and the chat say: stream times as clocks, alerts as one line, the model's short name."""

from __future__ import annotations

from pathlib import Path


def clock(t_s: float | None) -> str:
    """Stream time as "mm:ss" (or "h:mm:ss")."""
    if t_s is None:
        return "--:--"
    s = int(max(t_s, 0.0))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


def alert_text(alert: dict) -> str:
    """One line for an alert: stream time, what the model said, and why (condition, score, evidence)."""
    evidence = ", ".join(f"{clock(a)}–{clock(b)}" for a, b in alert.get("evidence_t_s") or [])
    score = alert.get("score")
    why = [f"when “{alert.get('condition')}”"] + ([f"score {score:.2f}"] if isinstance(score, int | float) else []) \
        + ([f"evidence {evidence}"] if evidence else [])
    return f"[{clock(alert.get('t_s'))}] {alert.get('text', '')} ({', '.join(why)})"


def model_name(model: str) -> str:
    path = Path(model)
    return path.name if path.is_dir() else model
