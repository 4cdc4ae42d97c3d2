"""The sessions of one `streamvid demo` server: one per browser tab or API client, all on one loaded model.

    manager = SessionManager(EngineConfig(), policy, idle_timeout_s=600)  # loads the model once: one engine
    manager.call(key, client, lambda s: s.start("shapes_7"))   # the session is kept only if the call succeeds
    manager.get(key)                                            # None when there is none
    manager.close(key)                                          # tab closed; idle ones are closed by the reaper

Thread contract: any thread; `_lock` guards the session table and is never held while a session stops; one
reaper thread ("streamvid-app-reaper") closes idle sessions and keeps the upload folders under their quota.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from streamvid.adapters.base import VideoLLMAdapter
from streamvid.engine import Engine
from streamvid.periodic import Periodic
from streamvid.config import EngineConfig
from streamvid_app.inputs import InputPolicy
from streamvid_app.sessions import Session, SessionLimitError
from streamvid_app.uploads import UploadFolders

T = TypeVar("T")


class SessionManager:
    """Sessions by key (the login user and gradio's session hash: one per browser tab or API client), each a stream
    on one shared engine (one loaded model, one scheduler batching the sessions' work). A session is made only by
    a call that succeeds (`call`), and one client (a login user, or an address without login) holds at most
    `max_sessions_per_client` of the `max_sessions` slots (at most the engine's streams), so a client that opens
    many cannot lock the others out."""

    def __init__(self, config: EngineConfig, policy: InputPolicy, adapter: VideoLLMAdapter | None = None,
                 max_sessions: int | None = None, idle_timeout_s: float = 600.0, reap_every_s: float = 10.0,
                 max_sessions_per_client: int | None = None, upload_quota_mb: float = 2048.0,
                 engine: Engine | None = None):
        # `engine`: an engine of the caller's (streamvid serve --ui), shared with its streams and not closed here
        self.engine = engine if engine is not None else Engine(config, adapter)
        self._own_engine = engine is None
        self.engine.start()  # warmed up and scheduling before the first session opens a (live) source
        max_sessions = self.engine.max_streams if max_sessions is None else min(max_sessions, self.engine.max_streams)
        per_client = max(1, max_sessions // 2) if max_sessions_per_client is None else max_sessions_per_client
        if max_sessions < 1 or per_client < 1 or idle_timeout_s <= 0 or reap_every_s <= 0:
            raise ValueError(f"expected max_sessions >= 1, max_sessions_per_client >= 1, idle_timeout_s > 0 and "
                             f"reap_every_s > 0, got {max_sessions}, {per_client}, {idle_timeout_s}, {reap_every_s}")
        self.config, self.policy = config, policy
        self.adapter = self.engine.adapter
        self.max_sessions, self.idle_timeout_s = max_sessions, idle_timeout_s
        self.max_sessions_per_client = min(per_client, max_sessions)
        self.uploads = UploadFolders(policy.upload_dirs, upload_quota_mb)
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._reaper = Periodic(self._reap_round, reap_every_s, name="streamvid-app-reaper",
                                what="closing idle sessions or trimming uploads")

    def get(self, key: str) -> Session | None:
        with self._lock:
            return self._sessions.get(key)

    def session(self, key: str, client: str = "") -> Session:
        """The session for `key`, made on first use; SessionLimitError when all slots, or all of this client's,
        are taken."""
        return self._session(key, client)[0]

    def call(self, key: str, client: str, fn: Callable[[Session], T]) -> T:
        """`fn(session)` on the session for `key`, made for this call if there is none; a call that fails leaves
        no session of its own behind (nor takes a slot)."""
        s, made = self._session(key, client)
        try:
            return fn(s)
        except BaseException:
            if made and not s.in_use():
                with self._lock:
                    if self._sessions.get(key) is s:
                        del self._sessions[key]
                s.close()
            raise

    def _session(self, key: str, client: str) -> tuple[Session, bool]:
        with self._lock:
            s = self._sessions.get(key)
            if s is not None:
                return s, False
            if len(self._sessions) >= self.max_sessions:
                raise SessionLimitError(f"streamvid is serving its maximum of {self.max_sessions} sessions; "
                                        f"close another tab or try again in a few minutes")
            if client and sum(o.client == client for o in self._sessions.values()) >= self.max_sessions_per_client:
                raise SessionLimitError(f"this client already has {self.max_sessions_per_client} sessions, the most "
                                        f"one client may hold; stop one (or close its tab) first")
            s = self._sessions[key] = Session(key, self.config, self.engine, self.policy, client=client,
                                              uploads=self.uploads)
            return s, True

    def sessions(self) -> list[Session]:
        with self._lock:
            return list(self._sessions.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def close(self, key: str) -> bool:
        with self._lock:
            s = self._sessions.pop(key, None)
        if s is not None:
            s.close()
        return s is not None

    def reap(self, now_s: float | None = None) -> list[str]:
        """Close the sessions idle for longer than idle_timeout_s at `now_s` (monotonic); returns their keys."""
        now_s = time.monotonic() if now_s is None else now_s
        with self._lock:
            idle = [k for k, s in self._sessions.items() if now_s - s.last_active_s > self.idle_timeout_s]
            closing = [self._sessions.pop(k) for k in idle]
        for s in closing:
            s.close()
        return idle

    def shutdown(self) -> None:
        self._reaper.stop(timeout_s=5.0)
        with self._lock:
            closing, self._sessions = list(self._sessions.values()), {}
        for s in closing:
            s.close()
        if self._own_engine:
            self.engine.close()

    def _reap_round(self) -> None:  # a failed round is logged by Periodic; the next one runs all the same
        self.reap()
        self.uploads.trim(in_use=self.uploads_in_use())

    def uploads_in_use(self) -> set[str]:
        """The uploaded videos that running streams play."""
        return {spec for s in self.sessions() if (spec := s.upload_playing()) is not None}
