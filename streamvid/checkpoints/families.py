"""Small random checkpoints of every supported family (`streamvid make-tiny --arch A --out DIR`): the model with
random weights, a working tokenizer and the family's own HF processor, saved as an ordinary checkpoint directory
that `from_pretrained` loads offline. Tests use them to run each family end to end without a download; a user can
use one to check an install.

Qwen2.5-VL is `tiny.build_tiny_checkpoint` (the bundled model's starting point). The Qwen families and
LLaVA-OneVision get a byte-level BPE trained on the spot with their special tokens (as `tiny.build_tokenizer`);
LLaVA-NeXT-Video gets a sentencepiece model trained on the spot and loaded as its Llama tokenizer. SmolVLM2 and
InternVL3.5 get the byte-level BPE with their own special tokens, and their processors with small frames (16 tokens
per frame). Qwen3.5 (hybrid: Gated DeltaNet layers and full-attention layers) is built in checkpoints/hybrid.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from streamvid.checkpoints.tiny import ANSWER_WORDS, CHAT_TEMPLATE, CORPUS, SPECIAL_TOKENS, build_tiny_checkpoint
from streamvid.checkpoints.tiny_parts import (bpe_tokenizer, mrope_section, qwen3_vl_processor, text_dims,
                                              unit_embeddings)

ARCHS = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen3.5", "llava-onevision", "llava-next-video", "smolvlm2",
         "internvl3.5")
SPEECH_ARCHS = ("whisper", "vits")  # a speech recogniser for --asr and a voice for --tts (checkpoints/speech.py)

# LLaVA-OneVision's chat template (ChatML; per message its images, then `<video>\n` per video, then the text)
OV_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] if item['type'] == 'image' %}{{ '<image>\\n' }}{% endfor %}"
    "{% for item in message['content'] if item['type'] == 'video' %}{{ '<video>\\n' }}{% endfor %}"
    "{% for item in message['content'] if item['type'] == 'text' %}{{ item['text'] }}{% endfor %}"
    "{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# LLaVA-NeXT-Video's chat template (Vicuna: `USER: <video>\ntext ASSISTANT: text `)
NEXT_VIDEO_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': ' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] + ' ' }}{% else %}"
    "{% for item in message['content'] if item['type'] == 'image' %}{{ '<image>\\n' }}{% endfor %}"
    "{% for item in message['content'] if item['type'] == 'video' %}{{ '<video>\\n' }}{% endfor %}"
    "{% for item in message['content'] if item['type'] == 'text' %}{{ item['text'] + ' ' }}{% endfor %}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)


def make_tiny(arch: str, out_dir: str | Path, seed: int = 0, hidden: int = 64, layers: int = 2) -> Path:
    """Write a small random checkpoint of `arch` (one of ARCHS, or a speech recogniser of SPEECH_ARCHS) to
    `out_dir`; returns the directory."""
    from streamvid.checkpoints.hybrid import qwen3_5

    builders = {"qwen2-vl": _qwen2_vl, "qwen3-vl": _qwen3_vl, "qwen3.5": qwen3_5, "llava-onevision": _llava_onevision,
                "llava-next-video": _llava_next_video, "smolvlm2": _smolvlm2, "internvl3.5": _internvl}
    hf_logging.disable_progress_bar()
    if arch == "qwen2.5-vl":
        return build_tiny_checkpoint(out_dir, seed=seed, hidden=hidden, layers=layers)
    if arch in SPEECH_ARCHS:
        from streamvid.checkpoints.speech import tiny_vits, tiny_whisper

        return (tiny_whisper if arch == "whisper" else tiny_vits)(out_dir, seed=seed)
    if arch not in builders:
        raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHS + SPEECH_ARCHS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model, processor = builders[arch](hidden, layers)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def _qwen_common(tokenizer, text: dict, vision: dict, config_cls) -> object:
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    return config_cls(
        text_config=dict(vocab_size=len(tokenizer), eos_token_id=ids["<|im_end|>"],
                         pad_token_id=ids["<|endoftext|>"], bos_token_id=None, **text),
        vision_config=vision, image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False)


def _qwen2_vl(hidden: int, layers: int, frame_px: int = 56):
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    tokenizer = bpe_tokenizer(SPECIAL_TOKENS, "<|im_end|>", "<|endoftext|>", CHAT_TEMPLATE)
    pixels = frame_px * frame_px
    common = dict(min_pixels=pixels, max_pixels=pixels, patch_size=14, temporal_patch_size=2, merge_size=2)
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**common),
                                 video_processor=Qwen2VLVideoProcessor(**common), tokenizer=tokenizer,
                                 chat_template=CHAT_TEMPLATE)
    head_dim = hidden // 4
    text = dict(num_hidden_layers=layers, **text_dims(hidden),
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                 "mrope_section": mrope_section(head_dim)})
    vision = dict(depth=2, embed_dim=64, hidden_size=hidden, mlp_ratio=2, num_heads=4, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2)
    model = Qwen2VLForConditionalGeneration(_qwen_common(tokenizer, text, vision, Qwen2VLConfig))
    unit_embeddings(model)
    return model, processor


def _qwen3_vl(hidden: int, layers: int, frame_px: int = 64):
    from transformers import (
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
    )

    tokenizer = bpe_tokenizer(SPECIAL_TOKENS, "<|im_end|>", "<|endoftext|>", CHAT_TEMPLATE)
    processor = qwen3_vl_processor(tokenizer, frame_px, CHAT_TEMPLATE)
    head_dim = hidden // 4
    text = dict(num_hidden_layers=layers, head_dim=head_dim, **text_dims(hidden),
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                 "mrope_section": mrope_section(head_dim), "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=hidden,
                  num_position_embeddings=64, deepstack_visual_indexes=[0])
    model = Qwen3VLForConditionalGeneration(_qwen_common(tokenizer, text, vision, Qwen3VLConfig))
    unit_embeddings(model)
    return model, processor


def _llava_onevision(hidden: int, layers: int, frame_px: int = 56):
    from transformers import (
        LlavaOnevisionConfig,
        LlavaOnevisionForConditionalGeneration,
        LlavaOnevisionImageProcessor,
        LlavaOnevisionProcessor,
        LlavaOnevisionVideoProcessor,
    )

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]
    tokenizer = bpe_tokenizer(specials, "<|im_end|>", "<|endoftext|>", OV_CHAT_TEMPLATE)
    size = {"height": frame_px, "width": frame_px}
    patch = 14
    grid = frame_px // patch
    processor = LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(size=size, image_grid_pinpoints=[[frame_px, frame_px]]),
        video_processor=LlavaOnevisionVideoProcessor(size=size),
        tokenizer=tokenizer, num_image_tokens=grid * grid, vision_feature_select_strategy="full",
        chat_template=OV_CHAT_TEMPLATE)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    config = LlavaOnevisionConfig(
        vision_config=dict(model_type="siglip_vision_model", hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4, image_size=frame_px, patch_size=patch),
        text_config=dict(model_type="qwen2", vocab_size=len(tokenizer), num_hidden_layers=layers,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                         eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"], bos_token_id=None,
                         **text_dims(hidden)),
        image_token_index=ids["<image>"], video_token_index=ids["<video>"],
        vision_feature_select_strategy="full", vision_feature_layer=-1,
        image_grid_pinpoints=[[frame_px, frame_px]], tie_word_embeddings=False)
    model = LlavaOnevisionForConditionalGeneration(config)
    unit_embeddings(model)
    return model, processor


def sentencepiece_llama_tokenizer(vocab_size: int = 600):
    """A Llama tokenizer from a sentencepiece BPE model trained on the bundled corpus (<unk> 0, <s> 1, </s> 2,
    `<video>` and `<image>` as user-defined pieces, byte fallback for anything else)."""
    import sentencepiece as spm
    from transformers import LlamaTokenizer

    lines = [ln for ln in CORPUS.splitlines() if ln.strip()] + ANSWER_WORDS.split() + ["USER: ASSISTANT:"]
    with tempfile.TemporaryDirectory() as tmp:
        prefix = str(Path(tmp) / "sp")
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines * 8), model_prefix=prefix, vocab_size=vocab_size, model_type="bpe",
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1, byte_fallback=True, user_defined_symbols=["<video>", "<image>"],
            minloglevel=2, hard_vocab_limit=False)
        Path(prefix + ".model").rename(Path(tmp) / "tokenizer.model")  # loaded (converted) as a Llama tokenizer
        tokenizer = LlamaTokenizer.from_pretrained(tmp, chat_template=NEXT_VIDEO_CHAT_TEMPLATE)
    tokenizer.pad_token = tokenizer.unk_token
    return tokenizer


def _llava_next_video(hidden: int, layers: int, frame_px: int = 56):
    from transformers import (
        LlavaNextImageProcessor,
        LlavaNextVideoConfig,
        LlavaNextVideoForConditionalGeneration,
        LlavaNextVideoProcessor,
        LlavaNextVideoVideoProcessor,
    )

    tokenizer = sentencepiece_llama_tokenizer()
    patch = 14
    size, crop = {"shortest_edge": frame_px}, {"height": frame_px, "width": frame_px}
    processor = LlavaNextVideoProcessor(
        video_processor=LlavaNextVideoVideoProcessor(size=size, crop_size=crop),
        image_processor=LlavaNextImageProcessor(size=size, crop_size=crop, image_grid_pinpoints=[[frame_px, frame_px]]),
        tokenizer=tokenizer, patch_size=patch, vision_feature_select_strategy="default",
        num_additional_image_tokens=1, chat_template=NEXT_VIDEO_CHAT_TEMPLATE)
    grid = frame_px // patch
    config = LlavaNextVideoConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4, image_size=frame_px, patch_size=patch,
                           projection_dim=64),
        text_config=dict(model_type="llama", vocab_size=len(tokenizer), num_hidden_layers=layers,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **text_dims(hidden)),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        video_token_index=tokenizer.convert_tokens_to_ids("<video>"),
        vision_feature_select_strategy="default", vision_feature_layer=-2, spatial_pool_stride=2,
        image_grid_pinpoints=[[frame_px, frame_px]], image_seq_length=grid * grid,
        video_seq_length=(grid // 2) ** 2, tie_word_embeddings=False)
    model = LlavaNextVideoForConditionalGeneration(config)
    unit_embeddings(model)
    return model, processor


def _smolvlm2(hidden: int, layers: int, frame_px: int = 64):
    """SmolVLM2 (Idefics3 with a Llama text model): frames resized to frame_px square, 16 x 16 patches,
    pixel-shuffled by 2 into 4 x 4 = 16 tokens per frame; the processor's own video chat template."""
    from transformers import (
        SmolVLMConfig,
        SmolVLMForConditionalGeneration,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )
    from transformers.models.smolvlm.processing_smolvlm import DEFAULT_CHAT_TEMPLATE

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<end_of_utterance>", "<fake_token_around_image>",
                "<global-img>", "<image>"]
    tokenizer = bpe_tokenizer(specials, "<end_of_utterance>", "<|im_end|>", DEFAULT_CHAT_TEMPLATE)
    tokenizer.bos_token, tokenizer.unk_token = "<|im_start|>", "<|endoftext|>"
    patch, scale = 16, 2
    size = {"longest_edge": frame_px}
    processor = SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(do_image_splitting=False, size=size, max_image_size=size),
        video_processor=SmolVLMVideoProcessor(size=size, max_image_size=size, video_sampling={
            "fps": 1, "max_frames": 64, "video_size": size}),
        tokenizer=tokenizer, image_seq_len=(frame_px // patch) ** 2 // scale ** 2, chat_template=DEFAULT_CHAT_TEMPLATE)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    config = SmolVLMConfig(
        vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           image_size=frame_px, patch_size=patch),
        text_config=dict(model_type="llama", vocab_size=len(tokenizer), num_hidden_layers=layers,
                         rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
                         bos_token_id=ids["<|im_start|>"], eos_token_id=ids["<end_of_utterance>"],
                         pad_token_id=ids["<|im_end|>"], **text_dims(hidden)),
        image_token_id=ids["<image>"], scale_factor=scale, pad_token_id=ids["<|im_end|>"], tie_word_embeddings=False)
    model = SmolVLMForConditionalGeneration(config)
    unit_embeddings(model)
    return model, processor


