"""What make-tiny's families and the real-size architectures share: a byte-level BPE trained on the bundled corpus
with a family's special tokens, small text widths, M-RoPE sections, unit-scale embeddings and Qwen3-VL's processor
(Qwen3.5's too). Below families.py, hybrid.py and real_size.py, which each build on it.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from streamvid.checkpoints.tiny import ANSWER_WORDS, CORPUS


def bpe_tokenizer(special_tokens: list[str], eos: str, pad: str, chat_template: str,
                  vocab_size: int = 1000) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on the bundled corpus, with the family's special tokens (ids 0..n-1)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special_tokens,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS] * 4 + ["\n".join(ANSWER_WORDS.split())] * 8, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token=pad, extra_special_tokens={},
                                   chat_template=chat_template)


def text_dims(hidden: int) -> dict:
    heads, kv_heads = 4, 2
    return dict(hidden_size=hidden, intermediate_size=hidden * 3, num_attention_heads=heads,
                num_key_value_heads=kv_heads, max_position_embeddings=32768, tie_word_embeddings=False)


def mrope_section(head_dim: int) -> list[int]:
    half = head_dim // 2  # (temporal, height, width) sections sum to head_dim / 2
    return [half - 2 * (3 * half // 8), 3 * half // 8, 3 * half // 8]


def unit_embeddings(model) -> None:
    # unit-scale token embeddings: text tokens enter the residual stream at a scale comparable to vision tokens
    torch.nn.init.normal_(model.get_input_embeddings().weight, std=1.0)


def qwen3_vl_processor(tokenizer, frame_px: int, chat_template: str):
    """Qwen3-VL's processor (Qwen3.5's too) for `frame_px`-square frames: 16-px patches, 2 frames a temporal patch,
    2 x 2 merged."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    pixels = frame_px * frame_px
    return Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(min_pixels=pixels, max_pixels=pixels, patch_size=16,
                                              temporal_patch_size=2, merge_size=2),
        video_processor=Qwen3VLVideoProcessor(size={"shortest_edge": pixels * 2, "longest_edge": pixels * 64},
                                              patch_size=16, temporal_patch_size=2, merge_size=2, fps=2,
                                              min_frames=2),
        tokenizer=tokenizer, chat_template=chat_template)
