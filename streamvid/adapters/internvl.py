"""InternVL3.5 in the transformers-native `-HF` format (`InternVLForConditionalGeneration`, model_type `internvl`):
an InternViT vision tower whose 448 x 448 tile becomes 256 tokens by pixel shuffle, a Qwen text model with 1-D
RoPE.

The processor writes a video as `Frame1: <img><IMG_CONTEXT>*256</img>\\nFrame2: ...` (one tile per frame, never
split into more). A chunk is the processor's own expansion of the chat template's video placeholder (`<video>\\n`)
for its frames: frames numbered from 1 within each chunk, as the processor numbers the frames of a video, and no
time in the tokens. The conversation text is the chat template's (`TemplateChat`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from streamvid.adapters.chunk_inputs import ChunkInputs
from streamvid.adapters.hf import HFVideoAdapter
from streamvid.adapters.template_chat import TemplateChat


class InternVLAdapter(TemplateChat, HFVideoAdapter):
    """See `VideoLLMAdapter`."""

    model_types = ("internvl",)
    position_axes = 1
    frames_per_chunk_multiple = 1
    stop_tokens = ("<|im_end|>", "<|endoftext|>")

    def __init__(self, model: str, device: str = "cpu", dtype: str = "auto", index_layer: int = 0,
                 trust_remote_code: bool = False, **options):
        super().__init__(model, device=device, dtype=dtype, index_layer=index_layer,
                         trust_remote_code=trust_remote_code, **options)
        self.read_template(model)
        self.video_pad_id = self.model.config.image_token_id  # frames fill <IMG_CONTEXT> tokens
        self.side = math.isqrt(self.processor.image_seq_length)
        self._check_layout(model)

    def chunk_inputs(self, frames: Sequence[np.ndarray], seconds_per_chunk: float,
                     t_start_s: float = 0.0) -> ChunkInputs:
        return self.chunk_inputs_batch([(frames, seconds_per_chunk, t_start_s)])[0]

    def chunk_inputs_batch(self, clips: Sequence[tuple[Sequence[np.ndarray], float, float]]) -> list[ChunkInputs]:
        """One processor call per frame count among the clips (its video output stacks videos of one length): the
        placeholder expanded per clip; `pixel_values` holds a clip's frames in order (one tile each)."""
        by_count: dict[int, list[int]] = {}
        for i, (frames, _, _) in enumerate(clips):
            by_count.setdefault(len(frames), []).append(i)
        chunks: list[ChunkInputs | None] = [None] * len(clips)
        for count, rows in by_count.items():
            out = self.processor(text=[self.video_text] * len(rows), videos=[np.stack(clips[i][0]) for i in rows],
                                 return_tensors="pt", add_special_tokens=False, padding=True)
            for r, i in enumerate(rows):
                ids = out["input_ids"][r][out["attention_mask"][r].bool()].view(1, -1)
                n = ids.shape[1]
                vision = {"pixel_values": self._to_model(out["pixel_values"][r * count:(r + 1) * count])}
                chunks[i] = ChunkInputs(ids, torch.arange(n).view(1, n), n, vision, ids[0] == self.video_pad_id,
                                        (count, self.side, self.side))
        return chunks

    def offline_generate(self, frames: Sequence[np.ndarray], question: str, max_new_tokens: int,
                         fps: float = 2.0) -> list[int]:
        """What an offline video-LLM does per question (the re-encoding baseline of `streamvid bench`): the chat
        template's conversation (system prompt, a video, the question) with all `frames` as one video (one tile
        each; the processor writes no times, so `fps` changes nothing), prepared by the HF processor and decoded
        greedily by HF `generate` from an empty cache. Returns the generated token ids."""
        inputs = self.processor(text=[self.render(question)], videos=[np.stack(frames)], do_sample_frames=False,
                                return_tensors="pt")
        inputs = {k: self._to_model(v) if k == "pixel_values" else v.to(self.device) for k, v in inputs.items()}
        with self.lock, torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        return out[0, inputs["input_ids"].shape[1]:].tolist()

    def _check_layout(self, model: str) -> None:
        """At load: the processor's tokens for a one-frame chunk are as many as the projector's features per tile,
        or loading fails in one line."""
        cfg = self.model.config
        size, patch = cfg.vision_config.image_size, cfg.vision_config.patch_size
        features = round((size[0] // patch[0]) * (size[1] // patch[1]) * cfg.downsample_ratio ** 2)
        chunk = self.chunk_inputs([np.zeros((size[0], size[1], 3), np.uint8)], 1.0)
        if int(chunk.video_mask.sum()) != features or self.side ** 2 != features:
            raise ValueError(f"cannot load model {model!r}: its processor writes {int(chunk.video_mask.sum())} image "
                             f"tokens for a frame whose vision features are {features}")
