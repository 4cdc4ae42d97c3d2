"""AlertFolder: a folder of alert media on disk, one subfolder per alert (what alert_media.py writes with a folder).

    DIR/a0/alert.json      the alert: alert_id, trigger_id, condition, t_s, text, clip_span_s, snapshot_t_s
    DIR/a0/snapshot.jpg    the frame it fired on
    DIR/a0/clip.mp4        the clip around it

Each file is written whole or not at all (a temporary ".part" file renamed over it). `earlier()` reads back the
alerts a folder already holds (a resumed session's), so that their ids are not given again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

FILES = {"snapshot": "snapshot.jpg", "clip": "clip.mp4"}
RECORD = "alert.json"
_ALERT_DIR = re.compile(r"^a(\d+)$")


class AlertFolder:
    def __init__(self, folder: str | Path) -> None:
        self.root = Path(folder)

    def path(self, alert_id: str, kind: str) -> Path:
        """Where an alert's "snapshot" or "clip" is written."""
        return self.root / alert_id / FILES[kind]

    def write(self, alert_id: str, kind: str, write: Callable[[Path], None]) -> int:
        """`write(part)` fills a temporary file that then replaces the alert's `kind` file ("snapshot", "clip" or
        "record"); returns its size. OSError when the folder is not writable or full."""
        path = self.root / alert_id / RECORD if kind == "record" else self.path(alert_id, kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        try:
            write(part)
            part.replace(path)
        finally:
            part.unlink(missing_ok=True)
        return path.stat().st_size

    def write_record(self, alert_id: str, record: dict) -> None:
        self.write(alert_id, "record", lambda part: part.write_text(json.dumps(record)))

    def remove(self, alert_id: str, kind: str) -> None:
        self.path(alert_id, kind).unlink(missing_ok=True)

    def read(self, alert_id: str, kind: str) -> bytes | None:
        try:
            return self.path(alert_id, kind).read_bytes()
        except OSError:
            return None

    def earlier(self) -> tuple[list[tuple[dict, dict[str, int | None]]], int]:
        """The alerts the folder holds, oldest first: (their alert.json, {kind: file size, None when absent}), and
        the next alert number (past every a<N> subfolder, readable or not). Creates the folder; OSError when it
        cannot."""
        self.root.mkdir(parents=True, exist_ok=True)
        found = sorted((int(m.group(1)), d) for d in self.root.iterdir()
                       if d.is_dir() and (m := _ALERT_DIR.match(d.name)))
        alerts = []
        for _, folder in found:
            try:
                record = json.loads((folder / RECORD).read_text())
                if not isinstance(record, dict) or record.get("alert_id") != folder.name:
                    continue
            except (OSError, ValueError):
                continue  # not one of ours, or damaged: left alone
            sizes = {kind: (folder / name).stat().st_size if (folder / name).is_file() else None
                     for kind, name in FILES.items()}
            alerts.append((record, sizes))
        return alerts, (found[-1][0] + 1 if found else 0)
