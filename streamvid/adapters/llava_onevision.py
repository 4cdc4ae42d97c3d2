"""LLaVA-OneVision (`LlavaOnevisionForConditionalGeneration`): a SigLIP vision tower, a Qwen2 language model with
1-D RoPE, and video pooling (each frame's patch grid is bilinearly halved, and one `image_newline` feature ends
each video).

A chunk is one video of its frames: `<video>` repeated as many times as the HF processor expands it (frames x
pooled grid + 1 newline feature), then `\\n` as its chat template writes after each video, at consecutive 1-D
positions. The processor's own expansion and the model's own pooling are used; nothing about either is
re-derived here. `LlavaVideoAdapter` is shared with LLaVA-NeXT-Video.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from streamvid.adapters.chunk_inputs import ChunkInputs
from streamvid.adapters.hf import ChatMLAdapter, HFVideoAdapter


class LlavaVideoAdapter(HFVideoAdapter):
    """A LLaVA-style model: video features replace `<video>` tokens in a 1-D RoPE language model."""

    position_axes = 1
    frames_per_chunk_multiple = 1
    chunk_text_suffix = ""  # text after each chunk's video tokens, as the chat template writes it after a video

    def __init__(self, model: str, device: str = "cpu", dtype: str = "auto", index_layer: int = 0,
                 trust_remote_code: bool = False, **options):
        super().__init__(model, device=device, dtype=dtype, index_layer=index_layer,
                         trust_remote_code=trust_remote_code, **options)
        self._video_token = self.processor.video_token
        self.video_pad_id = self.model.config.video_token_id

    def chunk_inputs(self, frames: Sequence[np.ndarray], seconds_per_chunk: float,
                     t_start_s: float = 0.0) -> ChunkInputs:
        inputs = self.processor(text=self._video_token + self.chunk_text_suffix, videos=[np.stack(frames)],
                                return_tensors="pt", add_special_tokens=False, do_sample_frames=False)
        ids = inputs["input_ids"]
        n = ids.shape[1]
        vision = {"pixel_values_videos": self._to_model(inputs["pixel_values_videos"])}
        return ChunkInputs(ids, torch.arange(n).view(1, n), n, vision, ids[0] == self.video_pad_id)


class LlavaOnevisionAdapter(LlavaVideoAdapter, ChatMLAdapter):
    """Its chat template is ChatML with `<video>\\n` per video in the user turn: a chunk is one such video."""

    model_types = ("llava_onevision",)
    chunk_text_suffix = "\n"
