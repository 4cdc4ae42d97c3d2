"""The sessions of the web page: one per browser tab or API client, each a client of one hub (streamvid.hub).

    manager = SessionManager.standalone(EngineConfig(), HubOptions(), upload_dirs=[...])  # `streamvid demo`
    manager = SessionManager(hub, policy)                      # on a hub of the caller's (`streamvid serve --ui`)
    manager.call(key, client, lambda s: s.start("shapes_7"))   # the session is kept only if the call succeeds
    manager.get(key)                                            # None when there is none
    manager.close(key)                                          # tab closed; idle ones are closed by the reaper

The sessions are held in the hub's kind of registry (streamvid.hub.registry: caps per client, idle reaping) and
their streams are the hub's. A session idle for the hub's `stream_idle_timeout_s` (`--stream-idle-timeout-s`,
`streamvid demo --stream-idle-timeout-s`) is closed, as an idle stream of an HTTP client is.

Thread contract: any thread; the registry's lock is never held while a session stops; one reaper thread
("streamvid-app-reaper") closes idle sessions and keeps the upload folders under their quota.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from streamvid.config import EngineConfig
from streamvid.engine.engine import Engine
from streamvid.hub.hub import Hub
from streamvid.hub.options import HubOptions
from streamvid.hub.policy import SourcePolicy
from streamvid.hub.registry import Registry
from streamvid.periodic import Periodic
from streamvid_app.inputs import page_policy
from streamvid_app.sessions import Session
from streamvid_app.uploads import UploadFolders

T = TypeVar("T")


class SessionManager:
    """Sessions by key (the login user and gradio's session hash: one per browser tab or API client), each
    opening its streams on the hub. A session is made only by a call that succeeds (`call`), and one client (a login
    user, or an address without login) holds at most `max_sessions_per_client` of the `max_sessions` slots (at most
    the engine's streams), so a client that opens many cannot lock the others out."""

    def __init__(self, hub: Hub, policy: SourcePolicy | None = None, max_sessions: int | None = None,
                 max_sessions_per_client: int | None = None, reap_every_s: float | None = None,
                 upload_quota_mb: float = 2048.0, voice=None):
        engine = hub.engine
        max_sessions = engine.max_streams if max_sessions is None else min(max_sessions, engine.max_streams)
        per_client = max(1, max_sessions // 2) if max_sessions_per_client is None else max_sessions_per_client
        idle_s = hub.options.stream_idle_timeout_s  # None: never
        if reap_every_s is None:  # as the hub looks for idle streams: a tenth of the timeout, 0.05 s to 10 s
            reap_every_s = min(10.0, max(0.05, idle_s / 10)) if idle_s else 10.0
        if max_sessions < 1 or per_client < 1 or reap_every_s <= 0:
            raise ValueError(f"expected max_sessions >= 1, max_sessions_per_client >= 1 and reap_every_s > 0, got "
                             f"{max_sessions}, {per_client}, {reap_every_s}")
        self.hub, self.engine, self.config, self.adapter = hub, engine, hub.config, engine.adapter
        self.policy = policy if policy is not None else page_policy(hub)
        self.idle_timeout_s = idle_s
        self.max_sessions, self.max_sessions_per_client = max_sessions, min(per_client, max_sessions)
        self.uploads = UploadFolders(self.policy.upload_dirs, upload_quota_mb)
        self.voice = voice  # a streamvid.audio.voices.Voice the sessions speak their answers with (voice.py), or None
        self._sessions: Registry[Session] = Registry("session", max_sessions, self.max_sessions_per_client)
        self._own_hub: Hub | None = None  # the hub `standalone` made: shut down with its engine at shutdown
        self._reaper = Periodic(self._reap_round, reap_every_s, name="streamvid-app-reaper",
                                what="closing idle sessions or trimming uploads")

    @classmethod
    def standalone(cls, config: EngineConfig, options: HubOptions | None = None, adapter=None,
                   policy: SourcePolicy | None = None, upload_dirs=(), max_upload_mb: float = 200.0,
                   operator_video: str | None = None, **kwargs) -> SessionManager:
        """A manager on a hub and engine of its own (one model loaded), closed with it: `streamvid demo`. The page's
        policy: `policy`, else the hub's with `upload_dirs` (of files up to `max_upload_mb`) and the operator's
        --video."""
        engine = Engine(config, adapter)
        hub = None
        try:
            hub = Hub(engine, options)
            policy = policy or page_policy(hub, upload_dirs, max_upload_mb, operator_video)
            manager = cls(hub, policy, **kwargs)
        except BaseException:
            if hub is not None:
                hub.shutdown()
            engine.close()
            raise
        manager._own_hub = hub
        return manager

    def get(self, key: str) -> Session | None:
        return self._sessions.get(key, touch=False)

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
            if made and not s.in_use() and self._sessions.pop(key, s) is not None:
                s.close()
            raise

    def _session(self, key: str, client: str) -> tuple[Session, bool]:
        s = self._sessions.get(key, touch=False)
        if s is not None:
            return s, False
        s = Session(key, self.hub, self.policy, client=client, uploads=self.uploads, voice=self.voice)
        return self._sessions.add(key, s), True

    def sessions(self) -> list[Session]:
        return self._sessions.values()

    def __len__(self) -> int:
        return len(self._sessions)

    def close(self, key: str) -> bool:
        s = self._sessions.pop(key)
        if s is not None:
            s.close()
        return s is not None

    def reap(self, now_s: float | None = None) -> list[str]:
        """Close the sessions idle for longer than idle_timeout_s at `now_s` (monotonic); returns their keys."""
        if not self.idle_timeout_s:
            return []
        idle = self._sessions.take_idle(now_s, self.idle_timeout_s)
        for s in idle:
            s.close()
        return [s.key for s in idle]

    def shutdown(self) -> None:
        self._reaper.stop(timeout_s=5.0)
        for s in self._sessions.take_all():
            s.close()
        if self._own_hub is not None:
            self._own_hub.shutdown()
            self.engine.close()

    def _reap_round(self) -> None:  # a failed round is logged by Periodic; the next one runs all the same
        self.reap()
        self.uploads.trim(in_use=self.uploads_in_use())

    def uploads_in_use(self) -> set[str]:
        """The uploaded videos that running streams play."""
        return {spec for s in self.sessions() if (spec := s.upload_playing()) is not None}
