"""Session folders: a stream's snapshots (streamvid.assistant.session_store) in a folder it holds for as long as it
runs: resumed from there when the folder holds a session, saved there periodically and once more at the end. One
lifecycle for both users: the hub's streams (a `session_dir` inside an --allow-dir folder, saved every
`HubOptions.session_save_s` and when the stream closes; resumed by the same server after a restart, or by another Ray
replica after the one that held it died) and `streamvid run --session DIR [--autosave-s S]`.

    folders = SessionFolders(policy.allow_dirs, save_every_s=60.0)
    folder = folders.resolve("/srv/streamvid/cam1")   # NotAllowed unless inside an --allow-dir folder
    session = folders.claim(folder, resume=True)       # the folder's lock; NotFound / Conflict saying why not
    session = StreamSession.take(Path("s1"), 30.0)      # (`streamvid run`: any folder; resumed when it holds one)
    sa = session.assistant(config, engine)             # a fresh StreamingAssistant, or the saved one resumed
    session.start_autosave(sa)
    ...
    session.save_final(sa)                             # (then sa.stop()) the last snapshot, never raising
    session.release()

A folder is used by one stream at a time (session_lock.SessionLock: a flock that the kernel drops when a process
dies, so the folder of a dead replica's stream can be claimed at once), and no stream's folder may lie inside
another live stream's, or hold one (`refuse_nesting`: the same lock, looked at one folder up or down, so it holds
across processes and replicas). The ids of streams with a folder carry `SESSION_MARK` right after their server's
prefix (`vs-s1a2b...`, `r0.3f9c2e-s1a2b...`), so an error about a stream whose replica died can say that it can be
resumed without asking anyone (`resumable`).

Thread contract: `SessionFolders` is immutable. A `StreamSession` belongs to one stream: its autosave thread and
the hub's threads may call `info` at any time; `save_final` once, from the thread closing the stream; `release` from
any thread (the first call releases; a stream whose source failed to open releases its folder at once).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from streamvid.assistant import session_lock, session_store
from streamvid.errors import Conflict, NotAllowed, NotFound, Refused

log = logging.getLogger(__name__)

SESSION_MARK = "s"  # after the id prefix: the stream has a session folder (stream tokens are hex: no "s")
MAX_PATH = 1000
LOCK_FILE = ".lock"  # a session folder's lock file (session_lock.SessionLock)


def resumable(sid: str) -> bool:
    """Whether the stream id names a stream that was opened with a session folder."""
    return isinstance(sid, str) and sid.partition("-")[2].startswith(SESSION_MARK)


class SessionFolders:
    """Where streams may keep sessions: folders inside the server's --allow-dir folders."""

    def __init__(self, allow_dirs: tuple[Path, ...], save_every_s: float | None):
        self.allow_dirs = tuple(Path(d).resolve() for d in allow_dirs)
        self.save_every_s = save_every_s or None

    def resolve(self, spec: object) -> Path:
        """The folder `spec` names, resolved; Refused for a malformed value, NotAllowed outside the allowed
        folders."""
        if not isinstance(spec, str) or not spec.strip():
            raise Refused('"session_dir" must be the absolute path of a folder inside an --allow-dir folder')
        if len(spec) > MAX_PATH or "\x00" in spec:
            raise Refused(f'"session_dir" must be a path of at most {MAX_PATH} characters')
        path = Path(spec.strip())
        if not path.is_absolute():
            raise Refused(f'"session_dir" must be an absolute path, got {spec[:200]!r}')
        if not self.allow_dirs:
            raise NotAllowed("this server keeps no sessions: it was started without --allow-dir")
        real = path.resolve()
        if not any(real != d and real.is_relative_to(d) for d in self.allow_dirs):
            raise NotAllowed(f"session_dir {spec[:200]!r} is not inside a folder this server allows; use a folder "
                            f"under {', '.join(str(d) for d in self.allow_dirs)}")
        if real.exists() and not real.is_dir():
            raise Refused(f"session_dir {spec[:200]!r} is a file, not a folder")
        return real

    def claim(self, folder: Path, resume: bool) -> StreamSession:
        """The folder for one stream: locked, and holding a saved session exactly when `resume` says so."""
        if resume and not session_store.has_session(folder):
            raise NotFound(f"no saved session in {folder}: open the stream without \"resume\" to start one there")
        try:
            lock = session_lock.SessionLock(folder)
        except session_store.SnapshotError:
            raise Conflict(f"session_dir {folder} is in use by another stream: close that stream first, or use "
                           f"another folder") from None
        except OSError as e:
            raise Refused(f"session_dir {folder} cannot be used: {e.strerror or e}") from None
        try:
            refuse_nesting(folder)
        except Conflict:
            lock.release()
            raise
        if not resume and session_store.has_session(folder):
            lock.release()
            raise Conflict(f"session_dir {folder} holds a saved session: pass \"resume\": true to continue it, or "
                           f"use another folder")
        return StreamSession(folder, lock, resume, self.save_every_s)


