"""Qwen3.5 (`Qwen3_5ForConditionalGeneration`, model_type `qwen3_5`): a hybrid decoder, Qwen3-VL's vision tower.

Three of every four decoder layers are Gated DeltaNet (linear attention): each folds every token it sees into a
fixed-size state (a 4-tap convolution's history and a delta-rule matrix per head) instead of keeping per-token K/V;
every fourth layer is gated full attention with partial interleaved M-RoPE (a quarter of each head rotary). So a
block, the window and long-term memory hold K/V of the attention layers only (`kv_layer_ids`; `kv_shape` counts
them), and each stream carries the linear layers' state after its newest block (kv/recurrent_state.py), which every
chunk encoded on the window advances. A context is the attention layers' K/V plus that state; the forward's cache
gets a copy of the state (adapters/kv_cache.py `buffered_cache`), so an answer, a trigger probe or a look never
advances the stream's own.

Chunks are the processor's own (Qwen3-VL's: a timestamp and a vision wrapper per temporal patch, `Qwen3VLAdapter`);
the conversation text is the checkpoint's chat template (sink text before the video, `prompt` after it: with
thinking off, Qwen3.5's template opens the answer with an empty `<think></think>`).

Rows of several streams: the batched forwards left-pad rows with fewer new tokens, and a linear layer cannot skip
padding the way masked attention does (its convolution shifts the padding in and each padded step decays the
state), so a padded row's state would not be the row's own. So chunk encodes are batched only among rows with as
many new tokens (`encode_chunks`: same frame size and timestamp length, the common case of streams at one frame
size; their contexts may differ in length, masked in the attention layers, not seen by the linear ones), probes
among rows whose prompts have as many tokens (`probe_rows`: one trigger on several streams), and answers one row at
a time (`decode`: their prompts differ in length).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

from streamvid.adapters import batching
from streamvid.adapters.qwen3_vl import Qwen3VLAdapter
from streamvid.adapters.template_chat import PROBE_QUESTION, messages
from streamvid.types import ChunkJob, Context, Encoded

VIDEO_MARK = "<|vision_start|><|video_pad|><|vision_end|>"  # a video in the chat template, expanded by the processor


class Qwen3_5Adapter(Qwen3VLAdapter):
    """See `VideoLLMAdapter`."""

    model_types = ("qwen3_5",)

    @cached_property
    def _chat(self) -> tuple[str, str]:
        """(sink text, the text up to the question) of the chat template's conversation with a video."""
        rendered = self.render(PROBE_QUESTION)
        at = rendered.find(VIDEO_MARK)
        if at < 0 or rendered.find(PROBE_QUESTION, at) < 0:
            raise ValueError(f"the chat template writes no {VIDEO_MARK} before the question of a user turn")
        return rendered[:at], rendered[:at + len(VIDEO_MARK)]

    def render(self, question: str, dialogue: Sequence[tuple[str, str]] = ()) -> str:
        return self.processor.apply_chat_template(messages(question, dialogue), add_generation_prompt=True,
                                                  tokenize=False)

    @property
    def sink_text(self) -> str:
        return self._chat[0]

    def prompt(self, question: str, dialogue: Sequence[tuple[str, str]] = ()) -> str:
        """The template's text after the video: earlier turns, the question, the answer header."""
        rendered, head = self.render(question, dialogue), self._chat[1]
        if not rendered.startswith(head):
            raise ValueError("the chat template renders this conversation with another opening")
        return rendered[len(head):]

    # ---- rows of several streams (see the module docstring) -----------------------------------------------
    def encode_chunks(self, jobs: Sequence[ChunkJob]) -> list[Encoded]:
        """Chunks with as many tokens each go in one forward (their contexts right-aligned, masked, in the attention
        layers; their states stacked in the linear ones, which see no padding); the others one forward per width."""
        return batching.encode_chunks(self, jobs, same_width=True)

    def probe_rows(self, rows: Sequence[tuple[Context, str]]) -> list[float]:
        """Probes whose prompts have as many tokens (the same trigger on several streams) in one forward each."""
        groups: dict[int, list[int]] = {}
        for i, (_, question) in enumerate(rows):
            groups.setdefault(int(self.token_ids(self.prompt(question)).shape[1]), []).append(i)
        out = [0.0] * len(rows)
        for members in groups.values():
            for i, p in zip(members, batching.probe_rows(self, [rows[i] for i in members]), strict=True):
                out[i] = p
        return out

    def decode(self, decodings: Sequence[batching.Decoding]) -> None:
        for d in decodings:
            batching.decode(self, [d])
