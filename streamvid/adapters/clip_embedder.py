"""ClipEmbedder: retrieval vectors from a CLIP or SigLIP checkpoint (`--embedder clip:<HF id or local dir>`).

A chunk's vector is the mean of its frames' L2-normalised image features (`get_image_features`), normalised again;
a question's vector is its text features (`get_text_features`), normalised. Both come from the model's projection
heads, the space the model was trained to match images and captions in, so a question is compared with what the
chunks showed rather than with the video-LLM's internal states. Inputs are prepared by the checkpoint's own
processor (resize, crop, normalise; tokenise, with SigLIP's fixed-length padding that its text pooling expects).

Loaded with `AutoModel` / `AutoProcessor` (trust_remote_code off), float32, on the device given; any checkpoint
whose model has `get_image_features` and `get_text_features` works (CLIPModel, SiglipModel, Siglip2Model). In the
transformers versions this project supports (5.x) those methods return an output object whose `pooler_output` is
the projected features; a bare tensor (older versions) is taken as it is.

Thread contract: `chunk_vector` (a stream's ingest) and `question_vector` (its answers), on the engine's scheduler
thread or a caller stepping an engine of its own, hold `lock` around their forward; it is a leaf lock (nothing else
is acquired while holding it).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import torch
from transformers import AutoModel, AutoProcessor


class ClipEmbedder:
    def __init__(self, model_id_or_dir: str, device: torch.device | str = "cpu"):
        try:
            self.model = AutoModel.from_pretrained(model_id_or_dir, trust_remote_code=False, dtype=torch.float32)
            self.processor = AutoProcessor.from_pretrained(model_id_or_dir, trust_remote_code=False)
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot load the embedder {model_id_or_dir!r} (a CLIP or SigLIP checkpoint: HF id or "
                             f"local dir): {str(e).strip().splitlines()[0]}") from e
        if not (hasattr(self.model, "get_image_features") and hasattr(self.model, "get_text_features")):
            raise ValueError(f"embedder {model_id_or_dir!r} is a {type(self.model).__name__}, which has no image and "
                             f"text features: pass a CLIP or SigLIP checkpoint")
        self.model.to(device).eval()
        self.device = torch.device(device)
        self.name = f"clip:{model_id_or_dir}"  # make_embedder passes a local dir as its absolute path
        cfg = self.model.config
        self.model_type = cfg.model_type
        self.dim = int(getattr(cfg, "projection_dim", None) or cfg.text_config.projection_size)
        # SigLIP pools the last position of the text: it was trained on text padded to its fixed length
        self._padding = "max_length" if self.model_type.startswith("siglip") else True
        self.lock = threading.Lock()

    def chunk_vector(self, frames: Sequence[np.ndarray], encoded=None) -> np.ndarray:
        """Mean of the frames' unit image features, renormalised: (dim,) float32."""
        inputs = self.processor(images=list(frames), return_tensors="pt").to(self.device)
        with self.lock, torch.inference_mode():
            feats = _features(self.model.get_image_features(**inputs)).float()
        feats = feats / feats.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        return self._unit(feats.mean(0))

    def question_vector(self, text: str) -> np.ndarray:
        """The text's features, normalised: (dim,) float32."""
        inputs = self.processor(text=[text], return_tensors="pt", padding=self._padding,
                                truncation=True).to(self.device)
        with self.lock, torch.inference_mode():
            feats = _features(self.model.get_text_features(**inputs)).float()
        return self._unit(feats[0])

    def _unit(self, v: torch.Tensor) -> np.ndarray:
        if v.shape != (self.dim,):
            raise ValueError(f"embedder {self.name} gave features of shape {tuple(v.shape)}, expected ({self.dim},) "
                             f"from its config's projection size")
        return (v / v.norm().clamp_min(1e-12)).cpu().numpy().astype(np.float32)


def _features(out) -> torch.Tensor:
    """The projected features: transformers 5.x returns an output object (pooler_output), older ones a tensor."""
    return out if isinstance(out, torch.Tensor) else out.pooler_output