def refuse_nesting(folder: Path) -> None:
    """Conflict when `folder` (resolved, its own lock held) lies inside the session folder of another live stream,
    or holds one: a save of either would remove the other's snapshots. A live stream is one that holds its folder's
    session lock, in this process or any other on the filesystem (another Ray replica, another server), so this
    is the same check as "in use", one folder up or down. Checked after taking `folder`'s own lock: of two streams
    claiming a folder and one inside it at the same moment, at least one sees the other."""
    for parent in folder.parents:
        if held(parent):
            raise Conflict(f"session_dir {folder} is inside {parent}, the session folder of another stream: their "
                           f"saves would destroy each other's; use a folder outside it")
    for root, dirs, files in os.walk(folder, onerror=lambda e: None):  # symbolic links are not followed
        dirs.sort()
        inner = Path(root)
        if inner != folder and LOCK_FILE in files and held(inner):
            raise Conflict(f"session_dir {folder} holds {inner}, the session folder of another stream: their saves "
                           f"would destroy each other's; use a folder that holds no other stream's folder")


def held(folder: Path) -> bool:
    """Whether a stream holds `folder`'s session lock now (session_lock.SessionLock, from any process)."""
    if not (folder / LOCK_FILE).is_file():
        return False
    try:
        probe = session_lock.SessionLock(folder)
    except session_store.SnapshotError:
        return True
    except OSError:  # a folder this process cannot open is no stream's of this server
        return False
    probe.release()
    return False


class StreamSession:
    """One stream's session folder: its lock, its autosaves, its last snapshot."""

    def __init__(self, folder: Path, lock: session_lock.SessionLock, resume: bool, save_every_s: float | None):
        self.folder = folder
        self.resume = resume
        self.save_every_s = save_every_s
        self._lock: session_lock.SessionLock | None = lock
        self._autosaver: session_lock.Autosaver | None = None
        self._mutex = threading.Lock()
        self.saves = 0
        self.last: dict | None = None  # what the last save returned (session_store.save)
        self.error: str | None = None  # why the last save failed

    @classmethod
    def take(cls, folder: Path, save_every_s: float | None = None) -> StreamSession:
        """Any folder, for one process's stream (`streamvid run --session`): made if missing and locked
        (session_store.SnapshotError, one line, while another process holds it); resumed when it holds a saved
        session, else started there."""
        lock = session_lock.SessionLock(folder)
        return cls(folder, lock, session_store.has_session(folder), save_every_s)

    def assistant(self, config, engine=None):
        """A new StreamingAssistant on `engine` (None: one of its own): the saved session continued (its window,
        memory, clock and dialogue) when resuming, else a fresh one. session_store.SnapshotError (one line) for a
        snapshot that cannot be resumed."""
        from streamvid.assistant.assistant import StreamingAssistant

        if not self.resume:
            return StreamingAssistant(config, engine=engine)
        return StreamingAssistant.resume(self.folder, config, engine=engine)

    def start_autosave(self, sa) -> None:
        if self.save_every_s:
            self._autosaver = session_lock.Autosaver(lambda: self._save(sa), self.save_every_s)

    def stop_autosave(self) -> None:
        """No more periodic saves (the one under way finishes first)."""
        if self._autosaver is not None:
            self._autosaver.stop()

    @property
    def autosaves(self) -> int:
        """Periodic saves done so far (the final save not counted)."""
        return self._autosaver.saves if self._autosaver is not None else 0

    def _save(self, sa) -> dict:
        try:
            saved = sa.save(self.folder)
        except Exception as e:
            with self._mutex:
                self.error = f"{type(e).__name__}: {e}"
            raise
        with self._mutex:
            self.saves += 1
            self.last, self.error = saved, None
        return saved

    def save_final(self, sa) -> None:
        """Stop the autosaves and save once more; a failure is logged and kept in `info()`."""
        self.stop_autosave()
        try:
            self._save(sa)
        except Exception as e:  # noqa: BLE001 - the stream closes anyway; the previous snapshot stays
            log.warning("saving the session of a closing stream into %s failed: %s", self.folder, e)

    def release(self) -> None:
        """Give the folder's lock back; once (later calls, from any thread, do nothing)."""
        with self._mutex:
            lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def info(self) -> dict:
        with self._mutex:
            last = self.last
            return {"dir": str(self.folder), "resumed": self.resume, "saves": self.saves,
                    "saved_t_s": last["stream_t_s"] if last else None, "error": self.error}
