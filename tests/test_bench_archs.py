"""`streamvid bench --arch` for the small families: the names the command line takes, the real-size architectures
against the published numbers (parameter counts and sizes of the published checkpoints, SmolVLM2-500M's real
config.json and processor where `../shared/real-hub` is present), tokens per frame, `--layers`, the re-encoding
baseline against HF's own preparation of the same conversation, and a quick bench run on a tiny architecture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from streamvid.checkpoints.real_size import ARCHS, build, random_adapter

REAL_HUB = Path(__file__).resolve().parents[2] / "shared" / "real-hub"
# the published checkpoints: model.safetensors of the SmolVLM2 Video-Instruct models (float32) is 1.03 GB and
# 2.03 GB; InternVL3_5-1B-HF stores 304,012,288 vision, 751,632,384 language and 5,253,120 projector parameters
SMOLVLM_GB = {"smolvlm2-256m": 1.03, "smolvlm2-500m": 2.03}
INTERNVL_PARAMS = {"vision_tower": 304_012_288, "language_model+lm_head": 751_632_384,
                   "multi_modal_projector": 5_253_120}
# Qwen3.5's published configs: (hidden, MLP, vision width, vision MLP, vision blocks, vision heads); both have 24
# decoder layers, the 4th, 8th, ... 24th full attention (8 heads, 2 KV heads of 256), the others Gated DeltaNet (16
# key and 16 value heads of 128), a vocabulary of 248,320 and a tied LM head. Qwen3.5-0.8B's config.json, built by
# transformers' Qwen3_5ForConditionalGeneration, has 852,985,920 parameters (no multi-token-prediction layer).
QWEN3_5 = {"qwen3.5-0.8b": (1024, 3584, 768, 3072, 12, 12), "qwen3.5-2b": (2048, 6144, 1024, 4096, 24, 16)}
QWEN3_5_FULL_AT = [3, 7, 11, 15, 19, 23]


def _meta(name: str, layers: int | None = None):
    with torch.device("meta"):  # the architecture without memory for its weights
        return build(name, layers)[0]


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamvid.cli", "bench", *args], check=False, capture_output=True,
                          text=True, timeout=600)


def test_the_command_line_takes_every_architecture_and_refuses_others_in_one_line():
    from streamvid.cli.main import build_parser

    parser = build_parser()
    for name in ("tiny", "3b", "7b", "smolvlm2-256m", "smolvlm2-500m", "internvl3.5-1b", "qwen3.5-0.8b", "qwen3.5-2b",
                 "smolvlm2-tiny", "internvl3.5-tiny", "qwen3.5-tiny"):
        assert parser.parse_args(["bench", "--arch", name]).arch == name
    p = _bench("--arch", "smolvlm2-9b")
    assert p.returncode == 2 and "invalid choice: 'smolvlm2-9b'" in p.stderr


def test_internvl3_5_1b_has_the_published_parameter_counts():
    model = _meta("internvl3.5-1b")
    counts = {name: sum(p.numel() for p in getattr(model.model, name).parameters())
              for name in ("vision_tower", "multi_modal_projector")}
    counts["language_model+lm_head"] = (sum(p.numel() for p in model.model.language_model.parameters())
                                        + model.lm_head.weight.numel())
    assert counts == INTERNVL_PARAMS


@pytest.mark.parametrize("name", sorted(SMOLVLM_GB))
def test_smolvlm2_weighs_what_the_published_checkpoint_weighs(name):
    model = _meta(name)
    assert round(4 * sum(p.numel() for p in model.parameters()) / 1e9, 2) == SMOLVLM_GB[name]


@pytest.mark.skipif(not (REAL_HUB / "smolvlm2").is_dir(), reason="real hub metadata absent")
def test_smolvlm2_500m_matches_the_real_config_and_processor():
    from transformers import AutoProcessor

    real = json.loads((REAL_HUB / "smolvlm2" / "config.json").read_text())
    cfg = _meta("smolvlm2-500m").config
    text, vision = cfg.text_config, cfg.vision_config
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "head_dim", "vocab_size"):
        assert getattr(text, key) == real["text_config"][key], key
    for key in ("hidden_size", "num_attention_heads", "image_size", "patch_size"):
        assert getattr(vision, key) == real["vision_config"][key], key
    assert cfg.scale_factor == real["scale_factor"]
    # tokens per 384 px frame: the real processor's <image> tokens for one frame against the built adapter's chunk
    processor = AutoProcessor.from_pretrained(REAL_HUB / "smolvlm2")
    frame = np.zeros((1, 384, 384, 3), np.uint8)
    out = processor(text=["<video>"], videos=[frame], video_metadata=[{"fps": 1.0, "total_num_frames": 1,
                    "frames_indices": [0]}], do_sample_frames=False, return_tensors="pt")
    real_tokens = int((out["input_ids"][0] == processor.tokenizer.convert_tokens_to_ids("<image>")).sum())
    adapter = random_adapter("smolvlm2-500m", layers=1, device="cpu", dtype="float32")
    assert real_tokens == 64
    assert int(adapter.chunk_inputs([frame[0]], 1.0).video_mask.sum()) == real_tokens


@pytest.mark.parametrize("name", sorted(QWEN3_5))
def test_qwen3_5_builds_the_published_hybrid_shape(name):
    from streamvid.kv.budget import KVShape

    hidden, mlp, v_hidden, v_mlp, v_depth, v_heads = QWEN3_5[name]
    model = _meta(name)
    layers = model.model.language_model.layers
    assert len(layers) == 24
    # the layer kinds as the built modules have them, not as the config lists them
    assert [i for i, layer in enumerate(layers) if hasattr(layer, "self_attn")] == QWEN3_5_FULL_AT
    assert all(hasattr(layers[i], "linear_attn") for i in range(24) if i not in QWEN3_5_FULL_AT)
    attn, delta = layers[3].self_attn, layers[0].linear_attn
    assert attn.q_proj.weight.shape == (2 * 8 * 256, hidden)  # 8 heads of 256, doubled by the output gate
    assert attn.k_proj.weight.shape == attn.v_proj.weight.shape == (2 * 256, hidden)
    # 16 key heads of 128 for q and k, 16 value heads of 128; a gate per value head; a 4-tap convolution
    assert delta.in_proj_qkv.weight.shape == (2 * 16 * 128 + 16 * 128, hidden)
    assert delta.in_proj_z.weight.shape == (16 * 128, hidden) and delta.in_proj_b.weight.shape == (16, hidden)
    assert delta.conv1d.kernel_size == (4,)
    assert layers[0].mlp.gate_proj.weight.shape == (mlp, hidden)
    assert model.model.language_model.embed_tokens.weight.shape == (248320, hidden)
    assert model.lm_head.weight is model.model.language_model.embed_tokens.weight
    visual = model.model.visual
    assert len(visual.blocks) == v_depth and visual.blocks[0].attn.num_heads == v_heads
    assert visual.blocks[0].mlp.linear_fc1.weight.shape == (v_mlp, v_hidden)
    assert visual.merger.linear_fc2.weight.shape[0] == hidden
    # memory blocks hold K/V of the 6 attention layers only
    assert KVShape.from_config(model.config.to_dict(), "bfloat16") == KVShape(6, 2, 256, 2)
    if name == "qwen3.5-0.8b":
        assert sum(p.numel() for p in model.parameters()) == 852_985_920


def test_qwen3_5_keeps_its_layout_when_cut_and_writes_the_processors_tokens_per_frame_pair():
    assert _meta("qwen3.5-0.8b", layers=5).config.text_config.layer_types == [
        "linear_attention"] * 3 + ["full_attention", "linear_attention"]
    cut = _meta("qwen3.5-2b", layers=2)
    assert cut.config.text_config.layer_types == ["linear_attention", "full_attention"]
    assert (len(cut.model.visual.blocks), cut.config.text_config.hidden_size) == (2, 2048)
    adapter = random_adapter("qwen3.5-0.8b", layers=1, device="cpu", dtype="float32")
    # frames keep their size (a multiple of 32 px): 16 px patches, 2x2 merged, 2 frames a temporal patch
    for px, tokens in ((384, 12 * 12), (224, 7 * 7)):
        chunk = adapter.chunk_inputs([np.zeros((px, px, 3), np.uint8)] * 2, 1.0)
        assert int(chunk.video_mask.sum()) == tokens, px


def test_internvl3_5_1b_writes_256_tokens_for_a_384_px_frame():
    adapter = random_adapter("internvl3.5-1b", layers=1, device="cpu", dtype="float32")
    chunk = adapter.chunk_inputs([np.zeros((384, 384, 3), np.uint8)], 1.0)
    assert int(chunk.video_mask.sum()) == 256  # a 448 px tile: 32 x 32 patches of 14 px, pixel-shuffled by 0.5


def test_layers_keeps_the_widths_and_cuts_text_and_vision_depth():
    full, cut = _meta("smolvlm2-500m").config, _meta("smolvlm2-500m", layers=3).config
    assert (cut.text_config.num_hidden_layers, cut.vision_config.num_hidden_layers) == (3, 3)
    assert (full.text_config.num_hidden_layers, full.vision_config.num_hidden_layers) == (32, 12)
    assert cut.text_config.hidden_size == full.text_config.hidden_size == 960
    assert cut.vision_config.hidden_size == full.vision_config.hidden_size == 768
    assert _meta("internvl3.5-1b", layers=40).config.text_config.num_hidden_layers == 28  # never more than real
    with pytest.raises(ValueError, match="unknown architecture"):
        build("internvl3.5-9b")


@pytest.mark.parametrize("name", ["smolvlm2-tiny", "internvl3.5-tiny"])
def test_offline_generate_is_hf_generate_on_the_chat_templates_conversation(name):
    """The re-encoding baseline: what HF does with the conversation the chat template renders for a video and a
    question, prepared here from the messages (not from the adapter's text)."""
    from streamvid.adapters.hf import SYSTEM_PROMPT

    adapter = random_adapter(name, device="cpu", dtype="float32")
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, (112, 112, 3), np.uint8) for _ in range(4)]
    question = "What colour is the circle?"
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": question}]}]
    text = adapter.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    kwargs = {"video_metadata": [{"fps": 2.0, "total_num_frames": 4, "frames_indices": [0, 1, 2, 3]}]} \
        if ARCHS[name].family == "smolvlm2" else {}
    inputs = adapter.processor(text=[text], videos=[np.stack(frames)], do_sample_frames=False, return_tensors="pt",
                               **kwargs)
    with torch.inference_mode():
        expected = adapter.model.generate(**inputs, max_new_tokens=5, do_sample=False)[0, inputs["input_ids"].shape[1]:]
    assert adapter.offline_generate(frames, question, 5, fps=2.0) == expected.tolist()
    assert len(expected) >= 1


