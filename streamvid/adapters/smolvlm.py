"""SmolVLM2 (`SmolVLMForConditionalGeneration`, model_type `smolvlm`): Idefics3-style, a SigLIP vision tower whose
patch features are pixel-shuffled into `image_seq_len` tokens per frame, a Llama text model with 1-D RoPE.

The processor writes a video as an intro sentence (its frame count and length), then per frame
`\\nFrame from MM:SS:<fake_token_around_image><global-img><image>*image_seq_len<fake_token_around_image>` (the
frame's time), then an outtro (`\\n\\n`); frames are never split into tiles. A chunk is the processor's own text for
its frames at their stream times (video metadata), less the intro and the outtro: a stream has no frame count or
length to state, and the outtro belongs after the last frame, before the question (`prompt` starts with it). Every
chunk starts at a newline after a special token and ends with one, so a chunk's tokens are the same alone as in
the whole conversation. The conversation text (system turn, `User:` turn, `Assistant:`) is the processor's chat
template (`TemplateChat`); for a video the processor renders its own video template, as HF does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from streamvid.adapters.chunk_inputs import ChunkInputs
from streamvid.adapters.hf import HFVideoAdapter
from streamvid.adapters.qwen2_5_vl import frame_times
from streamvid.adapters.template_chat import TemplateChat

FRAME_MARK = "\nFrame from "  # how the processor opens each frame's text (FRAME_TIMESTAMP_MESSAGE)
OUTTRO = "\n\n"  # what the processor writes after a video's last frame (DEFAULT_MEDIA_OUTTRO)


class SmolVLMAdapter(TemplateChat, HFVideoAdapter):
    """See `VideoLLMAdapter`."""

    model_types = ("smolvlm",)
    position_axes = 1
    frames_per_chunk_multiple = 1
    uses_stream_time = True  # each frame's text carries its stream time (MM:SS)
    stop_tokens = ("<end_of_utterance>",)
    prompt_prefix = OUTTRO

    def __init__(self, model: str, device: str = "cpu", dtype: str = "auto", index_layer: int = 0,
                 trust_remote_code: bool = False, **options):
        super().__init__(model, device=device, dtype=dtype, index_layer=index_layer,
                         trust_remote_code=trust_remote_code, **options)
        self.read_template(model)
        self.video_pad_id = self.model.config.image_token_id  # frames fill <image> tokens
        self.side = math.isqrt(self.processor.image_seq_len)  # tokens per frame: side x side
        self._check_layout(model)

    def chunk_inputs(self, frames: Sequence[np.ndarray], seconds_per_chunk: float,
                     t_start_s: float = 0.0) -> ChunkInputs:
        return self.chunk_inputs_batch([(frames, seconds_per_chunk, t_start_s)])[0]

    def chunk_inputs_batch(self, clips: Sequence[tuple[Sequence[np.ndarray], float, float]]) -> list[ChunkInputs]:
        """Every clip through one call of the video processor (frames at their stream times, no frame sampling);
        each clip's text is the processor's own expansion of its video (`replace_video_token`) from the first
        frame's text to the last frame's end."""
        metadata = [frame_times(len(f), seconds / len(f), t_start_s) for f, seconds, t_start_s in clips]
        videos = self.video_processor(videos=[np.stack(f) for f, _, _ in clips], video_metadata=metadata,
                                      do_sample_frames=False, return_metadata=True, return_tensors="pt")
        chunks = []
        for i, (frames, _, _) in enumerate(clips):
            text = self.processor.replace_video_token(videos, i)
            start, end = text.find(FRAME_MARK), len(text) - len(OUTTRO)
            if start < 0 or not text.endswith(OUTTRO):
                raise ValueError(f"the SmolVLM processor wrote a video as {text[:80]!r}...: not the layout this "
                                 "adapter reads")
            ids = self.token_ids(text[start:end])
            n, frames_in = ids.shape[1], len(frames)
            vision = {"pixel_values": self._to_model(videos["pixel_values"][i:i + 1, :frames_in]),
                      "pixel_attention_mask": videos["pixel_attention_mask"][i:i + 1, :frames_in].to(self.device)}
            chunks.append(ChunkInputs(ids, torch.arange(n).view(1, n), n, vision, ids[0] == self.video_pad_id,
                                      (frames_in, self.side, self.side)))
        return chunks

    def offline_generate(self, frames: Sequence[np.ndarray], question: str, max_new_tokens: int,
                         fps: float = 2.0) -> list[int]:
        """What an offline video-LLM does per question (the re-encoding baseline of `streamvid bench`): the chat
        template's conversation (system prompt, a video, the question) with all `frames` as one video at `fps`,
        prepared by the HF processor and decoded greedily by HF `generate` from an empty cache. Returns the
        generated token ids."""
        inputs = self.processor(text=[self.render(question)], videos=[np.stack(frames)],
                                video_metadata=[frame_times(len(frames), 1.0 / fps, 0.0)], do_sample_frames=False,
                                return_tensors="pt")
        inputs = {k: self._to_model(v) if k == "pixel_values" else v.to(self.device) for k, v in inputs.items()}
        with self.lock, torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        return out[0, inputs["input_ids"].shape[1]:].tolist()

    def _check_layout(self, model: str) -> None:
        """At load: the processor's tokens for a one-frame chunk are as many as the connector's features per frame
        (the vision tower's patches / scale_factor^2), or loading fails in one line."""
        cfg = self.model.config
        features = (cfg.vision_config.image_size // cfg.vision_config.patch_size) ** 2 // cfg.scale_factor ** 2
        side = int(self.video_processor.max_image_size["longest_edge"])
        chunk = self.chunk_inputs([np.zeros((side, side, 3), np.uint8)], 1.0)
        if int(chunk.video_mask.sum()) != features or self.side ** 2 != features:
            raise ValueError(f"cannot load model {model!r}: its processor writes {int(chunk.video_mask.sum())} image "
                             f"tokens for a frame whose vision features are {features}")
