"""The Qwen adapters against the real hub metadata of Qwen2.5-VL-7B, Qwen2-VL-2B and Qwen3-VL-4B, and the SmolVLM2
adapter against SmolVLM2-500M-Video-Instruct's (no weights).

`../shared/real-hub/<family>/` (beside the repository; SOURCES.md there says where each file came from) holds the
real config, tokenizer (vocab.json + merges.txt + tokenizer_config.json), chat template and processor files. Per
family, a checkpoint is built in a tmp dir from the real config shrunk (2 decoder layers, hidden 64, 2 vision blocks;
real vocabulary and token ids; M-RoPE sections scaled to half the smaller head; patch, temporal patch and merge
sizes kept), with random weights and a copy of the real processor files, and loaded by `load_adapter`. What the
adapter writes is then compared with the real processor called directly (`AutoProcessor.from_pretrained` on the
real-hub folder, `apply_chat_template`, `processor(text=..., videos=...)`):

- the prompt text: sink text + the template's video placeholder + `prompt(question[, dialogue])` is exactly what
  the real chat template renders for the same conversation;
- a chunk of 2 frames at 112x112, 640x360 and 1280x720: the processor's ids for the whole rendered conversation
  are the tokenizer's ids of the sink text, then the adapter's chunk ids, then the prompt's ids, list for list;
  the chunk's grid, video-pad count (t*h*w / merge^2), pixel values and `tokens_per_chunk` agree with the
  processor's; Qwen3-VL's timestamps are the processor's for the same frames at that time in the clip (video
  metadata), with `cap_pixels_per_frame=True` as the adapter passes it. Qwen2(.5)-VL's reference uses the
  processor's defaults;
- the shrunk model runs a chunk (the model checks that the vision features fill the video-pad tokens).

SmolVLM2 the same way (its own section below): prompt text, chunk ids within the real processor's ids for the whole
conversation (less the intro sentence a stream has no use for), pixel values, 64 tokens per frame.

Skipped where the real-hub folder is absent, unless STREAMVID_REQUIRE_REAL_HUB=1 (set by .ci/run, whose checkout has
the folder beside it), which makes its absence a failure.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

from streamvid.adapters.base import load_adapter
from streamvid.adapters.hf import SYSTEM_PROMPT
from streamvid.types import Context

REAL_HUB = Path(__file__).resolve().parents[2] / "shared" / "real-hub"
if not REAL_HUB.is_dir():
    if os.environ.get("STREAMVID_REQUIRE_REAL_HUB") == "1":
        raise RuntimeError(f"STREAMVID_REQUIRE_REAL_HUB=1 but the real hub metadata is not at {REAL_HUB}")
    pytest.skip(f"real hub metadata not found at {REAL_HUB}", allow_module_level=True)

FAMILIES = {"qwen2_5_vl": "QwenVLAdapter", "qwen2_vl": "QwenVLAdapter", "qwen3_vl": "Qwen3VLAdapter"}
SIZES = [(112, 112), (360, 640), (720, 1280)]  # (height, width) of the frames
FRAMES = 2
FPS = 2.0
QUESTION = "What is the man holding, and is it red?"
DIALOGUE = [("What do you see?", "A man in a kitchen."), ("Is he cooking?", "Yes.")]
# the shrunk text model: small, but with more than one KV head and a head a whole number of M-RoPE sections fit in
TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_window_layers": 2}
HEAD_DIM = 32  # for a config that sets head_dim (Qwen3-VL); the others get hidden_size / heads = 16
# files of the checkpoint that are not the processor's (the shrunk model writes its own)
MODEL_FILES = ("config.json", "generation_config.json", "SOURCES.md")


def shrunk_config(real_dir: Path):
    """The real config with a small text model and vision tower: token ids, vocabulary, rope theta, patch,
    temporal patch and merge sizes kept; M-RoPE sections scaled to the new head (they must scale exactly)."""
    real = AutoConfig.from_pretrained(real_dir)
    d = real.to_dict()
    text, vision = d["text_config"], d["vision_config"]
    text.update(TEXT)
    text.pop("layer_types", None)  # recomputed for the new layer count
    if text.get("head_dim"):
        text["head_dim"] = HEAD_DIM
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    section = text["rope_parameters"]["mrope_section"]
    half, total = head_dim // 2, sum(section)
    assert all(s * half % total == 0 for s in section), f"{section} does not scale to {half}"
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_section": [s * half // total for s in section]}
    vision.update(depth=2, num_heads=2)
    if "embed_dim" in vision:  # Qwen2-VL: the tower works at embed_dim, its merger outputs hidden_size (the LM's)
        vision.update(embed_dim=32, mlp_ratio=2, hidden_size=TEXT["hidden_size"])
    else:
        vision.update(hidden_size=32, intermediate_size=64, out_hidden_size=TEXT["hidden_size"])
    if "fullatt_block_indexes" in vision:  # Qwen2.5-VL: window attention in the other blocks
        vision["fullatt_block_indexes"] = [1]
    if "deepstack_visual_indexes" in vision:  # Qwen3-VL: features of these blocks go into the first LM layers
        vision["deepstack_visual_indexes"] = [0, 1]
    for key in ("_name_or_path", "transformers_version"):
        d.pop(key, None)
    return type(real).from_dict(d)


def build_checkpoint(family: str, out: Path) -> Path:
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(shrunk_config(REAL_HUB / family), dtype=torch.float32)
    model.save_pretrained(out)
    for src in (REAL_HUB / family).iterdir():  # the real tokenizer, chat template and processor files
        if src.is_file() and src.name not in MODEL_FILES:
            (out / src.name).write_bytes(src.read_bytes())
    return out


class Family:
    """A family's shrunk checkpoint loaded by the adapter, the real processor and the real config."""

    def __init__(self, name: str, root: Path):
        self.name = name
        self.real_config = json.loads((REAL_HUB / name / "config.json").read_text())
        self.dir = build_checkpoint(name, root / name)
        self.adapter = load_adapter(str(self.dir))
        self.processor = AutoProcessor.from_pretrained(REAL_HUB / name)

    def token_id(self, key: str) -> int:
        return int(self.real_config[key])

    def render(self, question: str, dialogue=()) -> str:
        """The real chat template's text for: system prompt; a user turn with the video, then the first question;
        earlier answers and questions; the answer header."""
        turns = [*[t for pair in dialogue for t in pair], question]
        messages = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": turns[0]}]}]
        for i, text in enumerate(turns[1:]):
            messages.append({"role": "assistant" if i % 2 == 0 else "user", "content": text})
        return self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def video_kwargs(self, t_start_s: float) -> dict:
        """The frames as frames t_start_s * FPS onwards of a clip at FPS (Qwen3-VL writes their times), as the
        processor takes pre-sampled frames; Qwen3-VL with the per-frame pixel cap the adapter asks for."""
        first = round(t_start_s * FPS)
        meta = {"fps": FPS, "frames_indices": list(range(first, first + FRAMES)), "total_num_frames": first + FRAMES}
        kwargs = {"video_metadata": [meta], "do_sample_frames": False, "return_tensors": "pt"}
        if self.name == "qwen3_vl":
            kwargs["cap_pixels_per_frame"] = True
        return kwargs


