"""A small random Qwen3.5 checkpoint (`streamvid make-tiny --arch qwen3.5`): the hybrid decoder (Gated DeltaNet
linear-attention layers, a full-attention layer every fourth), Qwen3-VL's vision tower and processor, a byte-level
BPE trained on the spot with the Qwen special tokens, saved with its tokenizer.json (transformers 5.25 builds the
Qwen3.5 tokenizer from tokenizer.json only).

The chat template is ChatML with the answer header of Qwen3.5's own template when thinking is off
(`<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n`); a video is `<|vision_start|><|video_pad|><|vision_end|>`, which
the processor expands into a timestamp and a wrapper per temporal patch, as for Qwen3-VL.
"""

from __future__ import annotations

from streamvid.checkpoints.tiny import SPECIAL_TOKENS

# ChatML; the video and image placeholders of the Qwen-VL templates; Qwen3.5's non-thinking answer header
QWEN3_5_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif item['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n\n</think>\n\n{% endif %}"
)
SPECIALS = [*SPECIAL_TOKENS, "<think>", "</think>"]


def layer_types(layers: int, interval: int = 4) -> list[str]:
    """Qwen3.5's layout (every `interval`-th layer full attention, the others Gated DeltaNet), with the last layer
    full attention when there are fewer than `interval` layers, so every tiny model has one."""
    kinds = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    if "full_attention" not in kinds:
        kinds[-1] = "full_attention"
    return kinds


def qwen3_5(hidden: int, layers: int, frame_px: int = 64, full_every: int = 4):
    """(model, processor): a Qwen3.5 of `layers` decoder layers of width `hidden` (head_dim hidden / 4, at least 32, a
    quarter of it rotary as in the real configs, interleaved M-RoPE), linear layers with 2 key / 4 value heads of 16 and a
    4-tap convolution; 64 x 64 frames, 16 tokens per temporal patch. `full_every` 1: every layer full attention
    (a plain model of the same width, for comparisons)."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from streamvid.checkpoints.tiny_parts import (bpe_tokenizer, mrope_section, qwen3_vl_processor, text_dims,
                                                  unit_embeddings)

    tokenizer = bpe_tokenizer(SPECIALS, "<|im_end|>", "<|endoftext|>", QWEN3_5_CHAT_TEMPLATE)
    processor = qwen3_vl_processor(tokenizer, frame_px, QWEN3_5_CHAT_TEMPLATE)
    head_dim = max(32, hidden // 4)  # a rotary part of 8 or more: every M-RoPE axis drives a frequency
    rotary = head_dim // 4  # partial_rotary_factor 0.25
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    text = dict(num_hidden_layers=layers, head_dim=head_dim, **text_dims(hidden), layer_types=layer_types(layers, full_every),
                linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
                linear_num_value_heads=4, vocab_size=len(tokenizer), eos_token_id=ids["<|im_end|>"],
                pad_token_id=ids["<|endoftext|>"], bos_token_id=None,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                 "mrope_section": mrope_section(rotary), "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, patch_size=16, spatial_merge_size=2,
                  temporal_patch_size=2, out_hidden_size=hidden, num_position_embeddings=64)
    config = Qwen3_5Config(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                           video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                           vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False)
    model = Qwen3_5ForConditionalGeneration(config)
    unit_embeddings(model)
    return model, processor
