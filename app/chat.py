"""What the page and the chat say: stream times as clocks, alerts as one line, the model's short name, and the
wording of the chat's lines (the transcript in transcript.py decides when they are written)."""

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


def heard_text(transcript: dict) -> str:
    """One line for words heard in the stream's sound: stream time and the words."""
    return f"[{clock(transcript.get('t_s'))}] “{transcript.get('text', '')}”"


def model_name(model: str) -> str:
    path = Path(model)
    return path.name if path.is_dir() else model


# ---- chat lines ----------------------------------------------------------------------------------------------
def watching_line(label: str) -> str:
    """The line a fresh stream starts the chat with."""
    return f"*Watching {label}.*"


def pending_line(t_s: float | None, pieces: list[str]) -> str:
    """An answer still streaming: its question's stream time and the tokens so far ("…" when none yet)."""
    return f"[{clock(t_s)}] {''.join(pieces).strip()} …" if pieces else f"[{clock(t_s)}] …"


def answer_line(answer: dict) -> str:
    return f"[{clock(answer.get('t_s'))}] {answer['text'] or '(no answer)'}"


def alert_line(alert: dict) -> str:
    return f"**Alert** {alert_text(alert)}"


def say_line(remark: dict) -> str:
    """A remark the model made without being asked (narration), labelled so: it answers no question."""
    return f"*Narration* [{clock(remark.get('t_s'))}] {remark['text']}"


def status_line(status: dict) -> str:
    return f"*[{clock(status.get('t_s'))}] {status.get('event') or status['text']}*"


def error_line(error: str) -> str:
    return f"*The stream stopped with an error: {error}. Start it again to go on.*"
