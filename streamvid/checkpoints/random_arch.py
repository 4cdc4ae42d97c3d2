"""Real-size Qwen2.5-VL architectures with random weights, for speed measurements (`streamvid bench --arch`).

Speed does not depend on the weight values, so a 3B or 7B model built from its published config with random
weights runs exactly the computation the real checkpoint runs. `layers` keeps the real widths with fewer decoder
layers (and vision blocks), so a real-width model fits a CPU. The tokenizer and processor are the bundled
model's (its special token ids are the config's), with the processor's frame-size limits of the real
checkpoints, so a 448 x 448 frame becomes 16 x 16 tokens as it does for them.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor, Qwen2_5_VLConfig

from streamvid.adapters.hf import resolve_attn, resolve_device, resolve_dtype
from streamvid.adapters.qwen2_5_vl import QwenVLAdapter
from streamvid.config import BUNDLED_MODEL

# Qwen/Qwen2.5-VL-3B-Instruct and -7B-Instruct config.json, the fields that set the amount of computation
ARCHS = {
    "3b": {"text": {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                    "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
                    "tie_word_embeddings": True},
           "vision_out": 2048},
    "7b": {"text": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                    "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                    "tie_word_embeddings": False},
           "vision_out": 3584},
}
VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "patch_size": 14,
          "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112, "tokens_per_second": 2,
          "fullatt_block_indexes": [7, 15, 23, 31], "hidden_act": "silu"}
MIN_PIXELS, MAX_PIXELS = 4 * 28 * 28, 768 * 28 * 28  # the Qwen2-VL video processor's per-frame limits


def random_config(arch: str, layers: int | None = None) -> Qwen2_5_VLConfig:
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}")
    spec = ARCHS[arch]
    bundled = Qwen2_5_VLConfig.from_pretrained(BUNDLED_MODEL)
    text = {**spec["text"], "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0,
                                                "mrope_section": [16, 24, 24]},
            "max_position_embeddings": 128000, "rms_norm_eps": 1e-6,
            "eos_token_id": bundled.text_config.eos_token_id, "pad_token_id": bundled.text_config.pad_token_id}
    vision = {**VISION, "out_hidden_size": spec["vision_out"]}
    if layers is not None:
        text["num_hidden_layers"] = min(layers, text["num_hidden_layers"])
        vision["depth"] = min(layers, vision["depth"])
        vision["fullatt_block_indexes"] = [i for i in vision["fullatt_block_indexes"] if i < vision["depth"]] or \
            [vision["depth"] - 1]
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=bundled.image_token_id,
                            video_token_id=bundled.video_token_id,
                            vision_start_token_id=bundled.vision_start_token_id,
                            vision_end_token_id=bundled.vision_end_token_id,
                            tie_word_embeddings=spec["text"]["tie_word_embeddings"])


def random_adapter(arch: str, layers: int | None = None, device: str = "auto", dtype: str = "auto",
                   attn: str = "auto", seed: int = 0) -> QwenVLAdapter:
    """A QwenVLAdapter over a randomly initialised `arch` ("3b", "7b"), built directly on `device`."""
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    config = random_config(arch, layers)
    processor = AutoProcessor.from_pretrained(BUNDLED_MODEL)
    for proc in (processor.video_processor, processor.image_processor):
        proc.size = {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config, dtype=getattr(torch, dtype),
                                                        attn_implementation=resolve_attn(attn, device, dtype))
    return QwenVLAdapter(f"random-{arch}" + (f"-{layers}l" if layers else ""), device=device, dtype=dtype,
                         attn=attn, index_layer=config.text_config.num_hidden_layers // 2,
                         prebuilt=(processor, model))
