"""Engine: the model and any number of streams, and the one scheduler that runs their work batched.

    engine = Engine(EngineConfig())
    a, b = engine.open(), engine.open()          # two streams (stream.py), each with its own window and memory
    engine.start()                               # the scheduler thread; or call engine.step() yourself
    a.insert(frame); a.ask("What colour is the circle?")
    ...
    engine.close()

Each `step` is one round over the streams, in this order (priorities), spending at most `step_tokens` tokens of
prefill across all streams (the way vLLM's `max_num_batched_tokens` bounds a step, with chunked prefill):
1. answers: each stream's next question starts (at most one answer per stream at a time, so its dialogue stays in
   order); ONE batched decode forward advances every answer and narration look past its prompt by a token (one
   token of the budget each), and ONE forward feeds the prompts still being prefilled, each a piece of it: the
   budget left is shared equally between them (a share a prompt does not need goes to the others), so a long prompt
   is prefilled over several steps while the other streams' answers go on decoding; a prompt's last piece gives its
   first token;
2. ingest: the oldest complete chunk of up to `max_batch` streams in ONE batched chunk forward (with each stream's
   window, positions and mask), taking streams round-robin so a busy one cannot starve the others, as many as the
   budget left holds (a chunk's cost estimated from the stream's newest block) and always at least one;
3. speaking up: the trigger probes due on every stream's newest chunk in ONE batched forward (up to `probe_batch`
   per stream per step, each costing its prompt's tokens), as many as the budget left holds and always at least
   one; narration looks join the decode batch.
Every category runs every step whatever the others hold, so a stream flooded with questions or sending the longest
prompts delays another stream's ingest and answers by one bounded step at most. Frames wait in each stream's
bounded inbox; a live source drops what does not fit (the engine did not keep up).

One stepping interface drives everything: the scheduler thread (`start`) loops `step`; a replay inserts frames
and calls `run_until_idle` (StreamingAssistant.run_simulated); bench drives both.

The budget's arithmetic (the shares, what fits) is in step_budget.py. Errors (isolation.py): a batched forward that
raises is retried stream by stream (counted in `batch_fallbacks`); a stream whose own work raises is closed with
the error (its caller gets it), the others go on.

Caps (admission.py): `max_streams` streams per engine, and the engine's KV and host-memory caps (`open` raises
EngineFull beyond them); a stream without frames for `idle_release_s` moves its window KV to host memory, restored
on its next frame (answers unchanged).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from streamvid.adapters.base import VideoLLMAdapter, adapter_for
from streamvid.adapters.embedders import make_embedder
from streamvid.config import EngineConfig
from streamvid.engine.admission import Admission
from streamvid.engine.ingest import speech_line
from streamvid.engine.isolation import batched, guard
from streamvid.engine.step_budget import chunks_that_fit, default_step_tokens, groups, split_answers
from streamvid.engine.stream import Decoding, Stream
from streamvid.kv.positions import concat
from streamvid.kv.window import Block
from streamvid.language.asked import Question
from streamvid.types import ChunkJob, Output, Token, Transcript

log = logging.getLogger(__name__)


class Engine:
    def __init__(self, config: EngineConfig | None = None, adapter: VideoLLMAdapter | None = None):
        self.config = config = config or EngineConfig()
        self.adapter = adapter or adapter_for(config)
        self.max_streams = config.scheduler.max_streams
        self.max_batch = config.scheduler.max_batch
        self.admission = Admission(self.adapter, config, self.max_streams)  # the caps `open` checks
        self.embedder = make_embedder(config, self.adapter)  # where retrieval vectors come from (embedders.py)
        sinks = self.adapter.encode_text(self.adapter.sink_text, None)
        self.sinks = Block(id=-1, t_start_s=0.0, t_end_s=0.0, keys=sinks.keys, values=sinks.values, pos_start=0,
                           pos_span=sinks.pos_span, state=sinks.state)
        self._streams: list[Stream] = []
        self._lock = threading.Lock()  # guards the streams list
        self._work = threading.Event()  # set when a stream may have work: the scheduler thread's wake-up
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ids = itertools.count()
        self._turn = 0  # where the round-robin starts this step
        self._warm = False
        self.steps = 0
        self.forwards = {"decode": 0, "prefill": 0, "encode": 0, "probe": 0}
        self.batch_fallbacks = 0  # batched forwards of several streams that raised and were retried stream by stream
        self._step_tokens: int | None = config.scheduler.step_tokens  # resolved on the first step (step_tokens)
        self.error: BaseException | None = None

    # ---- streams ----------------------------------------------------------------------------------------
    def open(self, config: EngineConfig | None = None) -> Stream:
        """A new stream on this engine (`config`: its own settings, the same model; default the engine's).
        Raises EngineFull at `max_streams` or past the engine's KV or host-memory cap (admission.py)."""
        config = config or self.config
        if config.model != self.config.model:
            raise ValueError(f"a stream of this engine runs {self.config.model!r}, got {config.model!r}")
        with self._lock:
            self.admission.check([s.config for s in self._streams if not s.closed], config)
            stream = Stream(config, self.adapter, self.embedder, self.sinks, f"s{next(self._ids)}")
            stream.on_work = self._work.set
            self._streams.append(stream)
        return stream

    def streams(self) -> list[Stream]:
        with self._lock:
            return list(self._streams)

    def _drop(self, stream: Stream) -> None:
        with self._lock:
            if stream in self._streams:
                self._streams.remove(stream)
        if stream.decoding is not None:
            stream.decoding.decoding.cancel()
            stream.decoding = None
        if stream.memory is not None:
            stream.memory.close()

    # ---- the scheduler thread ---------------------------------------------------------------------------
    def start(self) -> None:
        """Run the scheduler on a thread ("streamvid-engine") until `close`; idempotent."""
        if self._thread is not None:
            return
        self.warm_up()
        self._thread = threading.Thread(target=self._loop, name="streamvid-engine", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def close(self, timeout_s: float | None = None) -> None:
        """Stop the scheduler thread (bounded join) and drop every stream."""
        self._stop.set()
        self._work.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s if timeout_s is not None else self.config.join_timeout_s)
        for stream in self.streams():
            stream.close()
            self._drop(stream)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._work.clear()  # cleared before looking, so work that comes during a step is not lost
            try:
                busy = self.step()
            except BaseException as e:  # noqa: BLE001 - a scheduler bug: every stream's caller gets it
                log.exception("streamvid engine failed")
                self.error = e
                for stream in self.streams():
                    stream.close(e)
                return
            if not busy:
                self._work.wait(self.config.read_timeout_s)

    def warm_up(self) -> None:
        """One throw-away chunk and answer token before the first stream's clock starts, so a live source does not
        drop its first seconds while the first forwards pay their one-off costs."""
        if self._warm:
            return
        self._warm = True
        context = concat([self.sinks], self.sinks.pos_span)
        black = np.zeros((56, 56, 3), np.uint8)
        self.adapter.encode_chunks([ChunkJob((black,) * self.config.frames_per_chunk, context, 1.0)])
        for _ in self.adapter.generate(context, self.adapter.prompt("Hi"), max_new_tokens=1):
            pass

    # ---- one step ---------------------------------------------------------------------------------------
    def step(self) -> bool:
        """One round of work over the streams (see the module docstring). True if it did something."""
        streams = self.streams()
        if not streams:
            return False
        self._turn = (self._turn + 1) % len(streams)
        streams = streams[self._turn:] + streams[:self._turn]
        for s in streams:
            if s.closed:
                self._drop(s)
        streams = [s for s in streams if not s.closed]
        self._idle_release(streams)
        for s in streams:
            guard(s, s.take_frames)
        budget = self.step_tokens
        did, budget = self._answer(streams, budget)
        ingested, budget = self._ingest(streams, budget)
        did |= ingested
        did |= self._decide(streams, budget)
        self.steps += did
        return did

    @property
    def step_tokens(self) -> int:
        """The prefill tokens one step may spend: the setting, else 512 or the tokens of `max_batch` chunks of
        `frame_px` frames when more (so the chunks of a full batch are never split across steps)."""
        if self._step_tokens is None:
            self._step_tokens = default_step_tokens(self.adapter, self.config, self.max_batch)
        return self._step_tokens

    def _idle_release(self, streams: list[Stream]) -> None:
        """Restore a released stream that has work; release one idle for idle_release_s (answers unchanged)."""
        now = time.monotonic()
        for s in streams:
            if s.released:
                if not s.idle:
                    guard(s, s.restore)
            elif (after := s.config.scheduler.idle_release_s) is not None and now - s.last_frame_s > after and s.idle:
                guard(s, s.release)

    def run_until_idle(self) -> None:
        """Step until no stream has work left (a replay's way to let every inserted frame be encoded and decided),
        waiting while a replay's frames wait for their sound to be transcribed (`Stream.waiting_for_sound`)."""
        while True:
            self._work.clear()
            if self.step():
                continue
            if not any(s.waiting_for_sound for s in self.streams()):
                return
            self._work.wait(self.config.read_timeout_s)

    def _answer(self, streams: list[Stream], budget: int) -> tuple[bool, int]:
        """Step 1 (module docstring): True if anything was decoded or prefilled, and the budget left."""
        for s in streams:
            d = s.decoding
            if d is not None and d.answering is None and s.questions_waiting:
                d.decoding.cancel()  # a narration look gives way to a question: not counted, due again
                s.decoding = None
            if s.decoding is None and (asked := s.next_question()) is not None:
                guard(s, self._begin, s, *asked)
        running = [s for s in streams if s.decoding is not None and not s.closed]
        if not running:
            return False, budget
        decoding, last, more, budget = split_answers(running, budget)
        # decode steps, prompts' last pieces and other pieces in forwards of their own, in that order, each group's
        # tokens out as soon as its forward is done: a long piece neither pads a short one nor delays its first token
        for kind, rows in (("decode", decoding), ("prefill", last), ("prefill", more)):
            for group in groups(rows, self.max_batch):
                self._batched(group, kind, lambda g: self.adapter.decode([s.decoding.decoding for s in g]))
                for s in group:
                    if not s.closed:
                        guard(s, self._advance, s)
        return True, budget

    def _begin(self, s: Stream, q: Question, snapshot) -> None:
        a = s.reasoning.begin(q, s.emit, snapshot)
        if isinstance(a, Output):  # acknowledged ("tell me when") or nothing seen yet: no forward
            return
        s.decoding = Decoding(self.adapter.start_decoding(a.context, a.prompt, s.config.generation.max_new_tokens), a)

    def _advance(self, s: Stream) -> None:
        d = s.decoding
        tokens = len(d.decoding.tokens)
        if tokens > len(d.pieces):
            piece = d.decoding.piece()
            if d.ttft_s is None and d.answering is not None:
                d.ttft_s = time.perf_counter() - d.answering.question.asked_s
            d.pieces.append(piece)
            if d.answering is not None and piece:
                s.emit(Token(d.answering.question.id, piece))
        if not d.decoding.done:
            return
        s.decoding = None
        if d.answering is not None:
            s.reasoning.complete(d.answering, d.pieces, d.ttft_s, s.emit)
        else:
            s.reasoning.offer("".join(d.pieces), s.emit)

    def _ingest(self, streams: list[Stream], budget: int) -> tuple[bool, int]:
        """Step 2: True if speech blocks or chunks were encoded, and the budget left. An utterance due before a
        stream's next chunk is encoded first, in its own short text forward (utterances are rare and short)."""
        spoke = False
        for s in streams:
            if s.ingest.speech_due and not s.closed and (not spoke or s.ingest.speech_tokens() <= budget):
                budget -= s.ingest.speech_tokens()
                spoke = True
                guard(s, self._speak, s)
        ready, budget = chunks_that_fit(streams, self.max_batch, budget)
        if not ready:
            return spoke, budget
        jobs = {s: s.ingest.jobs() for s in ready}

        def encode(group: list[Stream]) -> None:
            flat = [j for s in group for j in jobs[s]]
            t0 = time.perf_counter()
            encoded = self.adapter.encode_chunks(flat)
            share = (time.perf_counter() - t0) / len(group)
            for s in group:
                mine, encoded = encoded[:len(jobs[s])], encoded[len(jobs[s]):]
                guard(s, s.ingest.commit, mine, share)

        self._batched(ready, "encode", encode)
        return True, budget

    def _speak(self, s: Stream) -> None:
        """One utterance of `s`, in its time among the chunks: its transcript, and a speech block in its window
        that speech triggers hear (or, after the wake word, the question it asks)."""
        utterance = s.ingest.next_utterance
        if utterance.question is not None:
            s.spoken(s.ingest.take_utterance())
            return
        s.emit(Transcript(round(utterance.t_s, 3), round(utterance.t_end_s, 3), utterance.text))
        encoded = self.adapter.encode_text(speech_line(utterance), s.ingest.speech_context())
        block = s.ingest.commit_speech(encoded)
        s.reasoning.hear(block, s.emit)

    def _decide(self, streams: list[Stream], budget: int) -> bool:
        """Step 3: True if anything was probed or a narration look started."""
        rows = {}
        did = False
        for s in streams:
            if s.decoding is not None or s.closed:
                continue  # a narration look (or an answer) is under way: the next round waits for it
            got = guard(s, s.reasoning.probe_rows, s.emit, s.config.triggers.probe_batch, budget, not rows)
            if got is None:
                continue
            if got:
                rows[s] = got
                budget -= sum(tr.tokens for tr, _, _ in got)
            elif (look := guard(s, s.reasoning.narration_look, s.emit)) is not None:
                context, prompt = look
                s.decoding = Decoding(self.adapter.start_decoding(context, prompt, s.config.generation.max_new_tokens))
                did = True
        if not rows:
            return did

        def probe(group: list[Stream]) -> None:
            flat = [(context, question) for s in group for _, context, question in rows[s]]
            scores = self.adapter.probe_rows(flat)
            for s in group:
                mine, scores = scores[:len(rows[s])], scores[len(rows[s]):]
                guard(s, s.reasoning.apply_scores, rows[s], mine, s.emit)

        self._batched(list(rows), "probe", probe)
        return True

    # ---- errors -----------------------------------------------------------------------------------------
    def _batched(self, group: list[Stream], kind: str, run: Callable[[list[Stream]], None]) -> None:
        """`run` the group's batched forward, counted; when it raises, each stream alone (isolation.py)."""
        self.forwards[kind] += 1
        self.batch_fallbacks += batched(group, kind, run)
