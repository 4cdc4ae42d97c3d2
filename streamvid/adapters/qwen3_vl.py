"""Qwen3-VL (`Qwen3VLForConditionalGeneration`): interleaved M-RoPE and timestamp tokens between frames.

Qwen3-VL does not put time into the temporal rotary position (every temporal patch of a video starts at the
text position where it stands); it reads time from text. Its chat template writes a video as
`<|vision_start|><|video_pad|><|vision_end|>` and the HF processor expands the pad into `<{t:.1f} seconds>`
`<|vision_start|> pads <|vision_end|>` per temporal patch, t being the mean time of the patch's frames. A chunk
is one such video, written from its stream time, so a chunk encoded live carries the tokens the processor writes
for those frames at that time in the clip (tests compare the two). Interleaved M-RoPE still rotates every
frequency by one position component, so blocks move by the shared rotation (`positions.RopePositions`); deepstack
features are injected by the model's own forward over each chunk's video tokens.
"""

from __future__ import annotations

from streamvid.adapters.qwen2_5_vl import QwenVLAdapter


class Qwen3VLAdapter(QwenVLAdapter):
    model_types = ("qwen3_vl",)
    uses_stream_time = True

    def _chunk_token_ids(self, n_patches: int, per_patch: int, t_start_s: float, seconds_per_frame: float) -> list[int]:
        ids: list[int] = [self.vision_start_id]  # the chat template's own wrapper around a video, kept by the processor
        k = self.frames_per_chunk_multiple
        for j in range(n_patches):
            first, last = t_start_s + j * k * seconds_per_frame, t_start_s + ((j + 1) * k - 1) * seconds_per_frame
            ids += self.tokenizer.encode(timestamp_text((first + last) / 2), add_special_tokens=False)
            ids += [self.vision_start_id] + [self.video_pad_id] * per_patch + [self.vision_end_id]
        return ids + [self.vision_end_id]


def timestamp_text(t_s: float) -> str:
    """The text Qwen3-VL's processor writes before a temporal patch whose frames are, on average, at t_s."""
    return f"<{t_s:.1f} seconds>"
