"""StreamingAssistant: one stream on an engine, fed from a source, answering questions and watching for events.

    with StreamingAssistant(EngineConfig.from_settings(model=...)) as sa:
        sa.start(open_source("clip.mp4", fps=2.0, realtime=True))
        qid = sa.ask("What colour is the circle?")
        tid = sa.watch("a blue star")                      # a standing trigger: an "alert" when it holds
        for out in sa.outputs(timeout_s=5.0):
            print(out.to_json())

By default an assistant has an engine (engine.py) of its own; `StreamingAssistant(config, engine=engine)` puts it
on a shared one, whose scheduler batches its work with the other streams'.

Thread contract: `start`, `ask`, `watch`, `schedule`, `unwatch`, `triggers`, `outputs`, `stats` and `stop` are for the
caller's thread(s). `ask` only puts on the stream's bounded questions queue and `watch`/`unwatch` only change the
trigger set (see triggers.TriggerSet); answers, tokens, alerts and narration come back on the outputs queue. An
exception in this stream's work closes it and is re-raised by `outputs()` (and `stop()`). `run_simulated` steps
the engine on the caller's thread, in stream order, for reproducible replays; it must not be mixed with `start`.
`save(dir)` may be called from any thread, also while the engine runs (saves are serialised); `resume(dir)` makes
a new assistant from a saved session (see session_store). `keep_alert_media()` keeps the frame and clip behind each
alert from then on (alert_media.py), from any thread; best before `start`, so that the source hands over every frame.
"""

from __future__ import annotations

import queue
import resource
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Self

import torch

from streamvid.adapters.base import VideoLLMAdapter
from streamvid.adapters.embedders import embedder_name
from streamvid.assistant import session_state, session_store
from streamvid.assistant.hearing import Hearing, hearing_for
from streamvid.assistant.simulated import SimulatedRun
from streamvid.config import EngineConfig
from streamvid.engine.engine import Engine
from streamvid.engine.reasoning import Reasoning
from streamvid.engine.stream import BusyError
from streamvid.kv.budget import Budgets, budgets
from streamvid.kv.memory import LongTermMemory
from streamvid.language.asked import Question
from streamvid.media.alert_media import AlertMedia
from streamvid.types import Frame, Output, Status

__all__ = ["BusyError", "StreamingAssistant"]


MEDIA_CLOSE_TIMEOUT_S = 30.0  # stop() waits this long at most for alert clips still being written to a folder


