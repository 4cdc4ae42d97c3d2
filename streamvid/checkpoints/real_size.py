"""Real-size architectures of the small families with random weights, for speed measurements (`streamvid bench
--arch`): SmolVLM2-256M and -500M Video-Instruct, InternVL3.5-1B (-HF), Qwen3.5-0.8B and -2B, and their tiny test
checkpoints (`make-tiny`'s) for the many-streams measurement.

Speed does not depend on the weight values, so a model built from its published config with random weights runs
the computation the real checkpoint runs: the same widths, depths, heads, vocabulary (the LM head's size) and vision
tower, and the family's own HF processor with the real checkpoint's frame size and tokens per frame (64 for
SmolVLM2, 256 for InternVL3.5; Qwen3.5 keeps the frame's own size, rounded to 32 px: 144 tokens per 2 frames at 384
px, 49 at 224). Only the tokenizer is a small byte-level BPE with the family's special tokens
(`tiny_parts.bpe_tokenizer`): its ids index the real-size embedding table like any others. `layers` keeps the real
widths with at most that many decoder layers (and vision layers); a cut Qwen3.5 keeps its layout (every fourth layer
full attention, the last one when fewer than four remain: `hybrid.layer_types`).

Each family is one entry of `ARCHS`: a name, the builder of its (model, processor) pair and the text and vision
numbers of its config.

Where the numbers come from (each model's config.json on the Hugging Face hub, the fields that set the amount of
computation):
- HuggingFaceTB/SmolVLM2-500M-Video-Instruct: text (Llama) 960 wide, 2560 MLP, 32 layers, 15 heads, 5 KV heads,
  head 64, vocabulary 49280, rope theta 100000; vision (SigLIP) 768 wide, 12 heads, 512 px images in 16 px patches
  (intermediate size and depth not in its config: the SigLIP defaults the model loads with, 3072 and 12);
  scale factor 4 (64 tokens per frame); processor: frames resized to 512 px on the longest edge, image_seq_len 64.
- HuggingFaceTB/SmolVLM2-256M-Video-Instruct: the same vision tower and processor; text SmolLM2-135M's numbers:
  576 wide, 1536 MLP, 30 layers, 9 heads, 3 KV heads, head 64, rope theta 100000, vocabulary 49280.
- OpenGVLab/InternVL3_5-1B-HF: vision InternViT-300M (1024 wide, 4096 MLP, 24 layers, 16 heads, qkv bias, 448 px
  tiles in 14 px patches, layer scale), downsample ratio 0.5 (256 tokens per tile), projector gelu; text Qwen3-0.6B's
  numbers (1024 wide, 3072 MLP, 28 layers, 16 heads, 8 KV heads, head 128, rope theta 1000000, vocabulary 151936)
  with an untied LM head: 304,012,288 vision, 751,632,384 language and 5,253,120 projector parameters, as the
  published checkpoint stores.
- Qwen/Qwen3.5-0.8B: text (qwen3_5_text) 1024 wide, 3584 MLP, 24 layers (every fourth full attention: 6), 8 heads,
  2 KV heads, head 256 (a quarter rotary, interleaved M-RoPE sections 11/11/10, rope theta 10000000), gated
  attention output; Gated DeltaNet layers with 16 key and 16 value heads of 128 and a 4-tap convolution; vocabulary
  248320, tied LM head; vision (Qwen3-VL's tower, no deepstack) 768 wide, 3072 MLP, 12 blocks, 12 heads, 16 px
  patches, 2x2 merge, 2-frame temporal patches, 2304 position embeddings, out 1024; video processor: pixels per clip
  between 4096 and 25165824, mean and std 0.5.
- Qwen/Qwen3.5-2B: not checked against its config.json here (not at hand); the numbers as recalled from the
  published config: text 2048 wide, 6144 MLP, 24 layers (6 full attention), 8 heads, 2 KV heads, head 256, Gated
  DeltaNet 16 key / 16 value heads of 128, vocabulary 248320, tied; vision 1024 wide, 4096 MLP, 24 blocks, 16 heads,
  out 2048; rope, convolution and processor as the 0.8B.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# (nothing heavy at import: the command line reads ARCHS for `--arch`'s choices)

# the families' special tokens, as the real tokenizers and processors name them
SMOLVLM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<end_of_utterance>", "<fake_token_around_image>",
                    "<global-img>", "<image>"]
INTERNVL_MARKS = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
                  "video_token": "<video>"}
SMOLVLM_VISION = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
                  "image_size": 512, "patch_size": 16}
INTERNVL_VISION = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
                   "attention_bias": True, "image_size": [448, 448], "patch_size": [14, 14], "use_qk_norm": False,
                   "norm_type": "layer_norm", "layer_scale_init_value": 0.1, "hidden_act": "gelu"}

# what Qwen3.5-0.8B and -2B share (their widths are in ARCHS)
QWEN3_5_TEXT = {"num_hidden_layers": 24, "full_attention_interval": 4, "num_attention_heads": 8,
                "num_key_value_heads": 2, "head_dim": 256, "attn_output_gate": True, "linear_conv_kernel_dim": 4,
                "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_num_key_heads": 16,
                "linear_num_value_heads": 16, "vocab_size": 248320, "max_position_embeddings": 262144,
                "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": True}
QWEN3_5_VISION = {"patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 2304,
                  "hidden_act": "gelu_pytorch_tanh", "deepstack_visual_indexes": []}


@dataclass(frozen=True)
class Arch:
    """One architecture `streamvid bench --arch NAME` builds."""

    name: str
    family: str  # the adapter's family, as `make-tiny --arch` names it
    title: str  # what the report calls it
    build: Callable[[Arch, int | None], tuple]  # (arch, layers) -> (model, processor)
    text: dict = field(default_factory=dict)  # the text model's config numbers
    vision: dict = field(default_factory=dict)  # the vision tower's
    frame_px: int = 384  # the bench's default frame size
    tiny: bool = False  # make-tiny's small test checkpoint (hidden 64, 2 layers), not a real size


def _depth(numbers: dict, key: str, layers: int | None) -> dict:
    return numbers if layers is None else {**numbers, key: min(layers, numbers[key])}


def _smolvlm(arch: Arch, layers: int | None):
    from transformers import (
        AutoModelForImageTextToText,
        SmolVLMConfig,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )
    from transformers.models.smolvlm.processing_smolvlm import DEFAULT_CHAT_TEMPLATE

    from streamvid.checkpoints.tiny_parts import bpe_tokenizer

    tokenizer = bpe_tokenizer(SMOLVLM_SPECIALS, "<end_of_utterance>", "<|im_end|>", DEFAULT_CHAT_TEMPLATE)
    tokenizer.bos_token, tokenizer.unk_token = "<|im_start|>", "<|endoftext|>"
    vision = _depth(arch.vision, "num_hidden_layers", layers)
    scale = 4
    side = {"longest_edge": vision["image_size"]}
    processor = SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(do_image_splitting=False, size=side, max_image_size=side),
        video_processor=SmolVLMVideoProcessor(size=side, max_image_size=side, video_sampling={
            "fps": 1, "max_frames": 64, "video_size": side}),
        tokenizer=tokenizer, image_seq_len=(vision["image_size"] // vision["patch_size"]) ** 2 // scale ** 2,
        chat_template=DEFAULT_CHAT_TEMPLATE)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SMOLVLM_SPECIALS}
    text = _depth(arch.text, "num_hidden_layers", layers)
    config = SmolVLMConfig(
        vision_config=vision,
        text_config=dict(model_type="llama", rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
                         max_position_embeddings=8192, rms_norm_eps=1e-5, bos_token_id=ids["<|im_start|>"],
                         eos_token_id=ids["<end_of_utterance>"], pad_token_id=ids["<|im_end|>"],
                         tie_word_embeddings=False, **text),
        image_token_id=ids["<image>"], scale_factor=scale, pad_token_id=ids["<|im_end|>"], tie_word_embeddings=False)
    return AutoModelForImageTextToText.from_config(config), processor


def _internvl(arch: Arch, layers: int | None):
    from transformers import (
        AutoModelForImageTextToText,
        GotOcr2ImageProcessor,
        InternVLConfig,
        InternVLProcessor,
        InternVLVideoProcessor,
        PreTrainedTokenizerFast,
    )

    from streamvid.checkpoints.families import INTERNVL_CHAT_TEMPLATE as chat_template
    from streamvid.checkpoints.tiny_parts import bpe_tokenizer

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *INTERNVL_MARKS.values()]
    tokenizer = bpe_tokenizer(specials, "<|im_end|>", "<|endoftext|>", chat_template)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer, eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>", extra_special_tokens=INTERNVL_MARKS,
                                        chat_template=chat_template)
    vision = _depth(arch.vision, "num_hidden_layers", layers)
    size = {"height": vision["image_size"][0], "width": vision["image_size"][1]}
    ratio = 0.5
    seq = round((size["height"] // vision["patch_size"][0]) * (size["width"] // vision["patch_size"][1]) * ratio ** 2)
    processor = InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(size=size, crop_to_patches=False),
        video_processor=InternVLVideoProcessor(size=size), tokenizer=tokenizer, image_seq_length=seq,
        chat_template=chat_template)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>", "<IMG_CONTEXT>")}
    text = _depth(arch.text, "num_hidden_layers", layers)
    config = InternVLConfig(
        vision_config=vision,
        text_config=dict(model_type="qwen3", rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                         max_position_embeddings=40960, rms_norm_eps=1e-6, eos_token_id=ids["<|im_end|>"],
                         pad_token_id=ids["<|endoftext|>"], bos_token_id=None, tie_word_embeddings=False, **text),
        image_token_id=ids["<IMG_CONTEXT>"], image_seq_length=seq, downsample_ratio=ratio,
        projector_hidden_act="gelu", vision_feature_layer=-1, tie_word_embeddings=False)
    return AutoModelForImageTextToText.from_config(config), processor


def _qwen3_5(arch: Arch, layers: int | None):
    from transformers import (
        Qwen2VLImageProcessor,
        Qwen3_5Config,
        Qwen3_5ForConditionalGeneration,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    from streamvid.checkpoints.tiny_parts import bpe_tokenizer
    from streamvid.checkpoints.hybrid import QWEN3_5_CHAT_TEMPLATE, SPECIALS, layer_types

    tokenizer = bpe_tokenizer(SPECIALS, "<|im_end|>", "<|endoftext|>", QWEN3_5_CHAT_TEMPLATE)
    shape = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5] * 3,
             "image_std": [0.5] * 3}
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(size={"shortest_edge": 65536, "longest_edge": 16777216}, **shape),
        video_processor=Qwen3VLVideoProcessor(size={"shortest_edge": 4096, "longest_edge": 25165824}, **shape),
        tokenizer=tokenizer, chat_template=QWEN3_5_CHAT_TEMPLATE)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    text = _depth(arch.text, "num_hidden_layers", layers)
    text = {**text, "layer_types": layer_types(text["num_hidden_layers"], text["full_attention_interval"]),
            "rope_parameters": {"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
                                "mrope_section": [11, 11, 10], "mrope_interleaved": True},
            "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"], "bos_token_id": None}
    config = Qwen3_5Config(text_config=text, vision_config=_depth(arch.vision, "depth", layers),
                           image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                           vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
                           tie_word_embeddings=True)
    return Qwen3_5ForConditionalGeneration(config), processor


def _tiny(arch: Arch, layers: int | None):
    """make-tiny's checkpoint of the family (hidden 64), written to a temporary folder and loaded back."""
    import tempfile

    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from streamvid.checkpoints.families import make_tiny

    with tempfile.TemporaryDirectory() as tmp:
        out = make_tiny(arch.family, tmp, seed=int(torch.initial_seed()), layers=layers or 2)
        return AutoModelForImageTextToText.from_pretrained(out), AutoProcessor.from_pretrained(out)


