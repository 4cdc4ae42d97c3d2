"""Qwen3-VL (`Qwen3VLForConditionalGeneration`): interleaved M-RoPE and timestamp tokens between frames.

Qwen3-VL does not put time into the temporal rotary position (every temporal patch of a video starts at the
text position where it stands); it reads time from text: its processor writes a `<{t:.1f} seconds>` timestamp,
t being the mean time of the patch's frames, and a vision wrapper per temporal patch. A chunk is what the installed
processor writes for the chat template's video placeholder with the chunk's frames at their stream times
(`QwenVLAdapter.chunk_inputs_batch`), so a chunk encoded live carries the tokens the processor writes for those
frames at that time in the clip. Interleaved M-RoPE still rotates every frequency by one position component, so
blocks move by the shared rotation (`positions.RopePositions`); deepstack features are injected by the model's own
forward over each chunk's video tokens.
"""

from __future__ import annotations

from streamvid.adapters.qwen2_5_vl import QwenVLAdapter


class Qwen3VLAdapter(QwenVLAdapter):
    model_types = ("qwen3_vl",)
    uses_stream_time = True
