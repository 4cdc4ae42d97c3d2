"""Checkpoints the engine cannot hold are refused at load, by name, from config.json and the tokenizer alone (no
weights in these checkpoint directories: a refusal that came after the weights would fail otherwise):
linear-attention layers outside Qwen3.5 (which holds them), sliding-window layers, K/V shared across layers,
convolution layers, and a tokenizer that loads empty. The configs are the real ones where `../shared/real-hub` has them (Qwen3.5-0.8B, Gemma 4 E2B), else the
layer layout of the published configs written out here (Gemma 3n E2B, LFM2-VL-450M, a Qwen2 text model with sliding
windows). Each refusal is one line naming the model type and the reason."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from streamvid.adapters.base import load_adapter
from streamvid.adapters.refusals import check_tokenizer, layer_reasons

REAL_HUB = Path(__file__).resolve().parents[2] / "shared" / "real-hub"


def real_config(family: str) -> dict:
    path = REAL_HUB / family / "config.json"
    if not path.is_file():
        if os.environ.get("STREAMVID_REQUIRE_REAL_HUB") == "1":
            raise RuntimeError(f"STREAMVID_REQUIRE_REAL_HUB=1 but {path} is absent")
        pytest.skip(f"{path} not found")
    return json.loads(path.read_text())


def refusal(tmp_path: Path, config: dict) -> str:
    """load_adapter's one-line error for a checkpoint directory holding only `config`."""
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as e:
        load_adapter(str(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"cannot load model {str(tmp_path)!r}: ")
    return msg


def test_linear_attention_layers_are_refused_by_name_outside_qwen3_5(tmp_path):
    """Qwen3.5's Gated DeltaNet layers are held (adapters/qwen3_5.py); the same layer kind in another family
    (Qwen3-Next's layout, written out here) is refused by name."""
    assert layer_reasons(real_config("qwen3_5")) == []
    layers = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(48)]
    config = {"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"], "layer_types": layers}
    msg = refusal(tmp_path, config)
    assert "model_type 'qwen3_next'" in msg
    assert "Gated DeltaNet (linear-attention) layers" in msg
    assert "supported model types: " in msg and "smolvlm" in msg and "qwen3_5" in msg


def test_gemma4_sliding_windows_and_shared_kv_are_refused_by_name(tmp_path):
    msg = refusal(tmp_path, real_config("gemma4_e2b"))
    assert "model_type 'gemma4'" in msg
    assert "sliding-window attention layers" in msg and "K/V shared across layers (num_kv_shared_layers 20)" in msg


def test_gemma3n_sliding_windows_and_shared_kv_are_refused_by_name(tmp_path):
    # google/gemma-3n-E2B-it: 30 layers, every fifth global, the last 10 reuse earlier layers' K/V
    layers = ["full_attention" if i % 5 == 4 else "sliding_attention" for i in range(30)]
    config = {"model_type": "gemma3n", "architectures": ["Gemma3nForConditionalGeneration"],
              "text_config": {"model_type": "gemma3n_text", "layer_types": layers, "sliding_window": 512,
                              "num_kv_shared_layers": 10}}
    msg = refusal(tmp_path, config)
    assert "model_type 'gemma3n'" in msg
    assert "sliding-window attention layers; K/V shared across layers (num_kv_shared_layers 10)" in msg


def test_lfm2_vl_convolution_layers_are_refused_by_name(tmp_path):
    # LiquidAI/LFM2-VL-450M: LFM2's short-convolution layers with a few attention layers between them
    layers = ["conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv", "full_attention",
              "conv", "full_attention", "conv", "full_attention", "conv", "full_attention", "conv"]
    config = {"model_type": "lfm2_vl", "architectures": ["Lfm2VlForConditionalGeneration"],
              "text_config": {"model_type": "lfm2", "layer_types": layers}}
    msg = refusal(tmp_path, config)
    assert "model_type 'lfm2_vl'" in msg and "convolution layers" in msg


def test_a_supported_family_with_sliding_windows_is_refused_and_without_them_is_not(tmp_path):
    """A Qwen2-VL checkpoint is refused only when its text model uses sliding windows: the flag, not the family."""
    base = {"model_type": "qwen2_vl", "architectures": ["Qwen2VLForConditionalGeneration"],
            "text_config": {"model_type": "qwen2_vl_text", "sliding_window": 4096, "use_sliding_window": False}}
    assert layer_reasons(base) == []
    assert layer_reasons({**base, "text_config": {**base["text_config"], "layer_types": ["full_attention"] * 4}}) == []
    windowed = {**base, "text_config": {**base["text_config"], "use_sliding_window": True}}
    msg = refusal(tmp_path, windowed)
    assert "model_type 'qwen2_vl' has sliding-window attention layers" in msg
    # the real configs of the supported families that are here pass
    for family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "smolvlm2"):
        if (REAL_HUB / family / "config.json").is_file():
            assert layer_reasons(real_config(family)) == [], family


def test_qwen3_5_tokenizer_without_tokenizer_json_is_refused():
    """transformers 5.25 builds Qwen3.5's tokenizer from tokenizer.json only: from vocab.json + merges.txt it
    loads only the special tokens and encodes text to nothing."""
    from transformers import AutoTokenizer

    real_config("qwen3_5")
    empty = AutoTokenizer.from_pretrained(REAL_HUB / "qwen3_5")
    assert empty.encode("hello world", add_special_tokens=False) == []  # what the check guards against
    with pytest.raises(ValueError) as e:
        check_tokenizer(empty, "Qwen/Qwen3.5-0.8B")
    msg = str(e.value)
    assert "\n" not in msg and "'Qwen/Qwen3.5-0.8B'" in msg and "encodes text to nothing" in msg
    assert "tokenizer.json" in msg


def test_a_checkpoint_whose_tokenizer_loads_empty_is_refused_before_its_weights(tmp_path):
    """A tiny Qwen2-VL checkpoint with its tokenizer.json replaced by one with the special tokens only and its
    weights deleted: load_adapter refuses it for the tokenizer (the weights are never reached)."""
    from tokenizers import Tokenizer, models

    from streamvid.checkpoints.families import make_tiny

    out = make_tiny("qwen2-vl", tmp_path / "m", seed=0, layers=1)
    real = Tokenizer.from_file(str(out / "tokenizer.json"))
    specials = [t.content for t in real.get_added_tokens_decoder().values()]
    empty = Tokenizer(models.BPE(vocab={}, merges=[]))
    empty.add_special_tokens(specials)
    empty.save(str(out / "tokenizer.json"))
    for weights in out.glob("*.safetensors"):
        weights.unlink()
    with pytest.raises(ValueError) as e:
        load_adapter(str(out))
    msg = str(e.value)
    assert "\n" not in msg and "encodes text to nothing" in msg and str(out) in msg
