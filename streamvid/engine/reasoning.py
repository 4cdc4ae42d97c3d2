"""Reasoning: one stream's questions -> retrieval -> answer on a snapshot of the window; on each new chunk,
standing triggers are probed and narration may speak (docs/speaking-up.md).

The engine's scheduler (engine.py) drives it and batches the forwards of many streams: `begin` turns a question
into an acknowledgement (a "tell me when" question becomes a trigger) or into an `Answering` (context and prompt to
decode), and `complete` into the answer once its tokens are decoded; `probe_rows` gives the trigger probes due on
the newest chunk and `apply_scores` takes their p(yes); `narration_look` gives a narration look to decode and
`offer` takes its text. `answer` and `probe` are the same work done at once, for direct callers (bench, judge).

Thread contract: the scheduler's thread alone calls the methods above. They read the window through `snapshot()`
and never mutate it, and read memory through its locked methods. The dialogue deque, the change gate, the
narration policy and every trigger's score and firing rule are touched by that thread only. `triggers` (a
TriggerSet) may be added to and removed from by any thread.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from streamvid.adapters.base import VideoLLMAdapter
from streamvid.adapters.embedders import Embedder, ModelEmbedder
from streamvid.config import EngineConfig
from streamvid.engine import limits
from streamvid.engine.clock import StreamClock
from streamvid.engine.proactive import ChangeGate, FiringRule, NarrationPolicy, scene_features
from streamvid.engine.triggers import Trigger, TriggerSet
from streamvid.kv.memory import LongTermMemory
from streamvid.kv.positions import layout
from streamvid.kv.window import Block, KVWindow, WindowSnapshot
from streamvid.language.asked import Question
from streamvid.language.scope import about_now, about_speech
from streamvid.language.spoken_times import stream_times
from streamvid.types import Alert, Answer, Context, Narration, Output, ProbeResult, Token

# the answer to a question asked before any frame or speech arrived (the model would answer from the prompt alone)
NOTHING_SEEN = "I have not seen or heard anything yet. Ask again once the video has started."


@dataclass
class _Round:
    """What is left to decide for one new chunk: trigger probes (in batches), then a narration look."""

    block: Block  # the newest block of the snapshot
    t_s: float  # stream time of its last frame: when the decision is made
    scene: np.ndarray  # (n_tokens, kv_heads * head_dim) the block's token features (see scene_features)
    snap: WindowSnapshot | None = None
    todo: list[Trigger] = field(default_factory=list)
    narrate: bool = False
    _last: tuple[int, Context] | None = None  # the last context laid out (one window copy at a time), by start

    def since(self, trigger: Trigger) -> int:
        """Index of the first window block a trigger's probe looks at: the first that ends after the trigger was
        made (the newest block at least). A condition about the future is not met by what the window held before
        it was asked: "tell me when a red diamond appears" asked 3 s after one left would otherwise fire on the
        one that left, while it is still in the window."""
        blocks = self.snap.blocks
        return next((i for i, b in enumerate(blocks) if b.t_end_s > trigger.created_t_s + 1e-6), len(blocks) - 1)

    def context(self, start: int, positions) -> Context:
        """Sinks + the snapshot's window blocks from index `start` on (0: the whole window, narration's context and
        that of triggers older than the window)."""
        if self._last is None or self._last[0] != start:
            self._last = (start, layout(self.snap.sinks, (), self.snap.blocks[start:], positions, self.snap.state))
        return self._last[1]


@dataclass
class Answering:
    """A question being answered: what `begin` laid out for the decoder, until `complete`."""

    question: Question
    context: Context
    prompt: str
    retrieved: list[Block]
    window: bool  # the window's blocks are in the context (not for a question about an older moment alone)
    span_s: tuple[float, float] | None  # the window's stream span
    turns_dropped: int = 0  # earlier turns left out to keep the dialogue within max_dialogue_tokens


Emit = Callable[[Output], None]


class Reasoning:
    def __init__(self, config: EngineConfig, adapter: VideoLLMAdapter, window: KVWindow,
                 memory: LongTermMemory | None, embedder: Embedder | None = None, clock: StreamClock | None = None):
        self.config = config
        self.adapter = adapter
        self.window = window
        self.memory = memory
        self.embedder = embedder or ModelEmbedder(adapter)  # the question's vector, in the blocks' space
        self.dialogue: deque[tuple[str, str]] = deque(maxlen=config.generation.dialogue_turns or None)
        self.clock = clock or StreamClock()  # the stream's (answers give input_t_s too)
        self.answered = 0
        self.triggers = TriggerSet()
        t = config.triggers
        self.gate = ChangeGate(t.gate_min_novelty, t.gate_max_skip_s, t.gate_follow_up)
        self.narration = (NarrationPolicy(config.narration.min_gap_s, config.narration.max_silence_s,
                                          config.narration.min_novelty) if config.narration.on else None)
        self._seen_block: int | None = None  # id of the newest block decided on
        self._last_decision_s: float | None = None
        self._round: _Round | None = None  # the round under way
        self._scored: _Round | None = None  # the round of the last probe_rows
        self._looking: _Round | None = None  # the round of the last narration_look
        self.probes_run = 0  # trigger probes computed by a forward
        self.probes_skipped = 0  # trigger probes the change gate skipped (the last score was carried over)
        self.probe_forwards = 0  # batched forwards this stream's probes were part of
        self.alerts = 0
        # called with (trigger id, stream time, p(yes), the chunk's vision tokens or None) for every probe score
        # a trigger gets: what benchmarks/trigger_sweep.py records to choose the firing rule
        self.on_score: Callable[[str, float, float, np.ndarray | None], None] | None = None
        # called with each question laid out for answering and the window snapshot it is answered on
        self.on_answering: Callable[[Answering, WindowSnapshot], None] | None = None
        self.remarks = 0
        self._last_speech_s: float | None = None  # where the last utterance heard ended ("someone speaks")

    # ---- questions --------------------------------------------------------------------------------------
    def begin(self, q: Question, emit: Emit | None = None, snap: WindowSnapshot | None = None) -> Answering | Output:
        """A question about the future ("tell me when a blue star appears") becomes a one-shot trigger with the
        question's id and is acknowledged at once (the acknowledgement is returned, and emitted); any other
        question is laid out for answering on `snap` (by default a snapshot of the window taken now): retrieval,
        the context and the prompt with the dialogue."""
        if (c := q.condition) is not None:
            rule = FiringRule(self.config.triggers.thresholds())
            tokens = 0 if c.heard is not None else limits.prompt_tokens(self.adapter, c.probe.question)
            self.triggers.add(Trigger(q.id, c.phrase, c.probe, rule, once=not c.repeat, created_t_s=q.t_s,
                                      tokens=tokens, heard=c.heard))
            ack = Answer(q.id, c.acknowledgement(), q.text, round(q.t_s, 3), round(self.clock.input_t(q.t_s), 3),
                         round(1000 * (time.perf_counter() - q.asked_s), 1), 0, None, [], [], trigger_id=q.id)
            self.answered += 1
            if emit is not None:
                emit(ack)
            return ack
        snap = snap or self.window.snapshot()
        if not snap.blocks and not self._remembers():
            return self._unseen(q, emit)
        retrieved, at_times = self.retrieve(q, snap)
        # a question about an older moment ("what was on screen at 03:12?") is answered from that moment alone,
        # without the dialogue about other moments (as train-tiny trains it)
        moment = bool(at_times and retrieved)
        window = [] if moment else snap.blocks
        # a hybrid model's recurrent layers see the stream up to now (snap.state) whichever blocks are laid out
        context = layout(snap.sinks, retrieved, window, self.adapter.positions, snap.state)
        turns = self.config.generation.dialogue_turns
        dialogue = [] if moment or not turns else list(self.dialogue) if q.dialogue is None else list(
            q.dialogue)[-turns:]
        dialogue, dropped = limits.fit_dialogue(self.adapter, q.text, dialogue,
                                                self.config.generation.max_dialogue_tokens)
        answering = Answering(q, context, self.adapter.prompt(q.text, dialogue), retrieved, bool(window), snap.span_s,
                              dropped)
        if self.on_answering is not None:
            self.on_answering(answering, snap)
        return answering

    def _remembers(self) -> bool:
        return self.memory is not None and len(self.memory) > 0

    def _unseen(self, q: Question, emit: Emit | None) -> Output:
        """The answer to a question asked before anything was seen or heard (no frame, no speech in the window or in
        memory): said as it is, without asking the model, which would answer from the prompt alone."""
        answer = Answer(q.id, NOTHING_SEEN, q.text, round(q.t_s, 3), round(self.clock.input_t(q.t_s), 3),
                        round(1000 * (time.perf_counter() - q.asked_s), 1), 0, None, [], [])
        self.answered += 1
        if emit is not None:
            emit(answer)
        return answer

    def complete(self, a: Answering, pieces: list[str], ttft_s: float | None, emit: Emit | None = None) -> Output:
        """The answer from its decoded text pieces; `ttft_s` is None when the first token the model produced ended
        the answer (it came with the last forward). Times count from the question's arrival."""
        q = a.question
        elapsed = time.perf_counter() - q.asked_s
        ttft = elapsed if ttft_s is None else ttft_s
        text = "".join(pieces).strip()
        if self.config.generation.dialogue_turns:  # (a deque with maxlen None would keep everything)
            self.dialogue.append((q.text, text))
        retrieved = sorted(a.retrieved, key=lambda b: b.t_start_s)
        spans = [(b.t_start_s, b.t_end_s) for b in retrieved]
        if a.window and a.span_s is not None:
            spans.append(a.span_s)
        decode_s = elapsed - ttft
        answer = Answer(
            q.id, text, q.text, t_s=round(q.t_s, 3), input_t_s=round(self.clock.input_t(q.t_s), 3),
            ttft_ms=round(1000 * ttft, 1), tokens=len(pieces),
            tokens_per_s=round((len(pieces) - 1) / decode_s, 1) if len(pieces) > 1 and decode_s > 0 else None,
            evidence_t_s=[[round(x, 2), round(y, 2)] for x, y in spans], retrieved_blocks=[b.id for b in retrieved],
            dialogue_turns_dropped=a.turns_dropped or None,
            prompt_tokens=int(self.adapter.token_ids(a.prompt).shape[-1]), context_tokens=a.context.n_tokens)
        self.answered += 1
        if emit is not None:
            emit(answer)
        return answer

    def handle(self, q: Question, emit: Emit | None = None, snap: WindowSnapshot | None = None) -> Output:
        """`begin`, and for a question to answer the answer decoded at once on this thread (token pieces emitted as
        they come): for direct callers; the engine batches the decoding of many streams instead."""
        a = self.begin(q, emit, snap)
        if isinstance(a, Output):
            return a
        ttft = None
        pieces: list[str] = []
        for piece in self.adapter.generate(a.context, a.prompt, self.config.generation.max_new_tokens):
            if ttft is None:
                ttft = time.perf_counter() - q.asked_s
            pieces.append(piece)
            if emit is not None and piece:
                emit(Token(q.id, piece))
        return self.complete(a, pieces, ttft if pieces else None, emit)

    answer = handle

    def probe(self, q: Question, snap: WindowSnapshot | None = None) -> Output:
        """p(yes) for a yes/no question about now: one forward on the window snapshot (no retrieval)."""
        snap = snap or self.window.snapshot()
        context = layout(snap.sinks, (), snap.blocks, self.adapter.positions, snap.state)
        p_yes = self.adapter.probe(context, q.text)
        return ProbeResult(q.id, "yes" if p_yes >= 0.5 else "no", q.text, round(q.t_s, 3), round(p_yes, 4))

    # ---- speaking up ------------------------------------------------------------------------------------
    def probe_rows(self, emit: Emit, limit: int, budget: int | None = None,
                   at_least_one: bool = True) -> list[tuple[Trigger, Context, str]]:
        """Up to `limit` trigger probes due on the newest chunk, each with the context it looks at and its
        question, for a batched forward (a new chunk starts a round: at most decision_hz rounds per stream
        second; triggers whose scene the change gate finds unchanged keep their last score without a forward,
        which may fire them: emitted). `budget`: the prompt tokens the rows may cost together (`Trigger.tokens`),
        the first row taken whatever it costs when `at_least_one`; the others wait for a later step. Empty when
        none is due or none fits."""
        r = self._current(emit)
        if r is None or not r.todo:
            return []
        n, cost = 0, 0
        for tr in r.todo[:limit]:
            if budget is not None and cost + tr.tokens > budget and not (n == 0 and at_least_one):
                break
            n, cost = n + 1, cost + tr.tokens
        if n == 0:
            return []
        batch, r.todo = r.todo[:n], r.todo[n:]
        self._scored = r
        rows = [(tr, r.context(r.since(tr), self.adapter.positions), tr.probe.question) for tr in batch]
        self._close_round()
        return rows

    def apply_scores(self, rows: list[tuple[Trigger, Context, str]], scores: list[float], emit: Emit) -> None:
        """The p(yes) of `probe_rows`' rows, in order: each trigger's score, its firing rule, alerts."""
        r = self._scored
        self.probe_forwards += 1
        self.probes_run += len(rows)
        for (tr, _, _), p_yes in zip(rows, scores, strict=True):
            self._update(tr, 1.0 - p_yes if tr.probe.negate else p_yes, r, emit)

    def narration_look(self, emit: Emit) -> tuple[Context, str] | None:
        """The context and prompt of a narration look due on the newest chunk (after its probes), or None."""
        r = self._current(emit)
        if r is None or r.todo or not r.narrate:
            return None
        r.narrate = False
        self._looking = r
        self._close_round()
        t = int(r.t_s)
        prompt = self.adapter.prompt(self.config.narration.prompt.replace("{mmss}", f"{t // 60:02d}:{t % 60:02d}"))
        return r.context(0, self.adapter.positions), prompt

    def offer(self, text: str, emit: Emit) -> None:
        """The decoded text of the last `narration_look`: said when the narration policy finds it new."""
        r = self._looking
        if self.narration.offer(text, r.scene, r.t_s):
            self.remarks += 1
            emit(Narration(round(r.t_s, 3), self.narration.last_text))

    @property
    def deciding(self) -> bool:
        """A round of decisions on the newest chunk is under way (probes or a narration look left)."""
        return self._round is not None

    def _current(self, emit: Emit) -> _Round | None:
        if self._round is None:
            self._round = self._plan(emit)
        return self._round

    def _close_round(self) -> None:
        r = self._round
        if r is not None and not r.todo and not r.narrate:
            self._round = None

    def _plan(self, emit: Emit) -> _Round | None:
        snap = self.window.snapshot()
        block = next((b for b in reversed(snap.blocks) if b.speech is None), None)  # the newest chunk
        if block is None or block.id == self._seen_block:
            return None
        self._seen_block = block.id
        t_s = max(block.t_start_s, block.t_end_s - 1.0 / self.config.fps)  # the chunk's last frame
        hz = self.config.triggers.decision_hz
        if hz is not None and self._last_decision_s is not None and t_s - self._last_decision_s < 1.0 / hz - 1e-9:
            return None
        self._last_decision_s = t_s
        r = _Round(block, t_s, scene_features(block))
        active = [tr for tr in self.triggers.active() if tr.heard is None]
        if active:
            if self.gate.should_look(r.scene, t_s):
                self.gate.look(r.scene, t_s)
                r.todo = active
            else:
                self.gate.skip()
                r.todo = [tr for tr in active if tr.score is None]  # new triggers are probed at once
                for tr in active:
                    if tr.score is not None:  # unchanged scene: the last score holds for this chunk too
                        self.probes_skipped += 1
                        self._update(tr, tr.score, r, emit)
        r.narrate = self.narration is not None and self.narration.due(r.scene, t_s)
        if not r.todo and not r.narrate:
            return None
        r.snap = snap
        # triggers that look from the same block share one context: rows in that order reuse its layout
        r.todo.sort(key=r.since)
        return r

    def _update(self, tr: Trigger, score: float, r: _Round, emit: Emit) -> None:
        if tr.id not in self.triggers:  # unwatched while its probe ran
            return
        if self.on_score is not None:
            self.on_score(tr.id, r.t_s, float(score), r.scene)
        tr.score, tr.score_t_s = score, r.t_s
        fired = tr.rule.update(score, r.t_s)
        if tr.rule.streak == 1:
            tr.streak_start_s = r.block.t_start_s
        if not fired:
            return
        tr.alerts += 1
        self.alerts += 1
        if tr.once:
            self.triggers.remove(tr.id)
        start = tr.streak_start_s if tr.streak_start_s is not None else r.block.t_start_s
        emit(Alert(tr.id, tr.condition, round(r.t_s, 3), round(score, 4),
                   [[round(start, 2), round(r.block.t_end_s, 2)]], tr.probe.statement))

    def hear(self, block: Block, emit: Emit) -> None:
        """A speech block has entered the window: the triggers on what is heard that its words meet fire, at the
        end of the utterance, with its words as "heard"."""
        quiet_s = block.t_start_s - self._last_speech_s if self._last_speech_s is not None else float("inf")
        self._last_speech_s = max(block.t_end_s, self._last_speech_s or 0.0)
        for tr in self.triggers.active():
            if tr.heard is None or not tr.heard.matches(block.speech, quiet_s):
                continue
            tr.score, tr.score_t_s = 1.0, block.t_end_s
            tr.alerts += 1
            self.alerts += 1
            if tr.once:
                self.triggers.remove(tr.id)
            emit(Alert(tr.id, tr.condition, round(block.t_end_s, 3), 1.0,
                       [[round(block.t_start_s, 2), round(block.t_end_s, 2)]], tr.probe.statement, heard=block.speech))

    def stats(self) -> dict:
        return {"triggers_active": len(self.triggers), "probes_run": self.probes_run,
                "probes_skipped": self.probes_skipped, "probe_forwards": self.probe_forwards,
                "alerts": self.alerts, "remarks": self.remarks}

    def retrieve(self, q: Question, snap: WindowSnapshot) -> tuple[list[Block], bool]:
        """Top-k memory blocks by the embedder's vectors (the model's own by default); for a question that names
        an older stream time ("at 03:12", "two minutes ago"), the blocks at that time instead; none for a question
        about the present moment (`scope.about_now`, unless `retrieve_for_now`). Also says whether the question
        named a time."""
        k = self.config.memory.top_k
        if self.memory is None or k == 0 or len(self.memory) == 0:
            return [], False
        window_start = snap.span_s[0] if snap.span_s else float("inf")
        chunk_s = self.config.frames_per_chunk / self.config.fps
        times = [t for t in stream_times(q.text, q.t_s) if t < window_start]
        if not times and not self.config.memory.retrieve_for_now and about_now(q.text):
            return [], False
        if times:  # the question says when to look: the blocks at those times, not the nearest vectors
            ids = [i for t in times for i in self.memory.ids_at(t, pad_s=chunk_s / 2)]
        else:
            vector = self.embedder.question_vector(q.text)
            # about what was said: the speech blocks saying its words (or nearest to it) first
            ids = self.memory.speech.search(q.text, vector, k) if about_speech(q.text) else []
            ids += [i for i, _ in self.memory.search(vector, k)]
        in_window = {b.id for b in snap.blocks}  # evicted after the snapshot was taken: already in the context
        unique = [i for i in dict.fromkeys(ids) if i not in in_window][:k]
        devices = [k.device for k in snap.sinks.keys]  # one per layer (a device_map may spread them)
        blocks = []
        for i in unique:
            try:
                blocks.append(self.memory.load(i, devices))
            except KeyError:  # dropped by ingest (disk cap) since the search: answer without it
                continue
        return blocks, bool(times)
