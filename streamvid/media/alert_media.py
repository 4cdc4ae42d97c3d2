"""AlertMedia: the evidence behind a stream's alerts: the frame each alert fired on and a clip around it.

    media = sa.keep_alert_media()                # StreamingAssistant; or keep_alert_media(folder) to write files
    for out in sa.outputs():
        if out.kind == "alert":
            media.snapshot(out.alert_id)         # JPEG bytes; None while it is being made
            media.clip(out.alert_id)             # MP4 bytes (H.264); None until t_s + after_s has arrived
    media.list()                                 # every alert kept: ids, times, what is ready
    media.frame_at(12.5)                         # a recent frame at the source's size (an answer's evidence)

The stream's source hands each sampled frame at its own size (frame_source.py `on_full_frame`) to `put`, which keeps
them in a FrameRing bounded in seconds (before_s + after_s) and bytes (`ring_mb`). When an alert is emitted
(`record`, on the scheduler's thread) it gets its id ("a0", "a1", ...) and its snapshot: the frame at the alert's
`t_s` (the last frame of the chunk the trigger fired on). Its clip holds the frames in [t_s - before_s,
t_s + after_s] and is made once a frame at or past t_s + after_s has arrived, or the input has ended. A worker thread
("streamvid-alert-media") encodes them (JPEG, H.264 in MP4: clip_encoding.py) into RAM, or into `folder`/<alert_id>/
(snapshot.jpg, clip.mp4, alert.json) when there is one. Stored media are capped at `store_mb`: the oldest alerts'
media are dropped first. Nothing here stops an alert: a frame missing from the ring (dropped, or older than the
ring), a full or unwritable folder, or an encoder behind are one-line warnings, and the alert goes out as it is.

Thread contract: `put` from the thread that decodes or pushes frames, `record` from the scheduler's, everything else
from any thread; one lock guards the ring and the records, held for bookkeeping only (never while encoding).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path

from streamvid.media.alert_folder import AlertFolder
from streamvid.media.clip_encoding import jpeg, mp4_bytes, smaller_jpeg, write_mp4
from streamvid.media.frame_ring import FrameRing
from streamvid.types import Alert, Frame

log = logging.getLogger(__name__)

THREAD_NAME = "streamvid-alert-media"
WORKER_NICENESS = 10
MAX_CLIPS_WAITING = 4  # clips handed to the encoder and not yet encoded; past it a clip is not kept (warning)
MAX_RECORDS = 10_000  # alerts listed per stream; the oldest records are forgotten past it
THUMBNAIL_PX = 160


class UnknownAlert(LookupError):
    """An alert id this stream does not have (never had, or forgotten); the message is one line."""


@dataclass
class _Record:
    alert_id: str
    trigger_id: str
    condition: str
    t_s: float
    text: str
    clip_span_s: tuple[float, float]
    snapshot: str = "pending"  # pending, ready, missing (no frame), failed (not written), dropped (retention)
    clip: str = "recording"  # recording, encoding, ready, missing, failed, dropped
    snapshot_t_s: float | None = None
    clip_frames: int = 0
    data: dict[str, bytes] = field(default_factory=dict)  # in RAM: "snapshot", "clip"
    nbytes: int = 0

    def identity(self) -> dict:
        """What alert.json keeps of it (the states are the files themselves)."""
        return {"alert_id": self.alert_id, "trigger_id": self.trigger_id, "condition": self.condition, "t_s": self.t_s,
                "text": self.text, "clip_span_s": list(self.clip_span_s), "snapshot_t_s": self.snapshot_t_s}

    def describe(self) -> dict:
        return {"alert_id": self.alert_id, "trigger_id": self.trigger_id, "condition": self.condition, "t_s": self.t_s,
                "text": self.text, "snapshot": self.snapshot, "snapshot_t_s": self.snapshot_t_s, "clip": self.clip,
                "clip_span_s": list(self.clip_span_s), "clip_frames": self.clip_frames, "bytes": self.nbytes}


class AlertMedia:
    def __init__(self, fps: float, before_s: float = 10.0, after_s: float = 4.0, ring_mb: float = 192.0,
                 store_mb: float = 256.0, folder: str | Path | None = None, chunk_s: float | None = None) -> None:
        if not fps > 0 or before_s < 0 or after_s < 0 or not ring_mb > 0 or not store_mb > 0:
            raise ValueError(f"alert media needs fps, ring_mb, store_mb > 0 and before_s, after_s >= 0, got fps={fps}, "
                             f"before_s={before_s}, after_s={after_s}, ring_mb={ring_mb}, store_mb={store_mb}")
        self.fps, self.before_s, self.after_s = fps, before_s, after_s
        self.max_store_bytes = int(store_mb * 2**20)
        self.chunk_s = chunk_s if chunk_s is not None else 1.0 / fps  # how far before t_s its frame may be
        self.folder = None if folder is None else Path(folder)
        self._disk = None if folder is None else AlertFolder(folder)
        self.ring = FrameRing(before_s + after_s, int(ring_mb * 2**20))
        self._lock = threading.Condition()
        self._records: OrderedDict[str, _Record] = OrderedDict()
        self._recording: list[_Record] = []  # clips waiting for their last frame
        self._jobs: deque[tuple[str, _Record, list[Frame]]] = deque()
        self._clips_waiting = 0
        self._busy = False  # the worker is encoding a job it took
        self._ended = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self.store_bytes = 0
        self.warnings = 0
        self._warned_ring = False
        first = self._open_folder() if self.folder is not None else 0
        self._ids = itertools.count(first)

    @classmethod
    def for_config(cls, config, folder: str | Path | None = None) -> AlertMedia:
        """The media of a stream run with `config` (an EngineConfig: its alert_media section, fps and chunks)."""
        m = config.alert_media
        return cls(config.fps, m.before_s, m.after_s, m.ring_mb, m.store_mb, folder,
                   chunk_s=config.frames_per_chunk / config.fps)

    # ---- frames and alerts in -----------------------------------------------------------------------------
    def put(self, frame: Frame) -> None:
        """The newest sampled frame at the source's size, on the stream's clock; completes the clips it ends."""
        with self._lock:
            if self._closed:
                return
            self.ring.put(frame)
            if self.ring.dropped_for_bytes and not self._warned_ring:
                self._warned_ring = True
                held = self.ring.span_s
                held_s = held[1] - held[0] if held else 0.0
                self._warn(f"alert media: {self.ring.max_bytes / 2**20:g} MB hold {held_s:.1f} s "
                           f"of {frame.image.shape[1]}x{frame.image.shape[0]} frames, less than the "
                           f"{self.ring.seconds:g} s a clip spans (--alert-ring-mb): clips start later")
            for rec in [r for r in self._recording if frame.t_s >= r.clip_span_s[1] - 1e-6]:
                self._finish_clip(rec)

    def end_input(self) -> None:
        """No more frames: the clips still recording are made of what has arrived; later alerts at once."""
        with self._lock:
            self._ended = True
            for rec in list(self._recording):
                self._finish_clip(rec)

    def record(self, alert: Alert) -> Alert:
        """Keep the evidence of `alert` (on the scheduler's thread: bookkeeping only) and return it with its
        alert_id."""
        with self._lock:
            if self._closed:
                return alert
            alert_id = f"a{next(self._ids)}"
            t = alert.t_s
            rec = _Record(alert_id, alert.id, alert.condition, t, alert.text,
                          (round(max(0.0, t - self.before_s), 3), round(t + self.after_s, 3)))
            self._records[alert_id] = rec
            while len(self._records) > MAX_RECORDS:
                self._forget(next(iter(self._records.values())))
            frame = self.ring.last_at(t, within_s=self.chunk_s)
            if frame is None:
                rec.snapshot = "missing"
                self._warn(f"alert {alert_id} at {t:g} s: no frame of its chunk is held (frames dropped, or older "
                           f"than the ring's {self._ring_text()}): no snapshot")
            else:
                rec.snapshot_t_s = round(frame.t_s, 3)
                self._jobs.appendleft(("snapshot", rec, [frame]))  # snapshots before clips
            newest = self.ring.newest_t_s
            if self._ended or (newest is not None and newest >= rec.clip_span_s[1] - 1e-6):
                self._finish_clip(rec)
            else:
                self._recording.append(rec)
            if self.folder is not None:
                self._jobs.appendleft(("record", rec, []))
            self._start_worker()
            self._lock.notify_all()
        return dataclasses.replace(alert, alert_id=alert_id)

    def _finish_clip(self, rec: _Record) -> None:
        if rec in self._recording:
            self._recording.remove(rec)
        frames = self.ring.between(*rec.clip_span_s)
        if not frames:
            rec.clip = "missing"
            self._warn(f"alert {rec.alert_id} at {rec.t_s:g} s: no frames of [{rec.clip_span_s[0]:g}, "
                       f"{rec.clip_span_s[1]:g}] s are held (the ring holds {self._ring_text()}): no clip")
        elif self._clips_waiting >= MAX_CLIPS_WAITING:
            rec.clip = "missing"
            self._warn(f"alert {rec.alert_id}: {MAX_CLIPS_WAITING} clips are waiting for the encoder: this clip is "
                       f"not kept")
        else:
            rec.clip, rec.clip_frames = "encoding", len(frames)
            self._clips_waiting += 1
            self._jobs.append(("clip", rec, frames))
            self._start_worker()
        self._lock.notify_all()

    def _ring_text(self) -> str:
        span = self.ring.span_s
        return "no frames" if span is None else f"{span[0]:g}-{span[1]:g} s"

    # ---- reading (any thread) -----------------------------------------------------------------------------
    def list(self) -> list[dict]:
        """Every alert kept, oldest first: alert_id, trigger_id, condition, t_s, text, the states of its snapshot
        and clip (pending/recording, encoding, ready, missing, failed, dropped), the clip's span and bytes kept."""
        with self._lock:
            return [rec.describe() for rec in self._records.values()]

    def get(self, alert_id: str) -> dict:
        """One alert as `list` gives it; UnknownAlert for an id this stream does not have."""
        with self._lock:
            return self._record(alert_id).describe()

    def snapshot(self, alert_id: str, timeout_s: float = 0.0) -> bytes | None:
        """The JPEG of the frame the alert fired on, at the source's size; None while it is being made (waits up to
        `timeout_s` for it) or when there is none (`get` says why). UnknownAlert for an unknown id."""
        return self._media(alert_id, "snapshot", timeout_s)

    def clip(self, alert_id: str, timeout_s: float = 0.0) -> bytes | None:
        """The MP4 (H.264) of [t_s - before_s, t_s + after_s]; None while it records or encodes (waits up to
        `timeout_s`) or when there is none. UnknownAlert for an unknown id."""
        return self._media(alert_id, "clip", timeout_s)

    def thumbnail(self, alert_id: str, max_px: int = THUMBNAIL_PX, timeout_s: float = 0.0) -> bytes | None:
        """The snapshot as a small JPEG (at most `max_px` on its longer side), or None as for `snapshot`."""
        data = self.snapshot(alert_id, timeout_s)
        return None if data is None else smaller_jpeg(data, max_px)

    def files(self, alert_id: str) -> dict[str, str]:
        """With a folder: the paths its snapshot and clip are (or will be) written at, those that are not missing
        or failed; {} without a folder."""
        with self._lock:
            rec = self._record(alert_id)
            if self.folder is None:
                return {}
            return {kind: str(self._disk.path(alert_id, kind)) for kind in ("snapshot", "clip")
                    if getattr(rec, kind) not in ("missing", "failed", "dropped")}

    def frame_at(self, t_s: float) -> Frame | None:
        """The ring's frame nearest to stream time `t_s` (within half a frame period), at the source's size; None
        once it has left the ring."""
        with self._lock:
            return self.ring.nearest(t_s, within_s=0.5 / self.fps)

    def frame_jpeg(self, t_s: float, max_px: int | None = None) -> bytes | None:
        """`frame_at(t_s)` as a JPEG (at most `max_px` on its longer side), or None."""
        frame = self.frame_at(t_s)
        return None if frame is None else jpeg(frame.image, max_px=max_px)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every snapshot and clip that can be made now is made (a clip still recording is not
        waited for); False if `timeout_s` passed first."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._jobs and not self._busy, timeout_s)

    def stats(self) -> dict:
        with self._lock:
            span, ring_mb = self.ring.span_s, round(self.ring.nbytes / 2**20, 3)
            return {"alerts_kept": len(self._records), "ring_frames": len(self.ring), "ring_mb": ring_mb,
                    "ring_s": round(span[1] - span[0], 3) if span else 0.0,
                    "alert_media_mb": round(self.store_bytes / 2**20, 3), "clips_recording": len(self._recording),
                    "media_jobs_waiting": len(self._jobs), "alert_media_warnings": self.warnings}

    def close(self, timeout_s: float = 30.0) -> None:
        """End the input (clips are made of what has arrived), wait up to `timeout_s` for the encoder, then stop it
        and forget the frames (and the media held in RAM; files stay). Idempotent."""
        self.end_input()
        self.flush(timeout_s)
        with self._lock:
            self._closed = True
            self._jobs.clear()
            self.ring.clear()
            if self.folder is None:
                for rec in self._records.values():
                    rec.data.clear()
                self.store_bytes = 0
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    # ---- internals ---------------------------------------------------------------------------------------
    def _record(self, alert_id: str) -> _Record:
        rec = self._records.get(alert_id) if isinstance(alert_id, str) else None
        if rec is None:
            raise UnknownAlert(f"no alert {str(alert_id)[:40]!r} on this stream")
        return rec

    def _media(self, alert_id: str, kind: str, timeout_s: float) -> bytes | None:
        waiting = ("pending",) if kind == "snapshot" else ("recording", "encoding")
        with self._lock:
            rec = self._record(alert_id)
            self._lock.wait_for(lambda: getattr(rec, kind) not in waiting or self._closed, timeout_s)
            if getattr(rec, kind) != "ready":
                return None
            if self.folder is None:
                return rec.data.get(kind)
        return self._disk.read(alert_id, kind)

    def _warn(self, message: str) -> None:
        self.warnings += 1
        log.warning("%s", message)

    def _start_worker(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._work, name=THREAD_NAME, daemon=True)
            self._thread.start()

    def _work(self) -> None:
        try:  # encoding gives way to the engine's forwards (Linux: a thread's own niceness, inherited by x264's)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICENESS)
        except (AttributeError, OSError):
            pass
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._jobs or self._closed)
                if self._closed and not self._jobs:
                    return
                kind, rec, frames = self._jobs.popleft()
                self._busy = True
            try:
                self._do(kind, rec, frames)
            finally:
                with self._lock:
                    self._busy = False
                    if kind == "clip":
                        self._clips_waiting -= 1
                    self._lock.notify_all()

    def _do(self, kind: str, rec: _Record, frames: list[Frame]) -> None:
        """One job on the worker's thread: encode, then store (RAM or folder); a failure is one warning line."""
        try:
            if kind == "record":
                with self._lock:
                    identity = rec.identity()
                self._disk.write_record(rec.alert_id, identity)
                return
            if kind == "snapshot":
                data = jpeg(frames[0].image)
                size = len(data) if self._disk is None else self._disk.write(
                    rec.alert_id, kind, lambda part: part.write_bytes(data))
            elif self._disk is None:
                data = mp4_bytes(frames, self.fps)
                size = len(data)
            else:
                data, size = None, self._disk.write(rec.alert_id, kind, lambda part: write_mp4(frames, self.fps, part))
        except (OSError, ValueError) as e:
            with self._lock:
                if kind != "record":
                    setattr(rec, kind, "failed")
                where = f" to {self.folder}" if self.folder is not None else ""
                self._warn(f"alert {rec.alert_id}: its {kind} could not be written{where}: {str(e).splitlines()[0]}")
            return
        with self._lock:
            if rec.alert_id not in self._records or (self._closed and self.folder is None):
                if self._disk is not None:  # forgotten meanwhile
                    self._disk.remove(rec.alert_id, kind)
                return
            if self.folder is None:
                rec.data[kind] = data
            setattr(rec, kind, "ready")
            rec.nbytes += size
            self.store_bytes += size
            self._retain()

    def _retain(self) -> None:
        """Drop the oldest alerts' media until the store is within its cap."""
        for rec in list(self._records.values()):
            if self.store_bytes <= self.max_store_bytes:
                return
            if rec.nbytes:
                self._drop_media(rec)

    def _drop_media(self, rec: _Record) -> None:
        self.store_bytes -= rec.nbytes
        rec.nbytes = 0
        rec.data.clear()
        for kind in ("snapshot", "clip"):
            if getattr(rec, kind) == "ready":
                setattr(rec, kind, "dropped")
                if self._disk is not None:
                    self._disk.remove(rec.alert_id, kind)

    def _forget(self, rec: _Record) -> None:
        self._drop_media(rec)
        del self._records[rec.alert_id]

    def _open_folder(self) -> int:
        """Earlier alerts kept in the folder (a resumed session's): listed again, their media counted; returns the
        next alert number. An unusable folder is one warning: alerts go on, their files fail one line each."""
        try:
            earlier, next_number = self._disk.earlier()
        except OSError as e:
            self._warn(f"alert media: cannot use {self.folder}: {str(e).splitlines()[0]}; alerts go on without files")
            return 0
        for saved, sizes in earlier:
            try:
                rec = _Record(saved["alert_id"], str(saved["trigger_id"]), str(saved["condition"]),
                              float(saved["t_s"]), str(saved["text"]), tuple(saved["clip_span_s"]),
                              snapshot_t_s=saved.get("snapshot_t_s"))
            except (KeyError, TypeError, ValueError):
                continue  # damaged: left alone
            for kind, size in sizes.items():
                setattr(rec, kind, "missing" if size is None else "ready")
                rec.nbytes += size or 0
            self._records[rec.alert_id] = rec
            self.store_bytes += rec.nbytes
        return next_number
