"""Ingest: one stream's frames -> chunks -> KV blocks in the window -> evicted to long-term memory.

The engine's scheduler (engine.py) drives it: `push` takes frames and sets complete chunks aside; `jobs` says what
the oldest complete chunk needs encoded (on the window, and on the sinks alone when memory keeps that encoding);
the scheduler encodes the jobs of many streams in one batched forward and hands each stream its results through
`commit`, which puts the block in the window and the blocks it evicts in memory.

Thread contract: the scheduler's thread alone calls `push`, `flush`, `jobs`, `commit` and `tail`. `latest_t_s`
and `stats()` may be read from any thread (plain attribute reads). `lock` is held while a new block enters the
window and evicted blocks enter memory, so a session snapshot (session_store.save) taken under it sees every
block exactly once. Chunks are encoded on the window's own device copy of sinks + window (`KVWindow.encoding_context`).

Stream time: frames and utterances come on their input's clock and cross the stream's (`clock.StreamClock`) here,
once: plus the session time at which this input started (0 for a fresh session; where the previous run ended for a
resumed one).

Speech: utterances heard in the stream's sound (audio/listener.py) wait in `hear`'s queue and become speech blocks
(`speech_job`, `commit_speech`): the words as one line of text (`speech_line`) encoded on the window like a chunk,
in time order among the chunks: an utterance goes in before the first waiting chunk that starts after it ends.
When `wait_for_sound` is set (a replay), a chunk also waits until the sound has been heard up to its start
(`heard`), so a replay lays speech and frames out the same way whatever the recogniser's speed; live, nothing
waits for the recogniser and an utterance goes in as soon as it is transcribed (after the complete chunks that start
before it ends: never after a frame still to come, so speech is heard on a stream whose frames stopped).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from streamvid.adapters.base import VideoLLMAdapter
from streamvid.adapters.embedders import Embedder, ModelEmbedder
from streamvid.adapters.retrieval import default_memory_encoding
from streamvid.config import EngineConfig
from streamvid.engine.clock import StreamClock
from streamvid.kv.memory import LongTermMemory
from streamvid.kv.positions import concat, move_block
from streamvid.kv.window import Block, KVWindow
from streamvid.types import ChunkJob, Context, Encoded, Frame, Utterance


class Ingest:
    def __init__(self, config: EngineConfig, adapter: VideoLLMAdapter, window: KVWindow,
                 memory: LongTermMemory | None, embedder: Embedder | None = None, clock: StreamClock | None = None):
        if config.frames_per_chunk % adapter.frames_per_chunk_multiple:
            raise ValueError(f"frames_per_chunk must be a multiple of {adapter.frames_per_chunk_multiple}, "
                             f"got {config.frames_per_chunk}")
        self.config = config
        self.adapter = adapter
        self.window = window
        self.memory = memory
        self.embedder = embedder or ModelEmbedder(adapter)  # gives each block its retrieval vector
        self.memory_encoding = config.memory.encoding or default_memory_encoding(config.model)
        self.source = None  # the input a live run reads (its drops and outages are part of `stats`)
        self.on_block: Callable[[Block], None] | None = None  # called with each block once it is in the window
        self._pending: list[Frame] = []
        self._ready: deque[list[Frame]] = deque()  # complete chunks waiting for their forward, oldest first
        self._latest: Frame | None = None
        self._next_id = 0
        self.lock = threading.Lock()
        self._speech: deque[Utterance] = deque()  # heard, not in the window yet, in time order
        self.wait_for_sound = False  # a replay: a chunk waits until the sound is heard up to its start
        self.has_sound = False  # the input's sound is being heard: the stream ends once it is heard to its end
        self.input_ended = False  # no more frames will come (the stream is finishing)
        self.heard_until_s = float("inf")  # stream time up to which the sound has been transcribed (session clock)
        self.speech_blocks = 0
        self.clock = clock or StreamClock()  # the stream's: frames and utterances cross it here, once
        self.latest_t_s = 0.0
        self.frames_in = 0
        self.blocks_encoded = 0
        self.encode_s = 0.0

    def push(self, frame: Frame) -> None:
        """Take one frame; a chunk's last frame sets the chunk aside for encoding."""
        frame = self.clock.frame(frame)
        self._pending.append(frame)
        self._latest = frame
        self.frames_in += 1
        self.latest_t_s = frame.t_s
        if len(self._pending) == self.config.frames_per_chunk:
            self.flush()

    def flush(self) -> None:
        """Set the pending frames aside as one chunk (at the end of an input: a short chunk, padded by repeating
        its last frame when it is encoded)."""
        if self._pending:
            self._ready.append(self._pending)
            self._pending = []

    @property
    def chunks_waiting(self) -> int:
        """Complete chunks not encoded yet."""
        return len(self._ready)

    @property
    def chunk_ready(self) -> bool:
        """The oldest waiting chunk may be encoded now: no utterance has to go before it, and (wait_for_sound) the
        sound is heard up to its start."""
        if not self._ready:
            return False
        start = self._ready[0][0].t_s
        if self._speech and self._speech[0].t_end_s <= start:
            return False
        return not self.wait_for_sound or self.heard_until_s >= start - 1e-6

    def hear(self, utterance: Utterance) -> None:
        """An utterance for the window (scheduler's thread): its times are the input's, like a frame's."""
        self._speech.append(self.clock.utterance(utterance))

    def heard(self, t_s: float) -> None:
        """The sound is transcribed up to input time `t_s` (infinity: it has ended)."""
        self.heard_until_s = self.clock.stream_t(t_s)

    @property
    def speech_due(self) -> bool:
        """An utterance goes into the window before anything else waiting: it ended before the next complete chunk
        starts. A replay also waits for the chunk still being filled (its first frame is known, and its next frames
        come); live, that chunk may never complete (the frames stopped, or came ahead of the sound), so the
        utterance goes in at once."""
        if not self._speech:
            return False
        if self._ready:
            return self._speech[0].t_end_s <= self._ready[0][0].t_s
        if not self.wait_for_sound:
            return True
        if not self._pending:  # a replay: once the next frame shows where it goes (or the input has ended)
            return self.input_ended
        return self._speech[0].t_end_s <= self._pending[0].t_s

    @property
    def next_utterance(self) -> Utterance:
        return self._speech[0]

    def take_utterance(self) -> Utterance:
        """The oldest utterance, out of the queue without a speech block (a question to the assistant)."""
        return self._speech.popleft()

    @property
    def speech_waiting(self) -> int:
        return len(self._speech)

    def speech_tokens(self) -> int:
        """What the next speech block will cost a step's token budget (estimated from its characters)."""
        return len(speech_line(self._speech[0])) // 2 if self._speech else 0  # (an estimate: ~2+ characters a token)

    def speech_context(self) -> Context:
        """The context the next speech block is encoded on: sinks + window."""
        return self.window.encoding_context(room=0)

    def commit_speech(self, encoded: Encoded) -> Block:
        """The oldest utterance's speech block from its `encode_text` on `speech_context()`: into the window (the
        blocks it evicts into memory), emitted nowhere (the stream emits the transcript when it is heard)."""
        utt = self._speech.popleft()
        snap = self.window.snapshot()
        vector = self.embedder.question_vector(speech_line(utt))  # the words, in the space questions are in
        with self.lock:
            block = Block(id=self._next_id, t_start_s=utt.t_s, t_end_s=utt.t_end_s, keys=encoded.keys,
                          values=encoded.values, pos_start=snap.next_pos, pos_span=encoded.pos_span,
                          vector=vector, speech=utt.text)
            self._next_id += 1
            for old in self.window.append(block, encoded.state):  # a hybrid model's state advances with it
                if self.memory is not None:
                    self.memory.add(old.for_memory())
        self.speech_blocks += 1
        if self.on_block is not None:
            self.on_block(block)
        return block

    @property
    def pending_frames(self) -> int:
        """Frames taken in and not encoded yet (in waiting chunks and the unfinished one)."""
        return len(self._pending) + sum(len(c) for c in self._ready)

    def jobs(self) -> list[ChunkJob]:
        """What the oldest waiting chunk needs encoded, for one batched forward with other streams' jobs: the chunk
        on the window (sinks + window blocks), and with memory_encoding "sinks" the chunk again after the sinks
        alone (what long-term memory keeps). Empty when no chunk is waiting."""
        if not self._ready:
            return []
        frames = self._ready[0]
        snap = self.window.snapshot()
        room = snap.blocks[-1].n_tokens if snap.blocks else 0  # for a chunk as large as the newest one
        jobs = [self._job(frames, self.window.encoding_context(room=room))]
        if self.memory is not None and self.memory_encoding == "sinks":
            sinks = move_block(snap.sinks, snap.next_pos - snap.sinks.pos_span, self.adapter.positions)
            jobs.append(self._job(frames, concat([sinks], snap.next_pos)))
        return jobs

    @property
    def job_tokens(self) -> int:
        """What the oldest waiting chunk's `jobs` will cost a step's token budget, estimated from the newest block
        (its tokens, per job; 0 before the first block: a chunk's size is not known yet)."""
        snap = self.window.snapshot()
        rows = 2 if self.memory is not None and self.memory_encoding == "sinks" else 1
        return rows * (snap.blocks[-1].n_tokens if snap.blocks else 0)

    def commit(self, encoded: list[Encoded], encode_s: float = 0.0) -> Block:
        """The oldest waiting chunk's block from what its `jobs` gave (same order): into the window, the blocks it
        evicts into memory, positions rebased when they run far. `encode_s`: this chunk's share of the forward."""
        frames = self._ready.popleft()
        enc = encoded[0]
        snap = self.window.snapshot()
        vector = self.embedder.chunk_vector([f.image for f in frames], enc)  # the chunk's own frames, not padding
        alone = (encoded[1].keys, encoded[1].values) if len(encoded) > 1 else None
        with self.lock:
            block = Block(id=self._next_id, t_start_s=frames[0].t_s, t_end_s=frames[-1].t_s + 1.0 / self.config.fps,
                          keys=enc.keys, values=enc.values, pos_start=snap.next_pos, pos_span=enc.pos_span,
                          vector=vector, scene=enc.scene, memory_kv=alone)
            self._next_id += 1
            for old in self.window.append(block, enc.state):  # a hybrid model's state advances with it
                if self.memory is not None:
                    self.memory.add(old.for_memory())  # compacted, then copied to the host (stored_block.StoredBlock.of)
            snap = self.window.snapshot()
            # room before the window for the retrieved blocks of an answer (twice the largest block, per block)
            room = 2 * self.config.memory.top_k * max(b.pos_span for b in snap.blocks)
            if (snap.next_pos > self.config.window.rebase_after_pos
                    and snap.blocks[0].pos_start > snap.sinks.pos_span + room):
                self.window.rebase(self.adapter.positions.move, room)
        self.blocks_encoded += 1
        self.encode_s += encode_s
        if self.on_block is not None:
            self.on_block(block)
        return block

    def tail(self) -> Block | None:
        """The frames of the unfinished chunk, or the latest frame alone when no chunk is unfinished, encoded on top
        of the window as a block that is not kept (id -1), so that an answer at this moment ends on the moment
        itself: every frame so far, the newest block showing no frame older than the chunk in progress (a whole
        chunk blends its frames, and an object that left in its last frame would still be counted). The window
        and memory get every chunk whole once it completes, as they would had nobody asked. None before the
        first frame. Call it with no chunk waiting (the scheduler idle), as a replay does."""
        frames = list(self._pending) or ([self._latest] if self._latest is not None else [])
        if not frames:
            return None
        snap = self.window.snapshot()
        room = snap.blocks[-1].n_tokens if snap.blocks else 0
        enc = self.adapter.encode_chunks([self._job(frames, self.window.encoding_context(room=room))])[0]
        return Block(id=-1, t_start_s=frames[0].t_s, t_end_s=frames[-1].t_s + 1.0 / self.config.fps, keys=enc.keys,
                     values=enc.values, pos_start=snap.next_pos, pos_span=enc.pos_span, vector=None,
                     scene=enc.scene, state=enc.state)  # no vector: this block is never stored or searched

    def _job(self, frames: list[Frame], past) -> ChunkJob:
        """A chunk's frames on `past`; a short chunk is padded by repeating its last frame."""
        images = [f.image for f in frames]
        images += [images[-1]] * (self.config.frames_per_chunk - len(images))
        return ChunkJob(tuple(images), past, self.config.frames_per_chunk / self.config.fps, frames[0].t_s)

    @property
    def next_block_id(self) -> int:
        return self._next_id

    def resume_at(self, stream_t_s: float, next_block_id: int) -> None:
        """Continue a saved session: stream time from `stream_t_s` (the clock resumed there), block ids from
        `next_block_id`. Before any frame is pushed."""
        self.clock.resume(stream_t_s)
        self.latest_t_s = stream_t_s
        self._next_id = next_block_id

    def stats(self) -> dict:
        dropped = self.source.dropped if self.source is not None else 0
        return {"frames_in": self.frames_in, "frames_dropped": dropped, "blocks_encoded": self.blocks_encoded,
                "source_outages": getattr(self.source, "outages", 0),
                "source_lost_s": round(getattr(self.source, "lost_s", 0.0), 3),
                "ingest_frames_per_s": self.frames_in / self.encode_s if self.encode_s else None,
                "window_buffer_mb": round(self.window.buffer.nbytes / 2**20, 3)}


def speech_line(utterance: Utterance) -> str:
    """How an utterance reads in the context, among the video chunks: one timestamped line of text."""
    t = int(utterance.t_s)
    return f"\n[{t // 60:02d}:{t % 60:02d}] speech: {utterance.text}\n"
