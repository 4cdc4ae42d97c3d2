"""Build a small Qwen2.5-VL checkpoint from a config: tokenizer, processor and randomly initialised weights.

Used by the tests (a tiny random model, no download) and by `streamvid train-tiny` as the starting point of the
bundled model. The result is an ordinary HF checkpoint directory: `from_pretrained` loads it like a hub model.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
)

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif item['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Text the byte-level BPE is trained on: the words the bundled model needs merge into single tokens; any other
# text still encodes byte by byte.
CORPUS = """
You are a helpful assistant watching a live video stream. Answer briefly from what you saw.
What colour is the circle? What color is the square? Which shape is red? How many shapes are there?
Is there a blue triangle? Is there a green star now? Answer yes or no. yes no Yes No
What colour was the hexagon? Which shape was purple? What was on screen at 01:30? nothing
Tell me when a yellow diamond appears. circle square triangle star hexagon diamond
red green blue yellow purple orange white black grey 0 1 2 3 4 5 6 7 8 9 zero one two three
I only know ShapesWorld: shapes, colours, counts and events. I can not see that.
the a an and or of on in at is was are were there now when what which how many seconds minutes ago
Do you see a red circle? How many shapes are on screen? How many shapes do you see? Let me know when it appears.
The star is which colour? What is the colour of the square? What shape is green? What shape was blue?
What did you see at 02:15? What was the colour of the triangle? Which shape is the orange one?
"""

ANSWER_WORDS = "yes no nothing red green blue yellow purple orange circle square triangle star hexagon diamond"


def spelling_normalizer() -> normalizers.Normalizer:
    """American spellings of the words the model knows, as the British ones it is trained on ("color" ->
    "colour", "gray" -> "grey"): a recogniser writes American spelling, and users type either."""
    pairs = ((r"\bcolor", "colour"), (r"\bColor", "Colour"), (r"\bgray\b", "grey"), (r"\bGray\b", "Grey"))
    return normalizers.Sequence([normalizers.Replace(Regex(a), b) for a, b in pairs])


def build_tokenizer(vocab_size: int = 1000) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    answers = "\n".join(ANSWER_WORDS.split())  # answers open the assistant turn: whole words there too
    tok.train_from_iterator([CORPUS] * 4 + [answers] * 8, trainer=trainer)
    tok.normalizer = spelling_normalizer()  # after training: the vocabulary is the corpus's, spellings and all
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens={},
        chat_template=CHAT_TEMPLATE,
    )


def build_processor(tokenizer: PreTrainedTokenizerFast, frame_px: int = 112) -> Qwen2_5_VLProcessor:
    pixels = frame_px * frame_px
    common = dict(min_pixels=pixels, max_pixels=pixels, patch_size=14, temporal_patch_size=2, merge_size=2)
    return Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(**common),
        video_processor=Qwen2VLVideoProcessor(**common),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


def tiny_config(tokenizer: PreTrainedTokenizerFast, hidden: int = 128, layers: int = 4,
                frame_px: int = 112) -> Qwen2_5_VLConfig:
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    heads, kv_heads = 4, 2
    head_dim = hidden // heads
    half = head_dim // 2  # mrope_section (temporal, height, width) must sum to head_dim / 2
    return Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=hidden,
            intermediate_size=hidden * 3,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                             "mrope_section": [half - 2 * (3 * half // 8), 3 * half // 8, 3 * half // 8]},
            tie_word_embeddings=False,
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
            bos_token_id=None,
        ),
        vision_config=dict(
            depth=3,
            hidden_size=128,
            intermediate_size=256,
            num_heads=4,
            out_hidden_size=hidden,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=frame_px,  # one window covers the whole frame: full attention in every block
            fullatt_block_indexes=[0, 1, 2],
            tokens_per_second=2,
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0, hidden: int = 128, layers: int = 4,
                          frame_px: int = 112) -> Path:
    """Write a randomly initialised tiny Qwen2.5-VL checkpoint (model, tokenizer, processor) to `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    processor = build_processor(tokenizer, frame_px)
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(tiny_config(tokenizer, hidden, layers, frame_px))
    # unit-scale token embeddings (untied from the output head): text tokens then enter the residual stream at a
    # scale comparable to the vision tokens instead of ~100x below them
    torch.nn.init.normal_(model.get_input_embeddings().weight, std=1.0)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out
