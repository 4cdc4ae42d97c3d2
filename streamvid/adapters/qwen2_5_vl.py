"""Qwen2.5-VL and Qwen2-VL: chunk-by-chunk video prefill with explicit 3-D M-RoPE positions (the model's own
`get_rope_index` over the chunk's tokens, shifted to where the chunk starts). Everything else is shared with the
other families (`adapters/hf.py`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

from streamvid.adapters.chunk_inputs import ChunkInputs
from streamvid.adapters.hf import SYSTEM_PROMPT, ChatMLAdapter, mean_queries

__all__ = ["SUPPORTED_MODEL_TYPES", "SYSTEM_PROMPT", "QwenVLAdapter", "mean_queries"]

log = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = ("qwen2_5_vl", "qwen2_vl")


class QwenVLAdapter(ChatMLAdapter):
    """See `VideoLLMAdapter`. A chunk is what the installed HF processor writes for the chat template's video
    placeholder with the chunk's frames (`<|vision_start|> <|video_pad|>*n <|vision_end|>` for Qwen2(.5)-VL;
    Qwen3-VL adds a timestamp and a wrapper per temporal patch); its temporal positions follow the model's time
    scale (`second_per_grid_ts`: Qwen2.5-VL places a temporal patch by seconds, Qwen2-VL by index)."""

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
        self.video_text = video_placeholder(self, model)
        check_chunk_layout(self, model)

    def chunk_inputs(self, frames: Sequence[np.ndarray], seconds_per_chunk: float,
                     t_start_s: float = 0.0) -> ChunkInputs:
        return self.chunk_inputs_batch([(frames, seconds_per_chunk, t_start_s)])[0]

    def chunk_inputs_batch(self, clips: Sequence[tuple[Sequence[np.ndarray], float, float]]) -> list[ChunkInputs]:
        """Every clip through one call of the installed HF processor (clips of any size and frame count): the chat
        template's video placeholder expanded by the processor for each clip's frames at their stream times, so
        the token layout (wrappers, timestamps, pads per temporal patch) is the processor's own. Each chunk's ids
        are its row without padding; its pixel rows its slice of `pixel_values_videos` (the clips' order)."""
        metadata = [frame_times(len(frames), seconds / len(frames), t_start_s) for frames, seconds, t_start_s in clips]
        out = self.processor(text=[self.video_text] * len(clips), videos=[np.stack(f) for f, _, _ in clips],
                             video_metadata=metadata, do_sample_frames=False, cap_pixels_per_frame=True,
                             padding=True, return_tensors="pt")
        grids, pixels = out["video_grid_thw"], out["pixel_values_videos"]  # (n, 3): temporal, height, width
        seconds_per_grid = out.get("second_per_grid_ts")
        chunks, at = [], 0
        for i, (frames, seconds_per_chunk, _) in enumerate(clips):
            ids = out["input_ids"][i][out["attention_mask"][i].bool()].view(1, -1)
            rows = int(grids[i].prod())
            per_grid = (float(seconds_per_grid[i]) if seconds_per_grid is not None
                        else seconds_per_chunk / len(frames) * self.frames_per_chunk_multiple)
            chunks.append(self._chunk(ids, grids[i:i + 1], pixels[at:at + rows], per_grid))
            at += rows
        return chunks

    def _chunk(self, ids: torch.Tensor, grid: torch.Tensor, pixels: torch.Tensor,
               seconds_per_grid: float) -> ChunkInputs:
        merge = int(self.video_processor.merge_size)
        types = (ids == self.video_pad_id).int() * 2
        positions, _ = self.model.model.get_rope_index(
            ids, mm_token_type_ids=types, video_grid_thw=grid, second_per_grid_ts=torch.tensor([seconds_per_grid]),
        )
        vision = {"pixel_values_videos": self._to_model(pixels), "video_grid_thw": grid.to(self.device)}
        # the next segment starts after every position this chunk used
        grid_tokens = (int(grid[0, 0]), int(grid[0, 1]) // merge, int(grid[0, 2]) // merge)  # merged, raster order
        return ChunkInputs(ids, positions, int(positions.max()) + 1, vision, ids[0] == self.video_pad_id, grid_tokens)

    def offline_generate(self, frames: Sequence[np.ndarray], question: str, max_new_tokens: int,
                         fps: float = 2.0) -> list[int]:
        """What an offline video-LLM does per question: the system prompt, all `frames` as one video and the
        question, prepared by the HF processor and decoded greedily by HF `generate` from an empty cache (the
        re-encoding baseline of `streamvid bench`). Returns the generated token ids."""
        text = f"{self.sink_text}{self.video_text}{self.prompt(question)}"
        inputs = self.processor(text=[text], videos=[np.stack(frames)], return_tensors="pt", do_sample_frames=False,
                                videos_kwargs={"fps": fps, "cap_pixels_per_frame": True})
        inputs = {k: self._to_model(v) if k.startswith("pixel_values") else v.to(self.device)
                  for k, v in inputs.items()}
        with self.lock, torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        return out[0, inputs["input_ids"].shape[1]:].tolist()


def frame_times(n_frames: int, seconds_per_frame: float, t_start_s: float) -> dict:
    """The video metadata that gives the processor a chunk's frames at their stream times: frame i of the chunk is
    frame index `t_start_s / seconds_per_frame + i` of a video at `1 / seconds_per_frame` fps (the processor's
    timestamps are index / fps), all of its frames sampled (sampled fps = fps)."""
    first = t_start_s / seconds_per_frame
    if abs(first - round(first)) < 1e-6:
        first = round(first)
    return {"fps": 1.0 / seconds_per_frame, "frames_indices": [first + i for i in range(n_frames)],
            "total_num_frames": n_frames}


def video_placeholder(adapter: QwenVLAdapter, model: str) -> str:
    """What the model's chat template writes for a video at the start of a user turn: the template rendered for the
    system prompt and one user turn (a video, then a question), less the adapter's sink text before it and its
    prompt after it. A model without a chat template, or one whose template lays the conversation out otherwise,
    gets the Qwen-VL placeholder, said in one log line."""
    fallback = "<|vision_start|><|video_pad|><|vision_end|>"
    question = "What is happening?"
    before, after = adapter.sink_text, adapter.prompt(question)
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": question}]}]
    try:
        rendered = adapter.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except (ValueError, TypeError, AttributeError) as e:  # no chat template, or one that cannot render this
        log.warning("%s: video placeholder %s (chat template: %s)", model, fallback, str(e).splitlines()[0])
        return fallback
    if len(rendered) <= len(before) + len(after) or not (rendered.startswith(before) and rendered.endswith(after)):
        log.warning("%s: video placeholder %s (its chat template lays the conversation out otherwise)", model, fallback)
        return fallback
    return rendered[len(before):len(rendered) - len(after)]


def check_chunk_layout(adapter: QwenVLAdapter, model: str) -> None:
    """At load: the processor's layout for one probe chunk holds as many video tokens as the vision tower gives
    features (temporal x height x width patches / merge^2), or loading fails in one line."""
    k = adapter.frames_per_chunk_multiple
    side = int(adapter.video_processor.patch_size) * int(adapter.video_processor.merge_size)
    chunk = adapter.chunk_inputs([np.zeros((side, side, 3), np.uint8)] * k, float(k))
    features = int(chunk.vision["video_grid_thw"].prod()) // int(adapter.video_processor.merge_size) ** 2
    if int(chunk.video_mask.sum()) != features:
        raise ValueError(f"cannot load model {model!r}: its processor writes {int(chunk.video_mask.sum())} video tokens "
                         f"for a chunk whose vision features are {features}")
