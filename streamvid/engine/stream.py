"""Stream: one video stream on an engine: its window, long-term memory, triggers, dialogue, clock and queues.

An `Engine` (engine.py) holds the model and any number of streams; its one scheduler takes work from every stream
and runs it batched. A stream is what a caller feeds and asks:

    stream.insert(frame)         # frames in (waits while the stream's bounded inbox is full)
    stream.ask(question)         # on the bounded questions queue
    stream.finish()              # no more frames: the last chunk is encoded, short
    stream.hear(utterance)       # words heard in its sound (audio/listener.py): a transcript, then a speech block
    stream.outputs               # answers, tokens, alerts, remarks, transcripts, status: a queue

and what the scheduler steps, through the methods in the "scheduler" section below: frames from the inbox into
chunks (`take_frames`), the oldest chunk's encode jobs and their results (`ingest.jobs`, `ingest.commit`), the
next question (`next_question`), trigger probes and narration (`reasoning`), the answer or look being decoded
(`decoding`).

Thread contract: `insert`, `finish`, `hear`, `heard`, `ask`, `put`, `watch`, `schedule`, `unwatch`, `close` and the
properties from
any thread; the scheduler section from the engine's scheduler thread only (or the caller's thread when it steps
the engine itself, as a replay does). `on_work` (set by the engine) is called after anything that gives the
scheduler work; `on_alert` (set by alert_media's keeper) sees each alert before it goes out, and gives its id.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable

import torch

from streamvid.adapters.base import VideoLLMAdapter
from streamvid.adapters.embedders import Embedder
from streamvid.config import EngineConfig
from streamvid.engine import limits
from streamvid.engine.clock import StreamClock
from streamvid.engine.ingest import Ingest
from streamvid.engine.listening import Listening
from streamvid.engine.proactive import FiringRule
from streamvid.engine.reasoning import Answering, Reasoning
from streamvid.engine.triggers import Trigger
from streamvid.errors import Busy
from streamvid.kv.budget import window_tokens_for
from streamvid.kv.memory import LongTermMemory
from streamvid.kv.window import Block, KVWindow, WindowSnapshot
from streamvid.language import user_text
from streamvid.language.asked import Condition, Question, condition_of, watched
from streamvid.language.wake_word import addressed
from streamvid.types import Alert, Frame, Output, Status, Transcript, Utterance, VoiceActivity


log = logging.getLogger(__name__)


class BusyError(Busy, RuntimeError):
    """The questions queue is full: the assistant is still working on earlier questions."""


class Decoding:
    """What a stream is decoding: an answer (`answering` set) or a narration look, with its adapter decoding."""

    def __init__(self, decoding, answering: Answering | None = None):
        self.decoding = decoding  # the adapter's (adapter.start_decoding)
        self.answering = answering
        self.pieces: list[str] = []
        self.ttft_s: float | None = None


class Stream:
    def __init__(self, config: EngineConfig, adapter: VideoLLMAdapter, embedder: Embedder, sinks: Block,
                 stream_id: str = "s0"):
        self.id = stream_id
        self.config = config
        self.adapter = adapter
        self.embedder = embedder
        if config.window.tokens is None and config.window.mb is None:
            self.window = KVWindow(sinks, budget_s=config.window.seconds)
        else:
            self.window = KVWindow(sinks, window_tokens_for(config, adapter.kv_shape))
        self.memory = None
        if config.memory.top_k > 0:
            self.memory = LongTermMemory(embedder.dim, config.memory.ram_mb, config.memory.disk_mb,
                                         config.memory.dir, kv=config.memory.kv, keep=config.memory.keep)
        if config.narration.on:  # the narration prompt is asked on every look: a question's cap holds for it
            limits.check_question(adapter, config.narration.prompt.replace("{mmss}", "00:00"),
                                  config.generation.max_question_tokens, "narration prompt")
        self.clock = StreamClock()  # the one offset between this run's input times and the stream's
        self.ingest = Ingest(config, adapter, self.window, self.memory, embedder, self.clock)
        self.reasoning = Reasoning(config, adapter, self.window, self.memory, embedder, self.clock)
        self.outputs: queue.Queue[Output] = queue.Queue()
        self.on_work: Callable[[], None] = lambda: None
        # each alert passes through it before it goes out (scheduler's thread): alert_media.AlertMedia.record
        self.on_alert: Callable[[Alert], Alert] | None = None
        self.decoding: Decoding | None = None  # the answer or narration look being decoded (scheduler's)
        self._lock = threading.Condition()  # guards the inbox, the questions, and the flags below
        self._inbox: deque[Frame] = deque()
        self._heard: deque[Utterance] = deque()  # utterances for the window, not taken by the scheduler yet
        self._heard_until: float | None = None  # the listener's latest `heard`, not taken yet
        self.utterances = 0
        self.listening = Listening(config.wake_word)  # the phrases asked to hear: told to the recogniser (hints)
        self._inbox_size = 2 * config.frames_per_chunk  # frames not yet taken into chunks (one chunk ahead)
        self._questions: deque[tuple[Question, WindowSnapshot | None]] = deque()
        # (stream time, text, its condition, is a watch), by time
        self._scheduled: list[tuple[float, str, Condition | None, bool]] = []
        self._finishing = False  # no more frames will come
        self.ended = threading.Event()  # every frame of a finished input is encoded (or the stream closed/failed)
        self.closed = False
        self.error: BaseException | None = None
        self._ids = itertools.count()
        self._watch_ids = itertools.count()
        self.last_frame_s = time.monotonic()  # wall clock of the last frame in (idle release)
        self.released = False  # the window's KV is in host memory until the next frame or question (release)

    # ---- the caller's side ------------------------------------------------------------------------------
    def insert(self, frame: Frame, timeout_s: float | None = None) -> bool:
        """Hand one frame to the stream. Waits while the inbox is full (the engine is behind): up to `timeout_s`
        (None: until there is room or the stream closes). False if the frame was not taken."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._inbox) < self._inbox_size or self.closed, timeout_s):
                return False
            if self.closed or self._finishing:
                return False
            self._inbox.append(frame)
            self.last_frame_s = time.monotonic()
        self.on_work()
        return True

    def hear(self, utterance: Utterance) -> None:
        """Words heard in the stream's sound (input times, like frames). The scheduler takes them in time order
        among the chunks (ingest.py): a {"type": "transcript"} output, and a speech block in the window; words after
        the wake word (`wake_word.addressed`) are a question asked when the speaker stopped instead (`spoken`)."""
        question = addressed(utterance.text, self.config.wake_word)
        with self._lock:
            if self.closed:
                return
            self._heard.append(dataclasses.replace(utterance, question=question))
            self.utterances += 1
        self.on_work()

    def spoken(self, utterance: Utterance) -> None:
        """A question heard after the wake word (scheduler's): asked when the speaker stopped, and its transcript with
        the question's id (`question_id`); a {"type": "status", "event": "question_refused"} after the transcript when
        it cannot be asked."""
        transcript = Transcript(round(utterance.t_s, 3), round(utterance.t_end_s, 3), utterance.text)
        try:
            qid = self.ask(utterance.question, t_s=utterance.t_end_s)
        except (ValueError, BusyError) as e:
            self.emit(transcript)
            self.emit(Status("question_refused", round(utterance.t_end_s, 3), {"reason": str(e)}))
            return
        self.emit(dataclasses.replace(transcript, question_id=qid))

    def hints(self, t_s: float) -> str | None:
        """What the recogniser is told for an utterance starting at input time `t_s` (listener's thread): the
        wake word and the phrases asked to hear by then (listening.Listening)."""
        return self.listening.hint(self.clock.stream_t(t_s))

    def voice(self, event: str, t_s: float) -> None:
        """The voice detector's edge in pushed sound at input time `t_s` (listener's thread): a {"type":
        "voice_activity"} output, in stream time like the transcript that follows it."""
        if not self.closed:
            self.emit(VoiceActivity(event, round(self.clock.stream_t(t_s), 3)))

    def heard(self, t_s: float) -> None:
        """The sound is transcribed up to input time `t_s` (infinity once it has ended): what a replay's frames
        wait for (`ingest.wait_for_sound`)."""
        with self._lock:
            self._heard_until = t_s
        self.on_work()

    def finish(self) -> None:
        """No more frames: the unfinished chunk is encoded (short) once the inbox is drained, then `ended` is set."""
        with self._lock:
            self._finishing = True
        self.on_work()

    def ask(self, text: str, t_s: float | None = None, dialogue: list[tuple[str, str]] | None = None) -> str:
        """Queue a question about the stream at `t_s` (default: its newest frame); returns its id ("q0", ...).
        `dialogue`: earlier (question, answer) turns to answer with instead of the stream's own (the last
        dialogue_turns of them). Raises BusyError when the queue is full, ValueError for bad text."""
        text = user_text.clean(text)  # ValueError: not text, empty, or too many characters
        return self._ask(text, condition_of(text), t_s, dialogue)

    def _ask(self, text: str, condition: Condition | None, t_s: float | None,
             dialogue: list[tuple[str, str]] | None = None) -> str:
        limits.check_question(self.adapter, text, self.config.generation.max_question_tokens)
        if condition is not None:  # "tell me when ...": a standing trigger once asked
            if condition.heard is None:
                limits.check_condition(self.adapter, condition.probe.question,
                                       self.config.triggers.max_condition_tokens)
            self.reasoning.triggers.check_room(self.config.triggers.max_watches)
        turns = None if dialogue is None else tuple(
            (user_text.clean(q), user_text.clean(a, "answer") if str(a).strip() else "") for q, a in dialogue)
        return self.put(text, self.ingest.latest_t_s if t_s is None else t_s, condition, dialogue=turns)

    def put(self, text: str, t_s: float, condition: Condition | None, snapshot: WindowSnapshot | None = None,
            dialogue: tuple[tuple[str, str], ...] | None = None) -> str:
        """Queue a question as given (a replay's benchmark prompt, taken verbatim) with its parsed `condition`
        (asked.condition_of); `snapshot`: answer on these window blocks instead of the window when the answer starts
        (a replay's window plus its unfinished chunk). Returns its id; BusyError when the queue is full."""
        with self._lock:
            if len(self._questions) >= (size := self.config.generation.question_queue_size):
                raise BusyError(f"busy: {size} questions are waiting; ask again shortly")
            qid = f"q{next(self._ids)}"
            q = Question(qid, text, t_s, dialogue=dialogue, condition=condition)
            self._questions.append((q, snapshot))
        self.listening.note(q.condition, t_s)
        self.on_work()
        return qid

    def watch(self, condition: str | Condition, t_s: float | None = None, **thresholds) -> str:
        """Start a standing trigger (see StreamingAssistant.watch) on a condition as typed, or parsed already
        (`asked.watched`); returns its id ("w0", "w1", ...)."""
        if not isinstance(condition, Condition):
            condition = watched(condition)  # ValueError: not text, empty, too long, or no phrase
        tokens = 0
        if condition.heard is None:  # "said: stop", "someone says 'help'": decided on transcripts, no probe
            tokens = limits.check_condition(self.adapter, condition.probe.question,
                                            self.config.triggers.max_condition_tokens)
        rule = FiringRule(self.config.triggers.thresholds().replace(**thresholds))
        self.reasoning.triggers.check_room(self.config.triggers.max_watches)  # before an id is taken
        trigger_id = f"w{next(self._watch_ids)}"
        t_s = self.ingest.latest_t_s if t_s is None else t_s
        self.listening.note(condition, t_s)
        self.reasoning.triggers.add(Trigger(trigger_id, condition.phrase, condition.probe, rule, once=False,
                                            created_t_s=t_s, tokens=tokens, heard=condition.heard),
                                    limit=self.config.triggers.max_watches)
        self.on_work()
        return trigger_id

    def schedule(self, t_s: float, text: str, watch: bool = False) -> None:
        """Ask `text` (or, with `watch`, start watching it) once the stream reaches time `t_s` (or its input ends);
        a question waits for room on the questions queue. ValueError for bad text, at once."""
        if watch:
            condition = watched(text)
        else:
            condition = condition_of(text := user_text.clean(text))
        self.listening.note(condition, t_s)  # known ahead: the recogniser listens for it from t_s on
        with self._lock:
            self._scheduled.append((t_s, text, condition, watch))
            self._scheduled.sort(key=lambda item: item[0])
        self.on_work()

    def unwatch(self, trigger_id: str) -> bool:
        return self.reasoning.triggers.remove(trigger_id)

    @property
    def questions_waiting(self) -> int:
        with self._lock:
            return len(self._questions)

    def close(self, error: BaseException | None = None) -> None:
        """Stop taking frames and questions; the engine drops the stream at its next step. `error`: why it
        failed (re-raised to the stream's caller)."""
        with self._lock:
            if error is not None and self.error is None:
                self.error = error
            self.closed = True
            self._lock.notify_all()
        self.ended.set()
        self.on_work()

    # ---- the scheduler's side ---------------------------------------------------------------------------
    def take_frames(self) -> None:
        """Frames from the inbox into chunks, up to one complete chunk waiting for its forward; at the end of a
        finished input, the short chunk; `ended` once all of it is encoded."""
        with self._lock:
            while self._heard:
                self.ingest.hear(self._heard.popleft())
            if self._heard_until is not None:
                self.ingest.heard(self._heard_until)
                self._heard_until = None
            while self._inbox and not self.ingest.chunks_waiting:
                self.ingest.push(self._inbox.popleft())
            drained = not self._inbox
            self._lock.notify_all()
            finishing = self._finishing
        if finishing and drained:
            self.ingest.flush()
            self.ingest.input_ended = True
            sound_done = not self.ingest.has_sound or (self.ingest.heard_until_s == float("inf")
                                                       and not self.ingest.speech_waiting)
            if not self.ingest.chunks_waiting and sound_done and not self.ended.is_set():
                self.ended.set()
        self._release(everything=finishing and drained)

    def _release(self, everything: bool) -> None:
        """Scheduled questions and watches whose time has come."""
        now = self.ingest.latest_t_s
        while True:
            with self._lock:
                if not self._scheduled or not (everything or self._scheduled[0][0] <= now):
                    return
                t_s, text, condition, watch = self._scheduled[0]
                if not watch and len(self._questions) >= self.config.generation.question_queue_size:
                    return
                self._scheduled.pop(0)
            if watch:
                self.watch(condition, t_s)
            else:
                self._ask(text, condition, min(t_s, now))

    def next_question(self) -> tuple[Question, WindowSnapshot | None] | None:
        """The next question to answer; None while there is none, or while the stream's first chunk waits for its
        forward (this step encodes it: a question asked just after the first frames sees them)."""
        with self._lock:
            if not self._questions:
                return None
            if self.ingest.chunks_waiting and not self.window.snapshot().blocks:
                return None
            return self._questions.popleft()

    @property
    def idle(self) -> bool:
        """Nothing to do for the scheduler: no frames, chunk, question, decoding or decision round waiting."""
        with self._lock:
            waiting = bool(self._inbox or self._questions) or (self._finishing and not self.ended.is_set())
            waiting = waiting or bool(self._heard)
        return not (waiting or self.ingest.chunks_waiting or self.ingest.speech_waiting or self.decoding is not None
                    or self.reasoning.deciding)

    @property
    def waiting_for_sound(self) -> bool:
        """A replay waits for its sound to be transcribed (`ingest.wait_for_sound`): up to the start of the chunk
        waiting, or to the end once the frames have ended."""
        ingest = self.ingest
        if not ingest.wait_for_sound or ingest.speech_due or self.closed:
            return False
        if ingest.chunks_waiting:
            return not ingest.chunk_ready
        with self._lock:
            return self._finishing and not self._inbox and ingest.heard_until_s != float("inf")

    def replace_memory(self, memory: LongTermMemory) -> None:
        """Use `memory` (a restored session's) instead of the stream's own, which is closed. Before any frame."""
        if self.memory is not None:
            self.memory.close()
        self.memory = self.ingest.memory = self.reasoning.memory = memory

    def release(self) -> None:
        """An idle stream's window KV to host memory and its window buffer freed (scheduler's; see Engine)."""
        host = [torch.device("cpu")] * len(self.window.snapshot().sinks.keys)
        self.window.map(lambda b: b.to(host))
        self.window.release_buffer()
        self.released = True

    def restore(self) -> None:
        """The window's KV back on the devices of the sinks' layers, before the stream's next work."""
        devices = [k.device for k in self.window.snapshot().sinks.keys]
        self.window.map(lambda b: b.to(devices))
        self.released = False

    def emit(self, out: Output) -> None:
        if out.kind == "alert" and self.on_alert is not None:
            try:
                out = self.on_alert(out)
            except Exception as e:  # noqa: BLE001 - the alert goes out whatever keeping its evidence did
                log.warning("alert %s at %s s: its evidence was not kept: %r", out.id, out.t_s, e)
        self.outputs.put(out)
