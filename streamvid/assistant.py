"""StreamingAssistant: wires a source, the adapter, the KV window, long-term memory and the two workers.

    with StreamingAssistant(EngineConfig(model=...)) as sa:
        sa.start(open_source("clip.mp4", fps=2.0, realtime=True))
        qid = sa.ask("What colour is the circle?")
        tid = sa.watch("a blue star")                      # a standing trigger: an "alert" when it holds
        for out in sa.outputs(timeout_s=5.0):
            print(out.to_json())

Thread contract: `start`, `ask`, `watch`, `unwatch`, `triggers`, `outputs`, `stats` and `stop` are for the
caller's thread(s). `ask` only puts on the bounded questions queue and `watch`/`unwatch` only change the trigger
set (see reasoning.TriggerSet); answers, tokens, alerts and narration come back on the outputs queue. A worker's
exception stops the session and is re-raised by `outputs()` (and `stop()`). `run_simulated` runs both workers'
logic on the caller's thread, in stream order, for reproducible replays; it must not be mixed with `start`.
`save(dir)` may be called from any thread, also while the workers run (saves are serialised); `resume(dir)` makes
a new assistant from a saved session (see session_store).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import queue
import resource
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Self

import numpy as np
import torch

from streamvid import session_store, user_text
from streamvid.adapters.base import VideoLLMAdapter, adapter_for
from streamvid.budget import Budgets, budgets, window_tokens_for
from streamvid.config import EngineConfig
from streamvid.embedders import embedder_name, make_embedder
from streamvid.future import parse_request, probe_for
from streamvid.ingest import IngestWorker
from streamvid.kv_window import Block, KVWindow
from streamvid.memory import LongTermMemory
from streamvid.positions import concat
from streamvid.proactive import FiringRule
from streamvid.reasoning import ReasoningWorker, Trigger
from streamvid.types import Output, Question

log = logging.getLogger(__name__)


class BusyError(RuntimeError):
    """The questions queue is full: the assistant is still working on earlier questions."""


class StreamingAssistant:
    def __init__(self, config: EngineConfig | None = None, adapter: VideoLLMAdapter | None = None):
        self.config = config = config or EngineConfig()
        self.adapter = adapter or adapter_for(config)
        sinks = self.adapter.encode_text(self.adapter.sink_text, None)
        sink_block = Block(id=-1, t_start_s=0.0, t_end_s=0.0, keys=sinks.keys, values=sinks.values,
                           pos_start=0, pos_span=sinks.pos_span)
        if config.window_tokens is None and config.window_mb is None:
            self.window = KVWindow(sink_block, budget_s=config.window_s)
        else:
            self.window = KVWindow(sink_block, window_tokens_for(config, self.adapter.kv_shape))
        self.embedder = make_embedder(config, self.adapter)  # where retrieval vectors come from (embedders.py)
        self.memory = None
        if config.memory_top_k > 0:
            self.memory = LongTermMemory(self.embedder.dim, config.memory_ram_mb, config.memory_disk_mb,
                                         config.memory_dir, kv=config.memory_kv, keep=config.memory_keep)
        self.questions: queue.Queue[Question] = queue.Queue(maxsize=config.question_queue_size)
        self._outputs: queue.Queue[Output] = queue.Queue()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._error_reported = False
        self._ids = itertools.count()
        self._watch_ids = itertools.count()
        self.ingest = IngestWorker(config, self.adapter, self.window, self.memory, self.embedder)
        self.reasoning = ReasoningWorker(config, self.adapter, self.window, self.memory, self.questions,
                                         self._outputs, self._stop, self.embedder)
        self.ingest.on_block = self.reasoning.wake.set
        self.ingest_done = threading.Event()
        self._threads: list[threading.Thread] = []
        self._save_lock = threading.Lock()

    # ---- live use ---------------------------------------------------------------------------------------
    def start(self, source) -> None:
        if self._threads:
            raise RuntimeError("this assistant is already running; create a new one for another stream")
        self._warm_up()
        self.ingest.source = source
        if hasattr(source, "on_status"):  # a camera/URL reports when it drops and comes back
            source.on_status = self._source_status
        self._threads = [
            threading.Thread(target=self._loop, args=(self.ingest.step, self.ingest_done),
                             name="streamvid-ingest", daemon=True),
            threading.Thread(target=self._loop, args=(self.reasoning.step, None),
                             name="streamvid-reasoning", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def ask(self, text: str, t_s: float | None = None) -> str:
        """Queue a question about the stream so far; returns its id. Raises BusyError when the queue is full."""
        self._raise_error()
        text = user_text.clean(text)  # ValueError: not text, empty, or too long
        qid = f"q{next(self._ids)}"
        try:
            self.questions.put_nowait(Question(qid, text, self.ingest.latest_t_s if t_s is None else t_s))
        except queue.Full:
            raise BusyError(f"busy: {self.questions.maxsize} questions are waiting; ask again shortly") from None
        self.reasoning.wake.set()
        return qid

    def watch(self, condition: str, **thresholds) -> str:
        """Start a standing trigger; returns its id ("w0", "w1", ...).

        `condition` is a phrase ("a blue star", "a blue star appears", "the circle turns red"), a yes/no
        question ("Is there a blue star?") or a request ("Tell me when a blue star appears"); it becomes one
        yes/no probe about the current moment (see future.probe_for), asked on each new chunk. An {"type":
        "alert"} output comes each time it fires. `thresholds` override the firing rule's defaults: fire, reset,
        k, cooldown_s (proactive.Thresholds; defaults from EngineConfig.trigger_*)."""
        self._raise_error()
        return self._watch(user_text.clean(condition, "condition"), self.ingest.latest_t_s, thresholds)

    def unwatch(self, trigger_id: str) -> bool:
        """Stop a trigger (one from `watch`, or one made from a "tell me when" question); False if none is active
        under that id."""
        return self.reasoning.triggers.remove(trigger_id)

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
        """Stop both workers (bounded join), save the session into `save_to` when given (what `save` returns
        is returned), close the source and memory, and re-raise a worker error that `outputs()` has not
        reported yet. Safe to call twice."""
        self._stop.set()
        self.reasoning.wake.set()
        for t in self._threads:
            t.join(timeout=self.config.join_timeout_s)
        alive = [t.name for t in self._threads if t.is_alive()]
        saved = None
        try:
            if save_to is not None:  # consistent even with a worker still in a model call (ingest's lock)
                saved = self.save(save_to)
        finally:
            if alive:  # still inside one model call: it exits after it; leave it the source and memory it uses
                log.warning("%s still finishing a model call after %.1f s", ", ".join(alive),
                            self.config.join_timeout_s)
            else:
                if self.ingest.source is not None:
                    self.ingest.source.close()
                if self.memory is not None:
                    self.memory.close()
        if not self._error_reported:
            self._raise_error()
        return saved

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- replay -----------------------------------------------------------------------------------------
    def run_simulated(self, source, questions_at: Sequence[tuple[float, str]],
                      probes_at: Sequence[tuple[float, str]] = (),
                      watches_at: Sequence[tuple[float, str]] = ()) -> list[Output]:
        """Ingest every frame of `source` in order on this thread; answer each question (and yes/no probe) at its
        stream time T from exactly the frames with t <= T (those of an unfinished chunk are encoded for that answer
        alone: the window and memory get every chunk whole, whenever questions come); start each watch at
        its T. After every new chunk the triggers are probed and narration decides, as the reasoning thread would
        with no question waiting, so alerts and remarks are reproducible. A "tell me when" question gets its
        acknowledgement at T and its alert when the event is seen.
        Times T are the input's own (0 = its first frame); in a resumed session they sit at T + stream_offset_s
        of the session's clock, which answers report as t_s (and T as input_t_s).
        Returns answers, probe results, alerts and remarks in stream-time order (no token pieces)."""
        pending = sorted([(t, text, "answer") for t, text in questions_at] +
                         [(t, text, "probe") for t, text in probes_at] +
                         [(t, text, "watch") for t, text in watches_at], key=lambda q: q[0])
        results: list[Output] = []
        self.ingest.source = source

        def emit(out: Output) -> None:
            if out.kind != "token":
                results.append(out)

        def handle_next() -> None:
            t, text, kind = pending.pop(0)
            t += self.ingest.t_offset_s  # times are the input's own; the session's clock may have started earlier
            if kind == "watch":  # starts with the next decided chunk; the chunking is left as it is
                self._watch(text, t, {})
                return
            snap = self.window.snapshot()
            if (tail := self.ingest.tail()) is not None:  # the unfinished chunk, for this answer alone
                snap = dataclasses.replace(snap, blocks=(*snap.blocks, tail))
            q = Question(f"q{next(self._ids)}", text, t)
            if kind == "answer":
                self.reasoning.handle(q, emit, snap)
            else:
                results.append(self.reasoning.probe(q, snap))

        def decide() -> None:
            while self.reasoning.decide(emit):
                pass

        while (frame := source.read()) is not None:
            while pending and pending[0][0] < frame.t_s:
                handle_next()
                decide()
            self.ingest.push(frame)
            decide()
        self.ingest.flush()
        decide()
        while pending:
            handle_next()
            decide()
        return results

    # ---- sessions -----------------------------------------------------------------------------------------
    @property
    def stream_t_s(self) -> float:
        """The session's stream time so far: where the newest frame ends (one frame period after it), or where
        this run started. A resumed session's next input starts here."""
        snap = self.window.snapshot()
        ends = [self.ingest.t_offset_s] + ([snap.blocks[-1].t_end_s] if snap.blocks else [])
        if self.ingest.frames_in:
            ends.append(self.ingest.latest_t_s + 1.0 / self.config.fps)
        return max(ends)

    def reasoner(self, config: EngineConfig, memory: bool = True) -> ReasoningWorker:
        """Another reasoning worker on this stream (its window, its memory unless `memory` is False, question
        queue and outputs) answering with `config`: how bench answers the same window with and without retrieval."""
        return ReasoningWorker(config, self.adapter, self.window, self.memory if memory else None, self.questions,
                               self._outputs, self._stop, self.embedder)

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
        return self.ingest.t_offset_s

    def save(self, directory: str | Path) -> dict:
        """Snapshot the session into `directory` atomically (window, long-term memory, stream clock, dialogue);
        a crash at any point leaves the previous snapshot there loadable. Returns what was written
        (session_store.save). Frames of a chunk not yet encoded are not part of the snapshot."""
        with self._save_lock:
            return session_store.save(self.stream_state, directory)

    def stream_state(self, memory_folder: Path) -> session_store.StreamState:
        """The stream at one cut, for a snapshot: window, clock, block ids and dialogue, with long-term memory
        written into `memory_folder` (created) at the same cut. Ingest waits meanwhile, so no block moves
        between the window and memory while both are read."""
        with self.ingest.lock:
            snap = self.window.snapshot()
            if self.memory is not None:
                memory_folder.mkdir()
                self.memory.snapshot(memory_folder)
            return session_store.StreamState(
                config=self.config, embedder=(self.embedder.name, self.embedder.dim), sinks=snap.sinks,
                blocks=tuple(snap.blocks), stream_t_s=self.stream_t_s, next_block_id=self.ingest.next_block_id,
                dialogue=tuple(tuple(turn) for turn in self.reasoning.dialogue.copy()),
                memory_blocks=len(self.memory) if self.memory is not None else None)

    @classmethod
    def resume(cls, directory: str | Path, config: EngineConfig | None = None,
               adapter: VideoLLMAdapter | None = None) -> StreamingAssistant:
        """A new assistant that continues the session saved in `directory`: the same window and long-term
        memory, stream time continuing where it stopped, the recent dialogue. `config` defaults to the saved
        one; its model and embedder must be the saved ones. Raises session_store.SnapshotError (a ValueError) with
        a one-line message for a missing, damaged or foreign snapshot."""
        meta = session_store.read_meta(directory)
        saved = config is None
        config = config or session_store.config_from(meta)
        session_store.check_model(directory, meta, config.model)
        session_store.check_embedder(directory, meta, embedder_name(config.embedder))
        snap = session_store.load(directory, meta=meta)
        try:
            sa = cls(config, adapter)
        except ValueError as e:
            if not saved:
                raise
            raise session_store.SnapshotError(f"session {directory} is damaged: its saved settings do not run with "
                                              f"this model ({e}); use another --session folder") from None
        try:
            sa._restore(directory, snap)
        except BaseException:
            sa.stop()
            raise
        return sa

    def _restore(self, directory: str | Path, snap: session_store.Snapshot) -> None:
        now = self.window.snapshot().sinks
        kv = snap.meta["kv"]
        mine = {"dtype": str(now.keys[0].dtype).removeprefix("torch."), "layers": len(now.keys),
                "kv_heads": int(now.keys[0].shape[1]), "head_dim": int(now.keys[0].shape[3])}
        if kv != mine:
            raise session_store.SnapshotError(
                f"session {directory} holds KV as {kv}, this model runs {mine}: resume with the same --dtype "
                f"and model, or use another --session folder")
        device = now.keys[0].device
        if snap.memory_dir is not None:
            if self.memory is None:
                log.warning("session %s has %d long-term memory blocks; memory is off (memory_top_k=0), so they "
                            "are not loaded", directory, len(json.loads((snap.memory_dir / "memory.json").read_text())
                                                          ["blocks"]))
            else:
                try:
                    memory = LongTermMemory.restore(snap.memory_dir, self.config.memory_ram_mb,
                                                    self.config.memory_disk_mb, self.config.memory_dir,
                                                    kv=self.config.memory_kv, keep=self.config.memory_keep)
                except (ValueError, KeyError, OSError, RuntimeError) as e:
                    raise session_store.SnapshotError(
                        f"session {directory} is damaged: its long-term memory cannot be read ({e}); remove the "
                        f"folder to start a new session, or use another --session folder") from None
                self.memory.close()
                self.memory = self.ingest.memory = self.reasoning.memory = memory
        if (snap.sinks.n_tokens, snap.sinks.pos_span) != (now.n_tokens, now.pos_span):
            raise session_store.SnapshotError(
                f"session {directory} was saved with a {snap.sinks.n_tokens}-token system prompt, this streamvid "
                f"uses {now.n_tokens} tokens: use the streamvid that wrote it, or another --session folder")
        # the sinks are this model's own encoding of the same prompt; the saved blocks follow them as before
        for block in snap.blocks:
            alone = block.memory_kv and tuple(tuple(t.to(device) for t in kv) for kv in block.memory_kv)
            block = block.replace(keys=tuple(k.to(device) for k in block.keys),
                                  values=tuple(v.to(device) for v in block.values), memory_kv=alone)
            for old in self.window.append(block):
                if self.memory is not None:
                    self.memory.add(old.for_memory())
        self.ingest.resume_at(snap.meta["stream_t_s"], snap.meta["next_block_id"])
        self.reasoning.t_offset_s = snap.meta["stream_t_s"]
        self.reasoning.dialogue.extend((q, a) for q, a in snap.meta["dialogue"])

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
            **self.reasoning.stats(),
            "peak_memory_mb": round(peak, 1),
            "peak_memory_kind": "cuda" if self.adapter_device_is_cuda else "host_rss",
        }

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
    def _watch(self, condition: str, t_s: float, thresholds: dict) -> str:
        probe = probe_for(condition)  # raises ValueError for an empty condition
        request = parse_request(condition)
        rule = FiringRule(self.config.trigger_thresholds().replace(**thresholds))
        trigger_id = f"w{next(self._watch_ids)}"
        phrase = request.condition if request is not None else " ".join(condition.split()).rstrip(".!")
        self.reasoning.triggers.add(Trigger(trigger_id, phrase, probe, rule, once=False, created_t_s=t_s))
        self.reasoning.wake.set()
        return trigger_id

    def _source_status(self, event: str, t_s: float, info: dict) -> None:
        """On the source's reader thread: {"type": "status", "event": "source_lost" | "source_back", "t_s", ...}
        on the outputs queue, t_s on the session's clock."""
        self._outputs.put(Output("status", "", "", {"event": event, "t_s": round(t_s + self.ingest.t_offset_s, 3),
                                                    **info}))

    def _warm_up(self) -> None:
        """One throw-away chunk and answer token before the clock starts, so a live source does not drop its
        first seconds while the first forwards pay their one-off costs."""
        snap = self.window.snapshot()
        context = concat([snap.sinks], snap.next_pos)
        black = np.zeros((56, 56, 3), np.uint8)
        self.adapter.encode_chunk([black] * self.config.frames_per_chunk, context, 1.0)
        for _ in self.adapter.generate(context, self.adapter.prompt("Hi"), max_new_tokens=1):
            pass

    def _loop(self, step, done: threading.Event | None) -> None:
        try:
            while not self._stop.is_set():
                if step() is False and done is not None:
                    done.set()
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the caller by outputs()/stop()
            self._error = e
            self._stop.set()

    def _raise_error(self) -> None:
        if self._error is not None:
            self._error_reported = True
            raise RuntimeError(f"streamvid worker failed: {self._error!r}") from self._error
