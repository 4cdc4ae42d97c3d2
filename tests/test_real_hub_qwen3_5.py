"""The Qwen3.5 adapter against the real hub metadata of Qwen3.5-0.8B (no weights): its config, chat template,
processor files and tokenizer vocabulary in `../shared/real-hub/qwen3_5/` (SOURCES.md there says where each file
came from).

transformers 5.25 builds Qwen3.5's tokenizer from tokenizer.json only, and the hub files are vocab.json + merges.txt
(the tokenizer they load is empty: tests/test_refusals.py), so the tokenizer is built here from those two files
and the real tokenizer_config.json's added tokens (`Qwen3_5Tokenizer(vocab=..., merges=...)`) and saved with the
checkpoint as tokenizer.json. A checkpoint is built in a tmp dir from the real config shrunk (4 decoder layers:
Gated DeltaNet, Gated DeltaNet, Gated DeltaNet, full attention, as the real layout; hidden 64; the real head_dim,
partial rotary factor and M-RoPE sections; real vocabulary and token ids; 2 vision blocks with the real patch,
temporal patch and merge sizes), with random weights, and loaded by `load_adapter`. The reference is the real
processor files with that tokenizer, called directly:

- the prompt text: sink text + the template's video placeholder + `prompt(question[, dialogue])` is exactly what
  the real chat template renders (its answer header with thinking off: an empty think block);
- a chunk of 2 frames at 112x112 and 640x360, at 0 s and 10 s: the processor's ids for the whole rendered
  conversation are the sink text's ids, the adapter's chunk ids, then the prompt's ids; the grid, video-pad count,
  pixel values and timestamp are the processor's;
- the shrunk hybrid model encodes a chunk of those tokens (the vision features fill the video-pad tokens).

Skipped where the folder is absent, unless STREAMVID_REQUIRE_REAL_HUB=1 (set by .ci/run), which makes its absence a
failure.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AddedToken, AutoConfig, AutoModelForImageTextToText, AutoProcessor

from streamvid.adapters.base import load_adapter
from streamvid.adapters.hf import SYSTEM_PROMPT
from streamvid.kv.positions import concat
from streamvid.kv.window import Block

REAL_HUB = Path(__file__).resolve().parents[2] / "shared" / "real-hub"
FAMILY = REAL_HUB / "qwen3_5"
if not (FAMILY / "config.json").is_file():
    if os.environ.get("STREAMVID_REQUIRE_REAL_HUB") == "1":
        raise RuntimeError(f"STREAMVID_REQUIRE_REAL_HUB=1 but {FAMILY} is absent")
    pytest.skip(f"{FAMILY} not found", allow_module_level=True)

TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4}
PROCESSOR_FILES = ("preprocessor_config.json", "video_preprocessor_config.json", "chat_template.jinja")
SIZES = [(112, 112), (360, 640)]  # (height, width)
FRAMES, FPS = 2, 2.0
QUESTION = "What is the man holding, and is it red?"
DIALOGUE = [("What do you see?", "A man in a kitchen."), ("Is he cooking?", "Yes.")]


def real_tokenizer():
    """Qwen3.5's tokenizer from the real vocab.json + merges.txt and tokenizer_config.json's added tokens."""
    from transformers.models.qwen3_5.tokenization_qwen3_5 import Qwen3_5Tokenizer

    vocab = json.loads((FAMILY / "vocab.json").read_text())
    merges = [tuple(line.split(" ")) for line in (FAMILY / "merges.txt").read_text().splitlines()
              if line and not line.startswith("#version")]
    cfg = json.loads((FAMILY / "tokenizer_config.json").read_text())
    fields = ("content", "lstrip", "rstrip", "normalized", "single_word", "special")
    added = {int(i): AddedToken(**{k: v for k, v in d.items() if k in fields})
             for i, d in cfg["added_tokens_decoder"].items()}
    return Qwen3_5Tokenizer(vocab=vocab, merges=merges, added_tokens_decoder=added,
                            extra_special_tokens=cfg.get("extra_special_tokens", {}),
                            **{k: cfg[k] for k in ("eos_token", "pad_token", "unk_token", "bos_token") if k in cfg})


class Real:
    """The shrunk checkpoint loaded by the adapter, and the real processor with the rebuilt tokenizer."""

    def __init__(self, out: Path):
        self.config = json.loads((FAMILY / "config.json").read_text())
        real = AutoConfig.from_pretrained(FAMILY)
        d = real.to_dict()
        d["text_config"].update(TEXT)
        d["text_config"].pop("layer_types", None)  # recomputed for 4 layers: every fourth full attention
        d["vision_config"].update(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)
        for key in ("_name_or_path", "transformers_version"):
            d.pop(key, None)
        torch.manual_seed(0)
        AutoModelForImageTextToText.from_config(type(real).from_dict(d), dtype=torch.float32).save_pretrained(out)
        tokenizer = real_tokenizer()
        tokenizer.save_pretrained(out)  # tokenizer.json: what transformers reads for Qwen3.5
        for name in PROCESSOR_FILES:
            (out / name).write_bytes((FAMILY / name).read_bytes())
        self.adapter = load_adapter(str(out))
        self.processor = AutoProcessor.from_pretrained(FAMILY, tokenizer=tokenizer)

    def render(self, question: str, dialogue=()) -> str:
        turns = [*[t for pair in dialogue for t in pair], question]
        messages = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": turns[0]}]}]
        for i, text in enumerate(turns[1:]):
            messages.append({"role": "assistant" if i % 2 == 0 else "user", "content": text})
        return self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Real:
    return Real(tmp_path_factory.mktemp("real-hub") / "qwen3_5")


def frames(height: int, width: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(FRAMES)]


def test_shrunk_checkpoint_keeps_the_real_ids_layout_and_rope(real):
    adapter, cfg = real.adapter, real.config
    assert type(adapter).__name__ == "Qwen3_5Adapter"
    kinds = adapter.model.config.get_text_config().layer_types
    assert kinds == cfg["text_config"]["layer_types"][:4]  # linear, linear, linear, full: the real layout's start
    assert adapter.kv_layer_ids == [3] and adapter.index_layer == 3
    tok = adapter.tokenizer
    assert tok.convert_tokens_to_ids(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]) == [
        cfg["vision_start_token_id"], cfg["vision_end_token_id"], cfg["image_token_id"], cfg["video_token_id"]]
    # an answer ends at the end of its turn (<|im_end|>, the tokenizer's eos) or the config's eos (<|endoftext|>)
    assert {tok.convert_tokens_to_ids("<|im_end|>"), cfg["text_config"]["eos_token_id"]} <= adapter.stop_ids
    assert len(tok.encode("What colour is the circle?", add_special_tokens=False)) > 3  # a real vocabulary
    # partial interleaved M-RoPE: a quarter of the 256-wide head rotary, one frequency per rotated pair
    rope = cfg["text_config"]["rope_parameters"]
    assert adapter.kv_shape.head_dim == 256
    assert adapter.rope_inv_freq.shape[0] == sum(rope["mrope_section"]) == int(256 * rope["partial_rotary_factor"]) // 2


@pytest.mark.parametrize("dialogue", [(), DIALOGUE], ids=["question", "dialogue"])
def test_prompt_text_is_the_real_chat_template(real, dialogue):
    adapter = real.adapter
    rendered = real.render(QUESTION, dialogue)
    prompt = adapter.prompt(QUESTION, dialogue)
    assert rendered.startswith(adapter.sink_text) and rendered.endswith(prompt)
    assert rendered[len(adapter.sink_text):len(rendered) - len(prompt)] == "<|vision_start|><|video_pad|><|vision_end|>"
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize("t_start_s", [0.0, 10.0])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[1]}x{s[0]}")
def test_chunk_ids_are_the_real_processor_ids(real, size, t_start_s):
    adapter, proc = real.adapter, real.processor
    video = frames(*size)
    chunk = adapter.chunk_inputs(video, FRAMES / FPS, t_start_s)
    ids = chunk.ids[0].tolist()
    first = round(t_start_s * FPS)
    meta = {"fps": FPS, "frames_indices": list(range(first, first + FRAMES)), "total_num_frames": first + FRAMES}
    rendered = real.render(QUESTION)
    ref = proc(text=[rendered], videos=[np.stack(video)], video_metadata=[meta], do_sample_frames=False,
               cap_pixels_per_frame=True, return_tensors="pt")
    ref_ids = ref["input_ids"][0].tolist()
    sink = proc.tokenizer.encode(adapter.sink_text, add_special_tokens=False)
    prompt = proc.tokenizer.encode(adapter.prompt(QUESTION), add_special_tokens=False)
    assert ref_ids[:len(sink)] == sink and ref_ids[len(ref_ids) - len(prompt):] == prompt
    assert ids == ref_ids[len(sink):len(ref_ids) - len(prompt)]
    grid, merge = ref["video_grid_thw"], proc.video_processor.merge_size
    assert torch.equal(chunk.vision["video_grid_thw"].cpu(), grid)
    assert ids.count(real.config["video_token_id"]) == math.prod(grid[0].tolist()) // merge**2
    assert int(chunk.video_mask.sum()) == ids.count(real.config["video_token_id"])
    assert torch.allclose(chunk.vision["pixel_values_videos"].float().cpu(), ref["pixel_values_videos"].float())
    assert f"<{t_start_s + 0.5 / FPS:.1f} seconds>" in proc.tokenizer.decode(ids)


def test_shrunk_hybrid_model_encodes_a_chunk_of_real_tokens(real):
    adapter = real.adapter
    sinks = adapter.encode_text(adapter.sink_text, None)
    base = Block(-1, 0, 0, sinks.keys, sinks.values, 0, sinks.pos_span, state=sinks.state)
    enc = adapter.encode_chunk(frames(*SIZES[1]), concat([base], sinks.pos_span), FRAMES / FPS, t_start_s=0.0)
    assert enc.n_tokens == adapter.tokens_per_chunk(*SIZES[1], FRAMES) and len(enc.keys) == 1
    assert list(enc.state.layers) == [0, 1, 2]
    assert enc.vector is not None and np.isfinite(enc.vector).all()
