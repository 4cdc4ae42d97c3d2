"""Qwen3-VL (`Qwen3VLForConditionalGeneration`): interleaved M-RoPE and timestamp tokens between frames.

Qwen3-VL does not put time into the temporal rotary position (every temporal patch of a video starts at the
text position where it stands); it reads time from text: the processor writes `<{t:.1f} seconds>` before each
temporal patch's `<|vision_start|> ... <|vision_end|>`, t being the mean stream time of the patch's frames. The
adapter writes the same text from the chunk's stream time, so a chunk encoded live carries the time the model
would see in the whole clip. Interleaved M-RoPE still rotates every frequency by one position component, so
blocks move by the shared rotation (`positions.RopePositions`); deepstack features are injected by the model's
own forward over each chunk's video tokens.
"""

from __future__ import annotations

from streamvid.adapters.qwen2_5_vl import QwenVLAdapter


class Qwen3VLAdapter(QwenVLAdapter):
    model_types = ("qwen3_vl",)
    uses_stream_time = True

    def _chunk_token_ids(self, n_patches: int, per_patch: int, t_start_s: float, seconds_per_frame: float) -> list[int]:
        ids: list[int] = []
        k = self.frames_per_chunk_multiple
        for j in range(n_patches):
            first, last = t_start_s + j * k * seconds_per_frame, t_start_s + ((j + 1) * k - 1) * seconds_per_frame
            ids += self.tokenizer.encode(timestamp_text((first + last) / 2), add_special_tokens=False)
            ids += [self._vision_start] + [self._video_pad] * per_patch + [self._vision_end]
        return ids


def timestamp_text(t_s: float) -> str:
    """The text Qwen3-VL's processor writes before a temporal patch whose frames are, on average, at t_s."""
    return f"<{t_s:.1f} seconds>"