class StreamingAssistant(SimulatedRun):
    """One stream on an engine: its own engine (and model) by default, or a shared one (`engine`)."""

    def __init__(self, config: EngineConfig | None = None, adapter: VideoLLMAdapter | None = None,
                 engine: Engine | None = None):
        self.config = config = config or (engine.config if engine is not None else EngineConfig())
        self.engine = engine or Engine(config, adapter)
        self._own_engine = engine is None
        self.adapter = self.engine.adapter
        self.stream = self.engine.open(config)
        self.embedder = self.engine.embedder
        self.window = self.stream.window
        self.ingest = self.stream.ingest
        self.reasoning = self.stream.reasoning
        self._outputs = self.stream.outputs
        self._error_reported = False
        self._reader: threading.Thread | None = None
        self.hearing: Hearing | None = None  # the stream's sound, when it has one (hearing.py)
        self._stopped = threading.Event()
        self._save_lock = threading.Lock()
        self.alert_media: AlertMedia | None = None  # the evidence behind alerts, once keep_alert_media is called
        self._full_frames = False  # the source hands alert_media its frames at full size (else the reader does)

    @property
    def memory(self) -> LongTermMemory | None:
        return self.stream.memory

    @property
    def ingest_done(self) -> threading.Event:
        """Set once the input has ended, failed or been stopped (every frame taken in is encoded)."""
        return self.stream.ended

    # ---- live use ---------------------------------------------------------------------------------------
    def start(self, source) -> None:
        """Read `source` on a thread ("streamvid-ingest") into the stream; the engine's scheduler does the rest."""
        if self._reader is not None:
            raise RuntimeError("this assistant is already running; create a new one for another stream")
        self.ingest.source = source
        self._tap(source)
        if hasattr(source, "on_status"):  # a camera/URL reports when it drops and comes back
            source.on_status = self._source_status
        self.hearing = hearing_for(self.config, source, self.stream, replay=not getattr(source, "live", True))
        self.engine.start()
        self._reader = threading.Thread(target=self._read, args=(source,), name="streamvid-ingest", daemon=True)
        self._reader.start()

    def ask(self, text: str, t_s: float | None = None, dialogue: list[tuple[str, str]] | None = None) -> str:
        """Queue a question about the stream so far; returns its id. `dialogue`: earlier (question, answer) turns
        to answer with instead of the session's own. Raises BusyError when the queue is full."""
        self._raise_error()
        return self.stream.ask(text, t_s, dialogue=dialogue)

    def watch(self, condition: str, **thresholds) -> str:
        """Start a standing trigger; returns its id ("w0", "w1", ...).

        `condition` is a phrase ("a blue star", "a blue star appears", "the circle turns red"), a yes/no
        question ("Is there a blue star?") or a request ("Tell me when a blue star appears"); it becomes one
        yes/no probe about the current moment (see future.probe_for), asked on each new chunk. An {"type":
        "alert"} output comes each time it fires. `thresholds` override the firing rule's defaults: fire, reset,
        k, cooldown_s (proactive.Thresholds; defaults from EngineConfig.trigger_*)."""
        self._raise_error()
        return self.stream.watch(condition, **thresholds)

    def schedule(self, t_s: float, text: str, watch: bool = False) -> None:
        """Ask `text` (with `watch`: start watching it) once the stream reaches stream time `t_s`."""
        self.stream.schedule(t_s, text, watch)

    def probe(self, text: str, t_s: float = 0.0) -> Output:
        """p(yes) for a yes/no question about the window now, at once on this thread (a ProbeResult)."""
        return self.reasoning.probe(Question("probe", text, t_s))

    def keep_alert_media(self, folder: str | Path | None = None) -> AlertMedia:
        """From now on keep the evidence of each alert: the frame it fired on and a clip around it, at the source's
        size (EngineConfig.alert_media: seconds before and after, MB of recent frames and of stored media). Alerts
        then carry an "alert_id" under which `alert_media.snapshot(id)`, `.clip(id)` and `.list()` find them. In
        RAM, or written into `folder`/<alert_id>/ (snapshot.jpg, clip.mp4, alert.json) when given; a folder that
        holds earlier alerts (a resumed session's) lists them too and ids continue after them. Returns the store;
        calling again returns the same one."""
        if self.alert_media is None:
            self.alert_media = AlertMedia.for_config(self.config, folder)
            self.stream.on_alert = self.alert_media.record
            if self.ingest.source is not None:
                self._tap(self.ingest.source)
        return self.alert_media

    def unwatch(self, trigger_id: str) -> bool:
        """Stop a trigger (one from `watch`, or one made from a "tell me when" question); False if none is active
        under that id."""
        return self.stream.unwatch(trigger_id)

    def triggers(self) -> list[dict]:
        """The active triggers: id, condition, probe, thresholds, last score, armed, alerts so far."""
        return [tr.describe() for tr in self.reasoning.triggers.active()]

    def outputs(self, timeout_s: float = 1.0) -> Iterator[Output]:
        """Yield outputs as they arrive; return once none arrived for `timeout_s`. Re-raises a worker error."""
        while True:
            self._raise_error()
            try:
                yield self._outputs.get(timeout=timeout_s)
            except queue.Empty:
                self._raise_error()
                return

    def stop(self, save_to: str | Path | None = None) -> dict | None:
        """Stop reading the input (bounded join), save the session into `save_to` when given (what `save`
        returns is returned), close the stream (and its own engine) and the source, and re-raise an error
        that `outputs()` has not reported yet. Safe to call twice."""
        self._stopped.set()
        source = self.ingest.source
        if self._reader is not None:
            if source is not None:
                source.close()  # ends a read that waits for a frame
            self._reader.join(timeout=self.config.join_timeout_s)
        if self.hearing is not None:
            self.hearing.close()
        if self.alert_media is not None:  # files are finished (bounded wait); media in RAM go with the stream
            self.alert_media.close(timeout_s=MEDIA_CLOSE_TIMEOUT_S if self.alert_media.folder is not None else 0.0)
        saved = None
        try:
            if save_to is not None:  # consistent even while the scheduler commits a block (ingest's lock)
                saved = self.save(save_to)
        finally:
            self.stream.close()
            if self._own_engine:
                self.engine.close()
            elif not self.engine.running:
                self.engine.step()  # drops the closed stream (and closes its memory) where no scheduler runs
            if source is not None:
                source.close()
        if not self._error_reported:
            self._raise_error()
        return saved

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- stepping -----------------------------------------------------------------------------------------
    def insert(self, frame: Frame) -> None:
        """Hand one frame to the stream (waits while its inbox is full). With no scheduler thread running (no
        `start`), the caller steps the engine: `engine.run_until_idle()`."""
        self._offer(frame)
        self.stream.insert(frame)

    def feed(self, frames: Iterable[Frame], finish: bool = False) -> None:
        """Insert `frames` and step the engine after each until it is idle (no scheduler thread may run); with
        `finish`, the input ends after them (the last chunk is encoded short)."""
        for frame in frames:
            self._offer(frame)
            self.stream.insert(frame)
            self.engine.run_until_idle()
        if finish:
            if self.alert_media is not None:
                self.alert_media.end_input()
            self.stream.finish()
            self.engine.run_until_idle()
        self._raise_error()

    # ---- sessions -----------------------------------------------------------------------------------------
    @property
    def stream_t_s(self) -> float:
        """The session's stream time so far: where the newest frame ends (one frame period after it), or where
        this run started. A resumed session's next input starts here."""
        snap = self.window.snapshot()
        ends = [self.stream.clock.start_s] + ([snap.blocks[-1].t_end_s] if snap.blocks else [])
        if self.ingest.frames_in:
            ends.append(self.ingest.latest_t_s + 1.0 / self.config.fps)
        return max(ends)

    def reasoner(self, config: EngineConfig, memory: bool = True) -> Reasoning:
        """Another reasoning on this stream (its window, its memory unless `memory` is False) answering with
        `config`: how bench answers the same window with and without retrieval."""
        return Reasoning(config, self.adapter, self.window, self.memory if memory else None, self.embedder)

    @property
    def latest_t_s(self) -> float:
        """Stream time of the newest frame taken in (where this run started, before its first frame)."""
        return self.ingest.latest_t_s

    @property
    def ended(self) -> bool:
        """The input has ended, failed or been stopped: no more frames are taken in."""
        return self.ingest_done.is_set()

    def ingest_stats(self) -> dict:
        """Frames in and dropped, blocks encoded, source outages: the ingest part of `stats()`, cheap enough to
        report with every pushed frame."""
        return self.ingest.stats()

    @property
    def stream_offset_s(self) -> float:
        """Session time at which this run's input started: 0 for a fresh session."""
        return self.stream.clock.start_s

    def save(self, directory: str | Path) -> dict:
        """Snapshot the session into `directory` atomically (window, long-term memory, stream clock, dialogue);
        a crash at any point leaves the previous snapshot there loadable. Returns what was written
        (session_store.save). Frames of a chunk not yet encoded are not part of the snapshot."""
        with self._save_lock:
            return session_store.save(self.stream_state, directory)

    def stream_state(self, memory_folder: Path) -> session_store.StreamState:
        """The stream at one cut, for a snapshot (session_state.state_at_cut): window, clock, block ids and
        dialogue, with long-term memory written into `memory_folder` at the same cut."""
        return session_state.state_at_cut(self.stream, lambda: self.stream_t_s, memory_folder)

    @classmethod
    def resume(cls, directory: str | Path, config: EngineConfig | None = None,
               adapter: VideoLLMAdapter | None = None, engine: Engine | None = None) -> StreamingAssistant:
        """A new assistant that continues the session saved in `directory`: the same window and long-term
        memory, stream time continuing where it stopped, the recent dialogue. `config` defaults to the saved
        one; its model and embedder must be the saved ones. `engine`: the engine to continue it on (default: one of
        its own). Raises session_store.SnapshotError (a ValueError) with
        a one-line message for a missing, damaged or foreign snapshot."""
        meta = session_store.read_meta(directory)
        saved = config is None
        config = config or session_store.config_from(meta)
        session_store.check_model(directory, meta, config.model)
        session_store.check_embedder(directory, meta, embedder_name(config.memory.embedder))
        snap = session_store.load(directory, meta=meta)
        try:
            sa = cls(config, adapter, engine)
        except ValueError as e:
            if not saved:
                raise
            raise session_store.SnapshotError(f"session {directory} is damaged: its saved settings do not run with "
                                              f"this model ({e}); use another --session folder") from None
        try:
            session_state.restore(sa.stream, directory, snap)
        except BaseException:
            sa.stop()
            raise
        return sa

    def stats(self) -> dict:
        snap = self.window.snapshot()
        mem = self.memory.stats() if self.memory is not None else None
        peak = (torch.cuda.max_memory_allocated() / 2**20 if self.adapter_device_is_cuda
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        return {
            **self.ingest.stats(),
            "blocks_in_window": len(snap.blocks),
            "window_tokens": sum(b.n_tokens for b in snap.blocks),
            "sink_tokens": snap.sinks.n_tokens,
            "window_mb": round(sum(b.nbytes for b in (snap.sinks, *snap.blocks)) / 2**20, 3),
            "blocks_in_memory": mem.blocks if mem else 0,
            "blocks_in_ram": mem.blocks_in_ram if mem else 0,
            "blocks_on_disk": mem.blocks_on_disk if mem else 0,
            "memory_ram_mb": round(mem.ram_mb, 3) if mem else 0.0,
            "memory_disk_mb": round(mem.disk_mb, 3) if mem else 0.0,
            "memory_dropped": mem.dropped if mem else 0,
            "memory_index_rows": mem.index_rows if mem else 0,
            "questions_answered": self.reasoning.answered,
            "audio_s_in": self.hearing.stats()["audio_s_in"] if self.hearing is not None else 0.0,
            "utterances": self.stream.utterances,
            "speech_blocks": self.ingest.speech_blocks,
            "batch_fallbacks": self.engine.batch_fallbacks,  # the engine's, all its streams together
            **self.reasoning.stats(),
            **(self.alert_media.stats() if self.alert_media is not None else {}),
            "peak_memory_mb": round(peak, 1),
            "peak_memory_kind": "cuda" if self.adapter_device_is_cuda else "host_rss",
        }

    def limits(self) -> dict:
        """What one request may cost this stream (streamvid/engine/limits.py), and the engine's prefill tokens per
        step."""
        g, t = self.config.generation, self.config.triggers
        return {"max_question_tokens": g.max_question_tokens, "max_dialogue_tokens": g.max_dialogue_tokens,
                "max_condition_tokens": t.max_condition_tokens, "max_watches": t.max_watches,
                "step_tokens": self.engine.step_tokens}

    def budgets(self, height: int, width: int) -> Budgets:
        """What the configured window and memory mean for this model at frames of height x width
        (`Budgets.describe()` is the line `streamvid run` logs)."""
        tokens = self.adapter.tokens_per_chunk(height, width, self.config.frames_per_chunk)
        return budgets(self.adapter.kv_shape, tokens, self.config)

    @property
    def adapter_device_is_cuda(self) -> bool:
        device = getattr(self.adapter, "device", None)
        return device.type == "cuda" if isinstance(device, torch.device) else self.config.device.startswith("cuda")

    # ---- internals --------------------------------------------------------------------------------------
    def _read(self, source) -> None:
        """The reader thread: frames from the source into the stream until the input ends or the stream stops."""
        try:
            while not self._stopped.is_set() and not self.stream.closed:
                try:
                    frame = source.read(timeout_s=self.config.read_timeout_s)
                except TimeoutError:
                    continue  # a live source with nothing new yet
                if frame is None:
                    break
                self._offer(frame)
                while not self.stream.insert(frame, timeout_s=self.config.read_timeout_s):
                    if self._stopped.is_set() or self.stream.closed:
                        return
        except BaseException as e:  # noqa: BLE001 - handed to the caller by outputs()/stop()
            self.stream.close(e)
            return
        if self.alert_media is not None:
            self.alert_media.end_input()
        self.stream.finish()

    def _tap(self, source) -> None:
        """With alert media kept, a source that can hand over its frames at full size does (media/frame_source.py)."""
        if self.alert_media is not None and hasattr(source, "on_full_frame"):
            source.on_full_frame = self._full_frame
            self._full_frames = True

    def _full_frame(self, frame: Frame) -> None:
        """A frame for alert_media, at the source's size, on the session's clock (the source's thread)."""
        if (media := self.alert_media) is not None:
            media.put(self.stream.clock.frame(frame))

    def _offer(self, frame: Frame) -> None:
        """A frame read or inserted: alert_media's too when its source does not hand over full-size frames."""
        if self.alert_media is not None and not self._full_frames:
            self._full_frame(frame)

    def _source_status(self, event: str, t_s: float, info: dict) -> None:
        """On the source's reader thread: {"type": "status", "event": "source_lost" | "source_back", "t_s", ...}
        on the outputs queue, t_s on the session's clock."""
        self._outputs.put(Status(event, round(self.stream.clock.stream_t(t_s), 3), info))

    def _raise_error(self) -> None:
        error = self.stream.error
        if error is not None:
            self._error_reported = True
            raise RuntimeError(f"streamvid worker failed: {error!r}") from error