@pytest.fixture(scope="module")
def families() -> dict[str, Family]:
    return {}  # built once per module, on first use


@pytest.fixture(params=list(FAMILIES))
def fam(request, families, tmp_path_factory) -> Family:
    if request.param not in families:
        families[request.param] = Family(request.param, tmp_path_factory.mktemp("real-hub"))
    return families[request.param]


def frames(height: int, width: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(FRAMES)]


def test_shrunk_checkpoint_keeps_the_real_ids_vocabulary_and_vision_geometry(fam):
    adapter = fam.adapter
    assert type(adapter).__name__ == FAMILIES[fam.name]
    cfg = adapter.model.config
    real = fam.real_config
    real_text = real.get("text_config", real)
    for key in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        assert getattr(cfg, key) == real[key]
    assert cfg.get_text_config().vocab_size == real_text["vocab_size"]
    assert cfg.get_text_config().num_hidden_layers == TEXT["num_hidden_layers"]
    for key in ("patch_size", "temporal_patch_size", "spatial_merge_size"):
        assert getattr(cfg.vision_config, key) == real["vision_config"][key]
    # the real tokenizer, loaded from the checkpoint, names the real ids
    tok = adapter.tokenizer
    assert tok.convert_tokens_to_ids(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]) == [
        real["vision_start_token_id"], real["vision_end_token_id"], real["image_token_id"], real["video_token_id"]]
    assert tok.convert_tokens_to_ids("<|im_end|>") == real_text["eos_token_id"]
    # M-RoPE sections scaled to half the head: one inverse frequency per rotated pair
    head_dim = adapter.kv_shape.head_dim
    rope = cfg.get_text_config().rope_parameters
    real_rope = real_text.get("rope_parameters") or real_text.get("rope_scaling")
    assert sum(rope["mrope_section"]) == head_dim // 2 == adapter.rope_inv_freq.shape[0]
    assert [s * sum(real_rope["mrope_section"]) for s in rope["mrope_section"]] == [
        s * head_dim // 2 for s in real_rope["mrope_section"]]
    assert adapter.frames_per_chunk_multiple == real["vision_config"]["temporal_patch_size"]


@pytest.mark.parametrize("dialogue", [(), DIALOGUE], ids=["question", "dialogue"])
def test_prompt_text_is_the_real_chat_template(fam, dialogue):
    adapter = fam.adapter
    rendered = fam.render(QUESTION, dialogue)
    prompt = adapter.prompt(QUESTION, dialogue)
    assert rendered.startswith(adapter.sink_text)
    assert rendered.endswith(prompt)
    video = rendered[len(adapter.sink_text):len(rendered) - len(prompt)]
    assert video == "<|vision_start|><|video_pad|><|vision_end|>"  # the template's own placeholder, nothing else


@pytest.mark.parametrize("t_start_s", [0.0, 10.0])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[1]}x{s[0]}")
def test_chunk_ids_are_the_real_processor_ids(fam, size, t_start_s):
    adapter, proc = fam.adapter, fam.processor
    video = frames(*size)
    chunk = adapter.chunk_inputs(video, FRAMES / FPS, t_start_s)
    ids = chunk.ids[0].tolist()

    # the whole conversation as the real processor prepares it = sink ids + the adapter's chunk ids + prompt ids
    rendered = fam.render(QUESTION)
    ref = proc(text=[rendered], videos=[np.stack(video)], **fam.video_kwargs(t_start_s))
    ref_ids = ref["input_ids"][0].tolist()
    sink = proc.tokenizer.encode(adapter.sink_text, add_special_tokens=False)
    prompt = proc.tokenizer.encode(adapter.prompt(QUESTION), add_special_tokens=False)
    assert ref_ids[:len(sink)] == sink and ref_ids[len(ref_ids) - len(prompt):] == prompt
    assert ids == ref_ids[len(sink):len(ref_ids) - len(prompt)]
    # the checkpoint's copy of the tokenizer tokenizes the text segments as the real one
    assert adapter.tokenizer.encode(adapter.sink_text, add_special_tokens=False) == sink
    assert adapter.tokenizer.encode(adapter.prompt(QUESTION), add_special_tokens=False) == prompt

    # the video alone: the same ids, grid and pixels
    alone = proc(text=[rendered[len(adapter.sink_text):len(rendered) - len(adapter.prompt(QUESTION))]],
                 videos=[np.stack(video)], **fam.video_kwargs(t_start_s))
    assert ids == alone["input_ids"][0].tolist()
    grid = ref["video_grid_thw"]
    merge = proc.video_processor.merge_size
    assert grid.tolist() == [[FRAMES // adapter.frames_per_chunk_multiple, *grid[0, 1:].tolist()]]
    assert torch.equal(chunk.vision["video_grid_thw"].cpu(), grid)
    assert ids.count(fam.token_id("video_token_id")) == math.prod(grid[0].tolist()) // merge**2
    assert int(chunk.video_mask.sum()) == ids.count(fam.token_id("video_token_id"))
    assert chunk.grid == (int(grid[0, 0]), int(grid[0, 1]) // merge, int(grid[0, 2]) // merge)
    assert torch.allclose(chunk.vision["pixel_values_videos"].float().cpu(), ref["pixel_values_videos"].float())
    if t_start_s == 0:  # tokens_per_chunk counts a chunk at time 0 (Qwen3-VL's later timestamps can be longer)
        assert adapter.tokens_per_chunk(*size, FRAMES) == len(ids)
    if fam.name == "qwen3_vl":  # one timestamp per temporal patch: the mean time of its frames
        assert f"<{t_start_s + 0.5 / FPS:.1f} seconds>" in proc.tokenizer.decode(ids)


def test_shrunk_model_encodes_a_chunk_of_real_tokens(fam):
    """The vision tower's features fill exactly the video-pad tokens the adapter wrote (the model checks)."""
    adapter = fam.adapter
    sinks = adapter.encode_text(adapter.sink_text, None)
    past = Context(sinks.keys, sinks.values, sinks.pos_span)
    enc = adapter.encode_chunk(frames(*SIZES[1]), past, FRAMES / FPS, t_start_s=0.0)
    assert enc.n_tokens == adapter.tokens_per_chunk(*SIZES[1], FRAMES)
    assert enc.vector is not None and np.isfinite(enc.vector).all()


# ---- SmolVLM2 (SmolVLM2-500M-Video-Instruct's processor, tokenizer and chat template) ---------------------------
SMOL = "smolvlm2"
SMOL_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16}


def shrunk_smolvlm(out: Path) -> Path:
    """The real SmolVLM2 config with a small text model and vision tower (image size, patch size, scale factor,
    token ids and vocabulary kept), random weights, and a copy of the real processor files."""
    real = AutoConfig.from_pretrained(REAL_HUB / SMOL)
    d = real.to_dict()
    d["text_config"].update(SMOL_TEXT)
    d["text_config"].pop("layer_types", None)
    d["vision_config"].update(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    for key in ("_name_or_path", "transformers_version"):
        d.pop(key, None)
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(type(real).from_dict(d), dtype=torch.float32)
    model.save_pretrained(out)
    for src in (REAL_HUB / SMOL).iterdir():
        if src.is_file() and src.name not in MODEL_FILES:
            (out / src.name).write_bytes(src.read_bytes())
    return out


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    """(adapter on the shrunk checkpoint, the real processor, the real config)."""
    if not (REAL_HUB / SMOL).is_dir():
        if os.environ.get("STREAMVID_REQUIRE_REAL_HUB") == "1":
            raise RuntimeError(f"STREAMVID_REQUIRE_REAL_HUB=1 but {REAL_HUB / SMOL} is absent")
        pytest.skip(f"{REAL_HUB / SMOL} not found")
    adapter = load_adapter(str(shrunk_smolvlm(tmp_path_factory.mktemp("real-hub-smolvlm2") / "m")))
    real_config = json.loads((REAL_HUB / SMOL / "config.json").read_text())
    return adapter, AutoProcessor.from_pretrained(REAL_HUB / SMOL), real_config


def smol_render(processor, question: str, dialogue=()) -> str:
    turns = [*[t for pair in dialogue for t in pair], question]
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": turns[0]}]}]
    for i, text in enumerate(turns[1:]):
        messages.append({"role": "assistant" if i % 2 == 0 else "user", "content": text})
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def test_smolvlm2_shrunk_checkpoint_keeps_the_real_ids_and_tokens_per_frame(smol):
    adapter, processor, real = smol
    assert type(adapter).__name__ == "SmolVLMAdapter"
    assert adapter.model.config.image_token_id == real["image_token_id"] == adapter.video_pad_id
    assert adapter.tokenizer.convert_tokens_to_ids("<image>") == real["image_token_id"]
    assert adapter.tokenizer.eos_token_id == adapter.tokenizer.convert_tokens_to_ids("<end_of_utterance>") == 49279
    assert adapter.model.config.get_text_config().vocab_size == real["text_config"]["vocab_size"]
    # 512 / 16 = 32 x 32 patches, pixel-shuffled by 4: 8 x 8 = 64 tokens per frame, as the real processor writes
    assert processor.image_seq_len == 64 == adapter.side ** 2
    assert adapter.tokens_per_chunk(360, 640, 2) == 2 * adapter.tokens_per_chunk(360, 640, 1)  # no per-chunk text
    assert adapter.stop_ids == {49279}


@pytest.mark.parametrize("dialogue", [(), DIALOGUE], ids=["question", "dialogue"])
def test_smolvlm2_prompt_text_is_the_real_chat_template(smol, dialogue):
    """The processor renders a video turn with its own video template (`<video>` where the video goes); the
    adapter's prompt starts with the outtro the processor writes after the frames (`\\n\\n`), then the template's
    text after the video."""
    adapter, processor, _ = smol
    rendered = smol_render(processor, QUESTION, dialogue)
    assert rendered.startswith("<|im_start|>System: " + SYSTEM_PROMPT)
    assert adapter.sink_text.endswith("User: ") and adapter.video_text == "<video>"
    prompt = adapter.prompt(QUESTION, dialogue)
    assert prompt.startswith("\n\n")
    assert rendered == adapter.sink_text + adapter.video_text + prompt[2:]
    assert rendered.endswith(f"{QUESTION}<end_of_utterance>\nAssistant:")


@pytest.mark.parametrize("t_start_s", [0.0, 10.0, 75.0])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[1]}x{s[0]}")
def test_smolvlm2_chunk_ids_are_the_real_processor_ids(smol, size, t_start_s):
    """The real processor's ids for the whole conversation with the frames as one video at their times are: the
    sink's ids, the processor's intro sentence (its frame count and length, which a stream does not have: the
    adapter leaves it out), the adapter's chunk ids, the prompt's ids (outtro first)."""
    adapter, processor, _ = smol
    video = frames(*size)
    chunk = adapter.chunk_inputs(video, FRAMES / FPS, t_start_s)
    ids = chunk.ids[0].tolist()
    first = round(t_start_s * FPS)
    meta = {"fps": FPS, "frames_indices": list(range(first, first + FRAMES)), "total_num_frames": first + FRAMES}
    ref = processor(text=[smol_render(processor, QUESTION)], videos=[np.stack(video)], video_metadata=[meta],
                    do_sample_frames=False, return_tensors="pt")
    ref_ids = ref["input_ids"][0].tolist()
    tok = processor.tokenizer
    sink = tok.encode(adapter.sink_text, add_special_tokens=False)
    prompt = tok.encode(adapter.prompt(QUESTION), add_special_tokens=False)
    # the sink ends with the template's space after `User:`; the processor's intro word takes it (`ĠYou`), the
    # adapter's first frame (a newline) does not
    assert tok.decode(sink[-1:]) == " " and ref_ids[:len(sink) - 1] == sink[:-1]
    assert ref_ids[len(ref_ids) - len(prompt):] == prompt
    middle = ref_ids[len(sink) - 1:len(ref_ids) - len(prompt)]
    assert middle[len(middle) - len(ids):] == ids
    intro = tok.decode(middle[:len(middle) - len(ids)])
    assert intro.startswith(" You are provided the following series of two frames from a ") and intro.endswith("\n")
    # the conversation as the adapter lays it out, tokenized at once by the real tokenizer: the same ids
    whole = adapter.sink_text + tok.decode(ids) + adapter.prompt(QUESTION)
    assert tok.encode(whole, add_special_tokens=False) == sink + ids + prompt
    # each frame: its time as MM:SS, then 64 image tokens between the processor's wrappers
    text = tok.decode(ids)
    stamp = f"{int(t_start_s // 60):02d}:{int(t_start_s % 60):02d}"
    assert text.startswith(f"\nFrame from {stamp}:<fake_token_around_image><global-img><image>")
    assert ids.count(processor.image_token_id) == FRAMES * 64 == int(chunk.video_mask.sum())
    assert chunk.grid == (FRAMES, 8, 8)
    assert torch.allclose(chunk.vision["pixel_values"].float().cpu(), ref["pixel_values"].float())
    assert torch.equal(chunk.vision["pixel_attention_mask"].cpu().long(), ref["pixel_attention_mask"].long())
    # the checkpoint's copy of the tokenizer tokenizes the segments as the real one
    assert adapter.tokenizer.encode(adapter.sink_text, add_special_tokens=False) == sink
    assert adapter.tokenizer.encode(adapter.prompt(QUESTION), add_special_tokens=False) == prompt


def test_smolvlm2_shrunk_model_encodes_a_chunk_of_real_tokens(smol):
    adapter, _, _ = smol
    sinks = adapter.encode_text(adapter.sink_text, None)
    past = Context(sinks.keys, sinks.values, sinks.pos_span)
    enc = adapter.encode_chunk(frames(*SIZES[1]), past, FRAMES / FPS, t_start_s=0.0)
    assert enc.n_tokens == adapter.tokens_per_chunk(*SIZES[1], FRAMES)
    assert enc.vector is not None and np.isfinite(enc.vector).all()