# InternVL3.5 -HF chat template (ChatML; `<video>\n` per video, `<IMG_CONTEXT>\n` per image, then the text)
INTERNVL_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' %}{{ '<IMG_CONTEXT>\\n' }}"
    "{% elif content['type'] == 'video' %}{{ '<video>\\n' }}{% elif content['type'] == 'text' %}{{ content['text'] }}"
    "{% endif %}{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _internvl(hidden: int, layers: int, frame_px: int = 56):
    """InternVL3.5 -HF (a Qwen text model): each frame resized to frame_px square, 8 x 8 patches, pixel-shuffled by
    0.5 into 4 x 4 = 16 tokens (`<img><IMG_CONTEXT>*16</img>`)."""
    from transformers import (
        GotOcr2ImageProcessor,
        InternVLConfig,
        InternVLForConditionalGeneration,
        InternVLProcessor,
        InternVLVideoProcessor,
    )

    marks = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
             "video_token": "<video>"}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *marks.values()]
    tokenizer = bpe_tokenizer(specials, "<|im_end|>", "<|endoftext|>", INTERNVL_CHAT_TEMPLATE)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer, eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>", extra_special_tokens=marks,
                                        chat_template=INTERNVL_CHAT_TEMPLATE)
    patch, size = frame_px // 8, {"height": frame_px, "width": frame_px}
    seq = (frame_px // patch) ** 2 // 4
    processor = InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(size=size, crop_to_patches=False),
        video_processor=InternVLVideoProcessor(size=size), tokenizer=tokenizer, image_seq_length=seq,
        chat_template=INTERNVL_CHAT_TEMPLATE)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    config = InternVLConfig(
        vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           image_size=[frame_px, frame_px], patch_size=[patch, patch]),
        text_config=dict(model_type="qwen2", vocab_size=len(tokenizer), num_hidden_layers=layers,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                         eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"], bos_token_id=None,
                         **text_dims(hidden)),
        image_token_id=ids["<IMG_CONTEXT>"], image_seq_length=seq, downsample_ratio=0.5, tie_word_embeddings=False)
    model = InternVLForConditionalGeneration(config)
    unit_embeddings(model)
    return model, processor
