"""What the engine cannot hold, refused at load by name, from config.json and the tokenizer before any weights load.

The engine keeps, per stream, a window of per-token K/V in every decoder layer, moves cached blocks by rotating their
keys and brings back memory blocks as K/V (window.py, positions.py). A checkpoint with other layers would run
wrongly, not fail, so it is refused with one line naming its `model_type` and the reason:

- linear-attention / Gated DeltaNet layers outside the families that hold them (Qwen3.5's `qwen3_5` is held:
  `HELD`; Qwen3-Next is not): a recurrent state per layer;
- sliding-window attention layers (Gemma 3 / 3n / 4, a Qwen2 text model with `use_sliding_window`);
- K/V shared across layers (Gemma 3n / Gemma 4: `num_kv_shared_layers`);
- convolution or state-space layers (LFM2-VL's `conv`, Mamba hybrids).

A tokenizer that loads empty (Qwen3.5's tokenizer files without tokenizer.json: transformers reads only
tokenizer.json for it) is refused too: it would encode every prompt to nothing.
"""

from __future__ import annotations

FULL = {"full_attention", "attention"}
# the other layer kinds the engine holds, per model_type: Qwen3.5's Gated DeltaNet layers keep a recurrent state per
# stream (kv/recurrent_state.py, adapters/qwen3_5.py)
HELD = {"qwen3_5": {"linear_attention"}}
LAYER_REASONS = {
    "linear_attention": "Gated DeltaNet (linear-attention) layers, which keep a recurrent state, not per-token K/V",
    "sliding_attention": "sliding-window attention layers",
    "chunked_attention": "chunked attention layers",
    "conv": "convolution layers",
    "mamba": "state-space (Mamba) layers",
}
PROBE_TEXT = "What is happening in the video?"


def _sections(config: dict) -> list[dict]:
    """The config and its text model's config (where the decoder's layer layout is)."""
    text = config.get("text_config")
    return [config, text] if isinstance(text, dict) else [config]


def layer_reasons(config: dict) -> list[str]:
    """Why the engine cannot hold this checkpoint's decoder layers (empty: it can), from its config.json."""
    reasons: list[str] = []
    held = FULL | HELD.get(config.get("model_type"), set())
    for section in _sections(config):
        kinds = [*(section.get("layer_types") or ()), *(section.get("layers_block_type") or ())]
        for kind in dict.fromkeys(kinds):
            if kind not in held:
                reasons.append(LAYER_REASONS.get(kind, f"{kind} layers"))
        if section.get("use_sliding_window") and section.get("sliding_window"):
            reasons.append(LAYER_REASONS["sliding_attention"])
        if section.get("num_kv_shared_layers"):
            reasons.append(f"K/V shared across layers (num_kv_shared_layers {section['num_kv_shared_layers']})")
    return list(dict.fromkeys(reasons))


def check_layers(config: dict, model: str, model_types: list[str]) -> None:
    """Refuse (ValueError, one line naming the supported `model_types`) a checkpoint whose layers the engine cannot
    hold."""
    reasons = layer_reasons(config)
    if reasons:
        raise ValueError(f"cannot load model {model!r}: model_type {config.get('model_type')!r} has "
                         f"{'; '.join(reasons)}: the engine holds full-attention K/V layers only (and Qwen3.5's "
                         f"linear-attention layers); supported model types: {', '.join(model_types)}")


def check_tokenizer(tokenizer, model: str) -> None:
    """Refuse (ValueError, one line) a tokenizer that encodes ordinary text to nothing (an empty vocabulary)."""
    ids = tokenizer.encode(PROBE_TEXT, add_special_tokens=False)
    if not ids:
        raise ValueError(f"cannot load model {model!r}: its tokenizer ({type(tokenizer).__name__}) loaded "
                         f"{len(tokenizer)} tokens and encodes text to nothing; give the checkpoint its "
                         "tokenizer.json (transformers builds this tokenizer from tokenizer.json only)")
