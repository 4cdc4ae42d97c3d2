"""ReasoningWorker (thread "streamvid-reasoning"): questions -> retrieval -> answer on a snapshot of the window.

Thread contract: only the reasoning thread calls `step` and `answer` (or the caller's thread in
`StreamingAssistant.run_simulated`). It reads the window through `snapshot()` and never mutates it; it reads
memory through its locked methods. The dialogue deque is touched by this thread only.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections import deque
from collections.abc import Callable

from streamvid.adapters.base import VideoLLMAdapter
from streamvid.config import EngineConfig
from streamvid.kv_window import Block, KVWindow, WindowSnapshot
from streamvid.memory import LongTermMemory
from streamvid.positions import layout
from streamvid.types import Output, Question

_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10, "fifteen": 15, "twenty": 20, "thirty": 30, "forty": 40,
                 "fifty": 50, "sixty": 60}
_CLOCK = re.compile(r"\b(?:(\d+):)?(\d{1,2}):(\d{2})\b")
_AGO = re.compile(r"\b(\d+(?:\.\d+)?|" + "|".join(_NUMBER_WORDS) + r")\s+(second|sec|minute|min|hour)s?\s+ago\b",
                  re.IGNORECASE)
_UNIT_S = {"second": 1, "sec": 1, "minute": 60, "min": 60, "hour": 3600}


def stream_times(text: str, now_s: float) -> list[float]:
    """Stream times a question names: "at 03:12", "at 1:02:03", "two minutes ago", "30 seconds ago"."""
    times = [int(h or 0) * 3600 + int(m) * 60 + int(s) for h, m, s in _CLOCK.findall(text)]
    for amount, unit in _AGO.findall(text):
        n = _NUMBER_WORDS.get(amount.lower()) or float(amount)
        times.append(now_s - n * _UNIT_S[unit.lower()])
    return [float(t) for t in times if 0 <= t <= now_s]


class ReasoningWorker:
    def __init__(self, config: EngineConfig, adapter: VideoLLMAdapter, window: KVWindow,
                 memory: LongTermMemory | None, questions: queue.Queue, outputs: queue.Queue, stop: threading.Event):
        self.config = config
        self.adapter = adapter
        self.window = window
        self.memory = memory
        self.questions = questions
        self.outputs = outputs
        self.stop = stop
        self.dialogue: deque[tuple[str, str]] = deque(maxlen=config.dialogue_turns or None)
        self.answered = 0

    def step(self) -> bool:
        """Answer the next question if one arrives within the read timeout. True if one was answered."""
        try:
            q = self.questions.get(timeout=self.config.read_timeout_s)
        except queue.Empty:
            return False
        self.answer(q, self.outputs.put)
        return True

    def answer(self, q: Question, emit: Callable[[Output], None] | None = None) -> Output:
        snap = self.window.snapshot()
        retrieved, at_times = self.retrieve(q, snap)
        # a question about an older moment ("what was on screen at 03:12?") is answered from that moment alone
        window = [] if at_times and retrieved else snap.blocks
        context = layout(snap.sinks, retrieved, window, self.adapter.rope_inv_freq)
        prompt = self.adapter.prompt(q.text, list(self.dialogue))
        t0 = time.perf_counter()
        ttft = None
        pieces: list[str] = []
        for piece in self.adapter.generate(context, prompt, self.config.max_new_tokens, self.stop):
            if ttft is None:
                ttft = time.perf_counter() - t0
            pieces.append(piece)
            if emit is not None and piece:
                emit(Output("token", q.id, piece))
        elapsed = time.perf_counter() - t0
        text = "".join(pieces).strip()
        if self.config.dialogue_turns:  # (a deque with maxlen None would keep everything)
            self.dialogue.append((q.text, text))
        spans = [(b.t_start_s, b.t_end_s) for b in sorted(retrieved, key=lambda b: b.t_start_s)]
        if window and snap.span_s is not None:
            spans.append(snap.span_s)
        decode_s = elapsed - (ttft or 0.0)
        answer = Output("answer", q.id, text, {
            "question": q.text,
            "t_s": round(q.t_s, 3),
            "ttft_ms": round(1000 * ttft, 1) if ttft is not None else None,
            "tokens": len(pieces),
            "tokens_per_s": round((len(pieces) - 1) / decode_s, 1) if len(pieces) > 1 and decode_s > 0 else None,
            "evidence_t_s": [[round(a, 2), round(b, 2)] for a, b in spans],
            "retrieved_blocks": [b.id for b in sorted(retrieved, key=lambda b: b.t_start_s)],
        })
        self.answered += 1
        if emit is not None:
            emit(answer)
        return answer

    def probe(self, q: Question) -> Output:
        """p(yes) for a yes/no question about now: one forward on the window snapshot (no retrieval)."""
        snap = self.window.snapshot()
        context = layout(snap.sinks, (), snap.blocks, self.adapter.rope_inv_freq)
        p_yes = self.adapter.probe(context, q.text)
        return Output("probe", q.id, "yes" if p_yes >= 0.5 else "no",
                      {"question": q.text, "t_s": round(q.t_s, 3), "p_yes": round(p_yes, 4)})

    def retrieve(self, q: Question, snap: WindowSnapshot) -> tuple[list[Block], bool]:
        """Top-k memory blocks by the model's own vectors; for a question that names an older stream time
        ("at 03:12", "two minutes ago"), the blocks at that time instead. Also says which of the two it was."""
        k = self.config.memory_top_k
        if self.memory is None or k == 0 or len(self.memory) == 0:
            return [], False
        window_start = snap.span_s[0] if snap.span_s else float("inf")
        chunk_s = self.config.frames_per_chunk / self.config.fps
        times = [t for t in stream_times(q.text, q.t_s) if t < window_start]
        if times:  # the question says when to look: the blocks at those times, not the nearest vectors
            ids = [i for t in times for i in self.memory.ids_at(t, pad_s=chunk_s / 2)]
        else:
            ids = [i for i, _ in self.memory.search(self.adapter.question_vector(q.text), k)]
        in_window = {b.id for b in snap.blocks}  # evicted after the snapshot was taken: already in the context
        unique = [i for i in dict.fromkeys(ids) if i not in in_window][:k]
        device = snap.sinks.keys[0].device
        blocks = []
        for i in unique:
            try:
                blocks.append(self.memory.load(i, device))
            except KeyError:  # dropped by ingest (disk cap) since the search: answer without it
                continue
        return blocks, bool(times)
