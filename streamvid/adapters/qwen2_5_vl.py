"""Qwen2.5-VL and Qwen2-VL: chunk-by-chunk video prefill with explicit 3-D M-RoPE positions (the model's own
`get_rope_index` over the chunk's tokens, shifted to where the chunk starts). Everything else is shared with the
other families (`adapters/hf.py`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from streamvid.adapters.hf import SYSTEM_PROMPT, ChatMLAdapter, ChunkInputs, mean_queries

__all__ = ["SUPPORTED_MODEL_TYPES", "SYSTEM_PROMPT", "QwenVLAdapter", "mean_queries"]

SUPPORTED_MODEL_TYPES = ("qwen2_5_vl", "qwen2_vl")


class QwenVLAdapter(ChatMLAdapter):
    """See `VideoLLMAdapter`. A chunk is `<|vision_start|> <|video_pad|>*n <|vision_end|>`; its temporal positions
    follow the model's time scale (`second_per_grid_ts`: Qwen2.5-VL places a temporal patch by seconds, Qwen2-VL
    by index)."""

    model_types = SUPPORTED_MODEL_TYPES
    position_axes = 3

    def __init__(self, model: str, device: str = "cpu", dtype: str = "auto", index_layer: int = 0,
                 trust_remote_code: bool = False, **options):
        super().__init__(model, device=device, dtype=dtype, index_layer=index_layer,
                         trust_remote_code=trust_remote_code, **options)
        cfg = self.model.config
        self.frames_per_chunk_multiple = int(self.video_processor.temporal_patch_size)
        self.vision_start_id = cfg.vision_start_token_id
        self.vision_end_id = cfg.vision_end_token_id
        self.video_pad_id = cfg.video_token_id

    def chunk_inputs(self, frames: Sequence[np.ndarray], seconds_per_chunk: float,
                     t_start_s: float = 0.0) -> ChunkInputs:
        return self.chunk_inputs_batch([(frames, seconds_per_chunk, t_start_s)])[0]

    def chunk_inputs_batch(self, clips: Sequence[tuple[Sequence[np.ndarray], float, float]]) -> list[ChunkInputs]:
        """Every clip through one video-processor call (clips of any size and frame count): each chunk's pixel rows
        are its slice of the call's `pixel_values_videos` (the processor keeps the clips' order)."""
        video = self.video_processor(videos=[np.stack(frames) for frames, _, _ in clips], return_tensors="pt",
                                     do_sample_frames=False, cap_pixels_per_frame=True)
        grids, pixels = video["video_grid_thw"], video["pixel_values_videos"]  # (n, 3): temporal, height, width
        out, at = [], 0
        for i, (frames, seconds_per_chunk, t_start_s) in enumerate(clips):
            rows = int(grids[i].prod())
            out.append(self._chunk(len(frames), seconds_per_chunk, t_start_s, grids[i:i + 1], pixels[at:at + rows]))
            at += rows
        return out

    def _chunk(self, n_frames: int, seconds_per_chunk: float, t_start_s: float, grid: torch.Tensor,
               pixels: torch.Tensor) -> ChunkInputs:
        merge = int(self.video_processor.merge_size)
        n_t = int(grid[0, 0])
        per_patch = int(grid[0, 1:].prod()) // (merge * merge)
        seconds_per_frame = seconds_per_chunk / n_frames
        ids = torch.tensor([self._chunk_token_ids(n_t, per_patch, t_start_s, seconds_per_frame)])
        types = (ids == self.video_pad_id).int() * 2
        positions, _ = self.model.model.get_rope_index(
            ids, mm_token_type_ids=types, video_grid_thw=grid,
            second_per_grid_ts=torch.tensor([seconds_per_frame * self.frames_per_chunk_multiple]),
        )
        vision = {"pixel_values_videos": self._to_model(pixels), "video_grid_thw": grid.to(self.device)}
        # the next segment starts after every position this chunk used
        grid_tokens = (n_t, int(grid[0, 1]) // merge, int(grid[0, 2]) // merge)  # merged tokens, raster order
        return ChunkInputs(ids, positions, int(positions.max()) + 1, vision, ids[0] == self.video_pad_id, grid_tokens)

    def _chunk_token_ids(self, n_patches: int, per_patch: int, t_start_s: float, seconds_per_frame: float) -> list[int]:
        return [self.vision_start_id] + [self.video_pad_id] * (n_patches * per_patch) + [self.vision_end_id]

    def offline_generate(self, frames: Sequence[np.ndarray], question: str, max_new_tokens: int,
                         fps: float = 2.0) -> list[int]:
        """What an offline video-LLM does per question: the system prompt, all `frames` as one video and the
        question, prepared by the HF processor and decoded greedily by HF `generate` from an empty cache (the
        re-encoding baseline of `streamvid bench`). Returns the generated token ids."""
        text = f"{self.sink_text}<|vision_start|><|video_pad|><|vision_end|>{self.prompt(question)}"
        inputs = self.processor(text=[text], videos=[np.stack(frames)], return_tensors="pt", do_sample_frames=False,
                                videos_kwargs={"fps": fps, "cap_pixels_per_frame": True})
        inputs = {k: self._to_model(v) if k.startswith("pixel_values") else v.to(self.device)
                  for k, v in inputs.items()}
        with self.lock, torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        return out[0, inputs["input_ids"].shape[1]:].tolist()
