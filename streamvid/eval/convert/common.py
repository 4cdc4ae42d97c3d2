"""What every converter shares: reading annotation files, checking records field by field, parsing the time
formats the benchmarks publish, and building stream-episode/1 events (docs/evaluation.md).

Every error is a `ConvertError` (a ValueError) with one line that names the file, the record and the field:

    questions_real.json: record [12].questions[0] (task_type 'Counting'): field 'time_stamp': expected a time
    such as "HH:MM:SS", "MM:SS" or seconds, got '1:2:3:4'
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "stream-episode/1"
LETTERS = "ABCDEFGHIJ"


class ConvertError(ValueError):
    """A record of an annotation file does not follow the benchmark's published schema."""


def read_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ConvertError(f"{path}: annotation file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConvertError(f"{path.name}: not JSON ({e.msg} at line {e.lineno})") from None
    except UnicodeDecodeError as e:
        raise ConvertError(f"{path.name}: not UTF-8 text ({e.reason})") from None


_CLOCK = re.compile(r"^\s*(?:(\d+):)?(\d{1,2}):(\d{1,2}(?:\.\d+)?)\s*$")
_SECONDS = re.compile(r"^\s*\d+(?:\.\d+)?\s*$")


def parse_time(value: Any) -> float:
    """Seconds from a number or a clock string: "HH:MM:SS", "H:MM:SS", "MM:SS", each with optional fractional
    seconds ("00:01:02.5"), or plain seconds ("62", "62.5"). Raises ValueError otherwise (also for negatives,
    NaN, booleans, and minutes or seconds of 60 or more inside a clock)."""
    if isinstance(value, bool):
        raise ValueError(f"got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"got {value!r}")
        return float(value)
    if isinstance(value, str):
        if _SECONDS.match(value):
            return float(value)
        m = _CLOCK.match(value)
        if m:
            h, mnt, s = int(m.group(1) or 0), int(m.group(2)), float(m.group(3))
            if (m.group(1) is not None and mnt >= 60) or s >= 60:
                raise ValueError(f"got {value!r}")
            return h * 3600 + mnt * 60 + s
    raise ValueError(f"got {value!r}")


@dataclass
class Record:
    """One annotation record and where it came from, for error messages.

    `where` reads like "record [3]" or "record [3].questions[1]"; `label` adds an identifying field
    ("id 17") when the record has one."""

    data: Any
    file: str
    where: str
    label: str = ""

    def fail(self, field_name: str | None, message: str) -> ConvertError:
        who = f"{self.where} ({self.label})" if self.label else self.where
        at = f": field {field_name!r}" if field_name else ""
        return ConvertError(f"{self.file}: {who}{at}: {message}")

    def check_object(self) -> Record:
        if not isinstance(self.data, dict):
            raise self.fail(None, f"expected an object, got {type(self.data).__name__}")
        return self

    def has(self, name: str) -> bool:
        return isinstance(self.data, dict) and name in self.data and self.data[name] is not None

    def get(self, name: str, kind: type | tuple[type, ...], *, optional: bool = False, default: Any = None) -> Any:
        """The field's value, checked against `kind` (bool is never accepted as a number)."""
        self.check_object()
        if name not in self.data or self.data[name] is None:
            if optional:
                return default
            raise self.fail(name, "missing")
        value = self.data[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            raise self.fail(name, f"expected {_kinds(kinds)}, got {_show(value)}")
        return value

    def text(self, name: str, *, optional: bool = False) -> str | None:
        value = self.get(name, str, optional=optional)
        if value is not None and not value.strip():
            raise self.fail(name, "expected non-empty text, got an empty string")
        return value

    def number(self, name: str, *, minimum: float | None = 0.0, optional: bool = False) -> float | None:
        value = self.get(name, (int, float), optional=optional)
        if value is None:
            return None
        if not math.isfinite(value) or (minimum is not None and value < minimum):
            raise self.fail(name, f"expected a number >= {minimum:g}, got {_show(value)}")
        return float(value)

    def integer(self, name: str, *, optional: bool = False) -> int | None:
        return self.get(name, int, optional=optional)

    def time(self, name: str, *, optional: bool = False) -> float | None:
        self.check_object()
        if not self.has(name):
            if optional:
                return None
            raise self.fail(name, "missing")
        try:
            return parse_time(self.data[name])
        except ValueError:
            raise self.fail(name, 'expected a time such as "HH:MM:SS", "MM:SS" or seconds, '
                                  f"got {_show(self.data[name])}") from None

    def clock(self, name: str) -> tuple[float, bool]:
        """A colon-separated clock read as StreamingBench's loader reads it: the sum of int(part) * 60**i over
        the parts from the right ("00:03:10" = 190 s, "03:10" = 190 s, "00:12450" = 12450 s). Also says
        whether the text was a canonical clock (minutes and seconds below 60, at most three parts)."""
        value = self.get(name, str)
        parts = value.strip().split(":")
        if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
            raise self.fail(name, f'expected a clock such as "HH:MM:SS" or "MM:SS", got {_show(value)}')
        nums = [int(p) for p in parts]
        seconds = float(sum(n * 60 ** i for i, n in enumerate(reversed(nums))))
        canonical = len(parts) > 1 and all(n < 60 for n in nums[1:]) and all(len(p) <= 2 for p in parts[1:])
        return seconds, canonical

    def items(self, name: str, *, min_len: int = 0, optional: bool = False) -> list:
        value = self.get(name, list, optional=optional, default=[])
        if len(value) < min_len:
            raise self.fail(name, f"expected a list of at least {min_len} items, got {len(value)}")
        return value

    def child(self, name: str, index: int, label_key: str | None = None) -> Record:
        item = self.data[name][index]
        parent = f"{self.where} ({self.label})" if self.label else self.where
        rec = Record(item, self.file, f"{parent}.{name}[{index}]")
        if label_key and isinstance(item, dict) and isinstance(item.get(label_key), str | int):
            rec.label = f"{label_key} {item[label_key]!r}"
        return rec.check_object()

    def span(self, name: str) -> tuple[float, float]:
        """A [start, end] pair of seconds with start <= end."""
        value = self.get(name, list)
        try:
            a, b = (parse_time(v) for v in value)
        except ValueError:
            raise self.fail(name, f"expected [start, end] in seconds, got {_show(value)}") from None
        if len(value) != 2 or a > b:
            raise self.fail(name, f"expected [start, end] with start <= end, got {_show(value)}")
        return a, b


def records(data: Any, file: str, label_key: str | None = None, where: str = "record") -> list[Record]:
    """The top-level list of a file as Records (a file that is not a list is one error)."""
    if not isinstance(data, list):
        raise ConvertError(f"{file}: expected a JSON list of records, got {type(data).__name__}")
    out = []
    for i, item in enumerate(data):
        rec = Record(item, file, f"{where} [{i}]")
        if label_key and isinstance(item, dict) and isinstance(item.get(label_key), str | int):
            rec.label = f"{label_key} {item[label_key]!r}"
        out.append(rec)
    return out


def _kinds(kinds: tuple[type, ...]) -> str:
    names = {int: "a number", float: "a number", str: "text", list: "a list", dict: "an object", bool: "true/false"}
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def lettered(options: list[str]) -> list[str]:
    """Options as "A. text", "B. text", ...; options that already carry their letter are kept as they are."""
    out = []
    for i, opt in enumerate(options):
        prefix = f"{LETTERS[i]}."
        out.append(opt if opt.startswith(prefix) else f"{prefix} {opt}")
    return out


def episode_id(benchmark: str, key: str) -> str:
    """A stable episode id from the benchmark and the video (or record) key."""
    return f"{benchmark}/{key}"


@dataclass
class EpisodeBuilder:
    """Collects the events of one video's episode; ids are q0, a0, r0, c0, ... in insertion order.

    `protocol` may set `dialogue_turns`: 0 where the benchmark asks every question on its own (OVO-Bench,
    StreamingBench, RVS), a number where it keeps a dialogue (SVBench chains); without it the scorer uses the
    run's setting (`--dialogue-turns`, as `streamvid run` does; eval/score.episode_config)."""

    benchmark: str
    key: str
    video_path: str
    orig_id: Any = None
    task: str = "mixed"
    protocol: dict = field(default_factory=lambda: {"context": "prefix", "context_window_s": None,
                                                     "decision_hz": None})
    events: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    t_end: float | None = None
    _n: int = 0

    def query(self, t: float, text: str, *, task: str, category: str, options: list[str] | None = None,
              prompt: str | None = None, orig_id: Any = None, **extra) -> str:
        qid = f"q{self._n}"
        self._n += 1
        event = {"id": qid, "t": round(t, 3), "kind": "user_query", "text": text, "task": task, "category": category}
        if options:
            event["options"] = options
        if prompt:
            event["prompt"] = prompt
        if orig_id is not None:
            event["orig_id"] = orig_id
        event.update(extra)
        self.events.append(event)
        return qid

    def answer(self, ref: str, gold: dict, scorer: str) -> None:
        self.events.append({"id": "a" + ref[1:], "kind": "expected_answer", "ref": ref, "gold": gold,
                            "scorer": scorer})

    def response(self, ref: str, t_gold: float, window: tuple[float, float], gold_text: str, k: int = 0,
                 **extra) -> None:
        self.events.append({"id": f"r{ref[1:]}_{k}", "kind": "expected_response", "ref": ref,
                            "t_gold": round(t_gold, 3), "window": [round(window[0], 3), round(window[1], 3)],
                            "gold": {"text": gold_text}, **extra})

    def context(self, t: float, text: str, **extra) -> None:
        self.events.append({"id": f"c{sum(e['kind'] == 'context' for e in self.events)}", "t": round(t, 3),
                            "kind": "context", "text": text, **extra})

    def build(self) -> dict:
        return {"schema": SCHEMA, "episode_id": episode_id(self.benchmark, self.key),
                "source": {"benchmark": self.benchmark, "task": self.task, "orig_id": self.orig_id},
                "video": {"path": self.video_path, "t_start": 0.0, "t_end": self.t_end},
                "protocol": dict(self.protocol), "events": self.events, "meta": self.meta}


def video_under(videos_dir: str | Path, name: str) -> str:
    """The video's path under --videos (relative names are kept relative to that folder)."""
    return str(Path(videos_dir) / name)


def group(items: Iterable[tuple[str, Any]]) -> dict[str, list]:
    """Group (key, item) pairs by key, keeping the first-seen order of keys and items."""
    out: dict[str, list] = {}
    for key, item in items:
        out.setdefault(key, []).append(item)
    return out