ARCHS: dict[str, Arch] = {a.name: a for a in (
    Arch("smolvlm2-256m", "smolvlm2", "SmolVLM2-256M-Video-Instruct", _smolvlm,
         text={"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
               "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49280},
         vision=SMOLVLM_VISION),
    Arch("smolvlm2-500m", "smolvlm2", "SmolVLM2-500M-Video-Instruct", _smolvlm,
         text={"hidden_size": 960, "intermediate_size": 2560, "num_hidden_layers": 32, "num_attention_heads": 15,
               "num_key_value_heads": 5, "head_dim": 64, "vocab_size": 49280},
         vision=SMOLVLM_VISION),
    Arch("internvl3.5-1b", "internvl3.5", "InternVL3.5-1B", _internvl,
         text={"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
               "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936},
         vision=INTERNVL_VISION),
    Arch("qwen3.5-0.8b", "qwen3.5", "Qwen3.5-0.8B", _qwen3_5,
         text={**QWEN3_5_TEXT, "hidden_size": 1024, "intermediate_size": 3584},
         vision={**QWEN3_5_VISION, "hidden_size": 768, "intermediate_size": 3072, "depth": 12, "num_heads": 12,
                 "out_hidden_size": 1024}),
    Arch("qwen3.5-2b", "qwen3.5", "Qwen3.5-2B", _qwen3_5,
         text={**QWEN3_5_TEXT, "hidden_size": 2048, "intermediate_size": 6144},
         vision={**QWEN3_5_VISION, "hidden_size": 1024, "intermediate_size": 4096, "depth": 24, "num_heads": 16,
                 "out_hidden_size": 2048}),
    Arch("smolvlm2-tiny", "smolvlm2", "make-tiny smolvlm2", _tiny, frame_px=112, tiny=True),
    Arch("internvl3.5-tiny", "internvl3.5", "make-tiny internvl3.5", _tiny, frame_px=112, tiny=True),
    Arch("qwen3.5-tiny", "qwen3.5", "make-tiny qwen3.5", _tiny, frame_px=112, tiny=True),
)}


def build(name: str, layers: int | None = None, seed: int = 0) -> tuple:
    """(model, processor) of `name` with random weights (seeded), on the CPU in float32."""
    if name not in ARCHS:
        raise ValueError(f"unknown architecture {name!r}; expected one of {', '.join(ARCHS)}")
    if layers is not None and layers < 1:
        raise ValueError(f"--layers must be >= 1, got {layers}")
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.manual_seed(seed)
    return ARCHS[name].build(ARCHS[name], layers)


def random_adapter(name: str, layers: int | None = None, device: str = "auto", dtype: str = "auto",
                   attn: str = "auto", seed: int = 0):
    """The family's adapter over a randomly initialised `name` (one of ARCHS), in `dtype` on `device`."""
    import torch

    from streamvid.adapters.hf import resolve_attn, resolve_device, resolve_dtype
    from streamvid.adapters.internvl import InternVLAdapter
    from streamvid.adapters.qwen3_5 import Qwen3_5Adapter
    from streamvid.adapters.smolvlm import SmolVLMAdapter

    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    model, processor = build(name, layers, seed)
    model.set_attn_implementation(resolve_attn(attn, device, dtype))
    model.to(getattr(torch, dtype))
    adapter_cls = {"smolvlm2": SmolVLMAdapter, "internvl3.5": InternVLAdapter,
                   "qwen3.5": Qwen3_5Adapter}[ARCHS[name].family]
    label = f"random-{name}" + (f"-{layers}l" if layers else "")
    text = model.config.get_text_config()
    kinds = getattr(text, "layer_types", None) or ["full_attention"] * text.num_hidden_layers
    middle = text.num_hidden_layers // 2  # the attention layer nearest the middle (a hybrid's linear layers: no keys)
    index = min((i for i, kind in enumerate(kinds) if kind != "linear_attention"), key=lambda i: (abs(i - middle), i))
    return adapter_cls(label, device=device, dtype=dtype, attn=attn, index_layer=index, prebuilt=(processor, model))