def test_quick_bench_on_a_tiny_family_reports_the_decode_rate(tmp_path):
    p = _bench("--arch", "internvl3.5-tiny", "--quick", "--json", "--minutes", "0.2", "--interference-s", "2",
               "--repeats", "1", "--questions", "2", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    full = json.loads((tmp_path / "bench.json").read_text())
    assert full["model"].startswith("make-tiny internvl3.5") and full["config"]["frame_px"] is None
    assert "112 px frames" in full["model"]
    assert out["ingest_frames_per_s"] > 0 and set(out["reencode_ttft_ms"]) == {"16", "32", "64"}
    decode = full["stream"]["decode"]
    assert decode["answers"] == 2
    # every answer decodes up to 16 tokens unless the model stops it: the rate is the tokens after the first
    assert out["decode_tokens_per_s"] is None if decode["tokens"] == 0 else out["decode_tokens_per_s"] > 0


def test_memory_blocks_cost_what_the_kv_layout_says():
    """docs/operations.md's bytes per stream hour: a block of a chunk's tokens in int8 memory costs layers x 2 x
    kv_heads x head_dim x tokens bytes plus float16 scales (keys per channel, values per token), counted here by
    hand for make-tiny's InternVL3.5 (2 layers, 2 KV heads of 16; 2 frames of 16 image tokens = 52 tokens a chunk)
    and read from what the engine's memory holds after a stream."""
    from streamvid.assistant.assistant import StreamingAssistant
    from streamvid.config import EngineConfig
    from streamvid.types import Frame

    adapter = random_adapter("internvl3.5-tiny", device="cpu", dtype="float32")
    tokens = 2 * (16 + 2) + len(adapter.token_ids("Frame1: \nFrame2: \n")[0])  # <img>, </img> and the frame text
    assert tokens == adapter.tokens_per_chunk(112, 112, 2)
    per_block = 2 * 2 * 2 * 16 * tokens + 2 * (2 * 2 * (16 + tokens))
    config = EngineConfig.from_settings(model="bench", device="cpu", dtype="float32", fps=2.0, dialogue_turns=0)
    frames = [np.full((112, 112, 3), 40 * i, np.uint8) for i in range(6)]
    with StreamingAssistant(config, adapter=adapter) as sa:
        sa.feed(Frame(frames[i % 6], i / 2.0, i) for i in range(40))
        sa.memory.flush()
        stats = sa.memory.stats()
    assert stats.blocks > 0
    assert round(stats.ram_mb * 2**20) == stats.blocks * per_block
