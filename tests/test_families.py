"""Every supported family, end to end on a small random checkpoint from `make_tiny` (no download):
the registry picks its adapter; chunk-by-chunk encoding equals one forward over the same tokens with the model's
own positions; a moved block equals a fresh encoding at the new positions; the engine's greedy answer equals HF
`generate` token for token (float32 and bfloat16); retrieval brings a planted block's KV into the context;
`streamvid make-tiny` + `streamvid run` work.

Tolerances: 1e-4 absolute on keys, values and logits in float32 (measured differences are ~1e-6); keys moved by
4000 positions within 1e-4 of the largest key (float32 angles there: Qwen3-VL's normalised keys, |k| ~ 3, differ
by ~1.3e-4, the others by ~2e-5).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import random_frames

from streamvid.adapters.base import adapter_class, load_adapter
from streamvid.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.kv_window import Block
from streamvid.positions import concat
from streamvid.types import Context, Frame, Question

ARCHS = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "llava-onevision", "llava-next-video")
ADAPTER_CLASS = {"qwen2-vl": "QwenVLAdapter", "qwen2.5-vl": "QwenVLAdapter", "qwen3-vl": "Qwen3VLAdapter",
                 "llava-onevision": "LlavaOnevisionAdapter", "llava-next-video": "LlavaNextVideoAdapter"}
TOL = 1e-4
FPS = 2.0


@pytest.fixture(scope="session")
def family_dirs(tmp_path_factory):
    from streamvid.checkpoints.families import make_tiny

    root = tmp_path_factory.mktemp("families")
    return {arch: make_tiny(arch, root / arch, seed=0) for arch in ARCHS}


@pytest.fixture(scope="session")
def family_adapters(family_dirs):
    return {}


def _adapter(family_adapters, family_dirs, arch: str, dtype: str = "float32"):
    if (arch, dtype) not in family_adapters:
        family_adapters[arch, dtype] = load_adapter(str(family_dirs[arch]), dtype=dtype)
    return family_adapters[arch, dtype]


@pytest.fixture(params=ARCHS)
def arch(request):
    return request.param


@pytest.fixture
def fam(arch, family_adapters, family_dirs):
    return _adapter(family_adapters, family_dirs, arch)


def _chunks(adapter, n: int) -> list[list[np.ndarray]]:
    k = max(2, adapter.frames_per_chunk_multiple)
    return [random_frames(k, seed=10 + i) for i in range(n)]


def _encode(adapter, chunks, offset: int = 0) -> list[Block]:
    """Sinks then each chunk on the cache so far, all starting at position `offset`; chunk i starts at i s."""
    sinks = adapter.encode_text(adapter.sink_text, Context((), (), offset))
    blocks = [Block(-1, 0, 0, sinks.keys, sinks.values, offset, sinks.pos_span)]
    for i, frames in enumerate(chunks):
        past = concat(blocks, blocks[-1].pos_start + blocks[-1].pos_span)
        enc = adapter.encode_chunk(frames, past, len(frames) / FPS, t_start_s=i * len(frames) / FPS)
        blocks.append(Block(i, i, i + 1, enc.keys, enc.values, past.next_pos, enc.pos_span, enc.vector))
    return blocks


def _reference_inputs(adapter, chunks, prompt: str) -> dict:
    """The same tokens and vision inputs as one sequence, for one HF forward / `generate` that computes its own
    positions (no position_ids: get_rope_index over the whole sequence, or 0..L-1 for 1-D RoPE)."""
    parts = [adapter.chunk_inputs(f, len(f) / FPS, i * len(f) / FPS) for i, f in enumerate(chunks)]
    ids = torch.cat([adapter.token_ids(adapter.sink_text), *[p.ids for p in parts], adapter.token_ids(prompt)], dim=1)
    inputs = {"input_ids": ids.to(adapter.device), "attention_mask": torch.ones_like(ids).to(adapter.device)}
    if adapter.position_axes == 3:
        inputs["pixel_values_videos"] = torch.cat([p.vision["pixel_values_videos"] for p in parts])
        inputs["video_grid_thw"] = torch.cat([p.vision["video_grid_thw"] for p in parts])
        inputs["mm_token_type_ids"] = ((ids == adapter.video_pad_id).int() * 2).to(adapter.device)
        if adapter.model.config.model_type == "qwen2_5_vl":  # seconds per temporal patch (Qwen2.5-VL only)
            inputs["second_per_grid_ts"] = torch.tensor([adapter.frames_per_chunk_multiple / FPS] * len(parts))
    else:
        inputs["pixel_values_videos"] = torch.cat([p.vision["pixel_values_videos"] for p in parts])
    return inputs


def test_registry_picks_the_family_adapter(arch, fam, family_dirs):
    assert type(fam).__name__ == ADAPTER_CLASS[arch]
    config = json.loads((family_dirs[arch] / "config.json").read_text())
    assert adapter_class(config) is type(fam)
    # by architecture when the model_type is not one the registry knows
    assert adapter_class({"model_type": "renamed", "architectures": config["architectures"]}) is type(fam)


def test_unsupported_architecture_is_one_line_listing_the_supported(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ValueError) as e:
        load_adapter(str(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg and "'gpt2'" in msg
    for name in ("Qwen2_5_VLForConditionalGeneration", "Qwen2VLForConditionalGeneration",
                 "Qwen3VLForConditionalGeneration", "LlavaOnevisionForConditionalGeneration",
                 "LlavaNextVideoForConditionalGeneration"):
        assert name in msg
    with pytest.raises(ValueError, match="cannot load model"):
        load_adapter(str(tmp_path / "missing"))


def test_segments_tokenize_as_the_whole_conversation(fam):
    """The ids the engine feeds segment by segment (sinks, chunks, question) are the tokenizer's ids for the whole
    conversation text at once: no token appears or merges differently at a segment boundary."""
    chunks = _chunks(fam, 2)
    parts = [fam.chunk_inputs(f, len(f) / FPS, i * len(f) / FPS) for i, f in enumerate(chunks)]
    prompt = fam.prompt("Is there a red circle?", [("What do you see?", "a red circle")])
    ids = torch.cat([fam.token_ids(fam.sink_text), *[p.ids for p in parts], fam.token_ids(prompt)], dim=1)[0].tolist()
    text = fam.sink_text + "".join(fam.tokenizer.decode(p.ids[0]) for p in parts) + prompt
    assert ids == fam.tokenizer(text)["input_ids"]


@pytest.mark.parametrize("t_start_s", [0.0, 10.0])
def test_qwen3_vl_chunk_carries_the_timestamps_the_processor_writes(t_start_s, family_adapters, family_dirs):
    adapter = _adapter(family_adapters, family_dirs, "qwen3-vl")
    frames = random_frames(4, seed=3)
    first = round(t_start_s * FPS)  # the same frames as frames first..first+3 of a clip at FPS
    meta = {"fps": FPS, "frames_indices": list(range(first, first + 4)), "total_num_frames": first + 4}
    hf = adapter.processor(text="<|vision_start|><|video_pad|><|vision_end|>", videos=[np.stack(frames)],
                           video_metadata=[meta], do_sample_frames=False, return_tensors="pt")
    chunk = adapter.chunk_inputs(frames, len(frames) / FPS, t_start_s)
    assert chunk.ids.tolist() == hf["input_ids"].tolist()
    assert f"<{t_start_s + 0.25:.1f} seconds>" in adapter.tokenizer.decode(chunk.ids[0])


def test_chunk_by_chunk_encoding_equals_one_forward(fam):
    chunks = _chunks(fam, 2)
    prompt = fam.prompt("How many shapes are there?")
    blocks = _encode(fam, chunks)
    ctx = concat(blocks, blocks[-1].pos_start + blocks[-1].pos_span)
    q_ids = fam.token_ids(prompt)
    inc_logits = fam.forward(q_ids, fam.text_positions(ctx.next_pos, q_ids.shape[1]), ctx)[0][0, -1]

    inputs = _reference_inputs(fam, chunks, prompt)
    with torch.inference_mode():
        out = fam.model(**inputs, use_cache=True)
    n_ctx = ctx.n_tokens
    assert inputs["input_ids"].shape[1] == n_ctx + q_ids.shape[1]
    for layer, (k, v) in enumerate(zip(ctx.keys, ctx.values)):
        assert torch.allclose(out.cache.layers[layer].keys[:, :, :n_ctx], k, atol=TOL)
        assert torch.allclose(out.cache.layers[layer].values[:, :, :n_ctx], v, atol=TOL)
    assert torch.allclose(out.logits[0, -1], inc_logits, atol=TOL)


def test_moved_block_equals_fresh_encoding(fam):
    chunks = _chunks(fam, 3)
    fresh = _encode(fam, chunks, offset=0)
    far = _encode(fam, chunks, offset=4000)  # same content, every position + 4000
    moved = [fam.positions.move(b, b.pos_start - 4000) for b in far]
    for a, b in zip(fresh, moved):
        assert a.pos_start == b.pos_start
        for ka, kb in zip(a.keys, b.keys):  # float32 angles at position 4000: error grows with the key's size
            assert torch.allclose(ka, kb, atol=TOL * max(1.0, float(ka.abs().max())))
    q_ids = fam.token_ids(fam.prompt("What colour is the circle?"))
    logits = []
    for blocks in (fresh, moved):
        ctx = concat(blocks, blocks[-1].pos_start + blocks[-1].pos_span)
        logits.append(fam.forward(q_ids, fam.text_positions(ctx.next_pos, q_ids.shape[1]), ctx)[0][0, -1])
    assert torch.allclose(*logits, atol=TOL)


class Spy:
    """The real adapter, recording the context and prompt of each answer the engine generates."""

    def __init__(self, real):
        self._real = real
        self.calls: list[tuple[Context, str]] = []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def generate(self, context, prompt, max_new_tokens, stop=None):
        self.calls.append((context, prompt))
        return self._real.generate(context, prompt, max_new_tokens, stop)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_engine_answer_equals_generate(arch, dtype, family_adapters, family_dirs):
    adapter = _adapter(family_adapters, family_dirs, arch, dtype)
    spy = Spy(adapter)
    k = max(2, adapter.frames_per_chunk_multiple)
    cfg = EngineConfig.from_settings(model="unused", fps=FPS, frames_per_chunk=k, window_tokens=100_000, memory_top_k=0,
                       max_new_tokens=12, dialogue_turns=0)
    sa = StreamingAssistant(cfg, adapter=spy)
    chunks = _chunks(adapter, 2)
    sa.feed(Frame(img, i / FPS, i) for i, img in enumerate(f for frames in chunks for f in frames))
    question = "What do you see?"
    answer = sa.reasoning.answer(Question("q0", question, len(chunks) * k / FPS))
    # the engine's tokens: the same greedy loop on the very context and prompt the engine answered from
    context, prompt = spy.calls[-1]
    engine = list(adapter.generate_ids(context, prompt, 12))
    assert answer.data["tokens"] == len(engine)
    assert answer.text == "".join(adapter.generate(context, prompt, 12)).strip()

    # the reference: HF generate over the same frames and prompt as one sequence, positions its own
    inputs = _reference_inputs(adapter, chunks, adapter.prompt(question))
    stops = sorted(adapter.stop_ids)
    with torch.inference_mode():
        out = adapter.model.generate(**inputs, max_new_tokens=12, do_sample=False, eos_token_id=stops,
                                     pad_token_id=adapter.tokenizer.pad_token_id)
    ref = []
    for token in out[0, inputs["input_ids"].shape[1]:].tolist():
        if token in adapter.stop_ids:
            break
        ref.append(token)
    assert len(ref) >= 3, "the random model stops at once: the comparison would say nothing"
    assert engine == ref


def test_batched_probes_equal_single_probes(fam):
    blocks = _encode(fam, _chunks(fam, 2))
    ctx = concat(blocks, blocks[-1].pos_start + blocks[-1].pos_span)
    questions = ["Is there a red circle?", "Is there a blue star now? Answer yes or no.", "Yes?"]
    batched = fam.probe_many(ctx, questions)
    single = [fam.probe(ctx, q) for q in questions]
    # a random model's p(yes) differ by ~1e-5 between these questions; batched and single agree to ~1e-7
    assert np.allclose(batched, single, rtol=0, atol=1e-6)


def _contains(context: Context, block: Block) -> int | None:
    """Where the block's values (position-free) sit as a contiguous run in the context, or None."""
    ctx, v = context.values[0], block.values[0]
    n = v.shape[2]
    return next((s for s in range(ctx.shape[2] - n + 1) if torch.equal(ctx[:, :, s:s + n], v)), None)


def test_retrieval_brings_a_planted_block_into_the_context(fam):
    spy = Spy(fam)
    k = max(2, fam.frames_per_chunk_multiple)
    cfg = EngineConfig.from_settings(model="unused", fps=FPS, frames_per_chunk=k, window_tokens=1, memory_top_k=1,
                       max_new_tokens=2)
    sa = StreamingAssistant(cfg, adapter=spy)  # a window of one block: the others go to memory
    sa.feed(Frame(random_frames(1, seed=200 + i)[0], i / FPS, i) for i in range(6 * k))
    assert len(sa.memory) >= 4
    question = "What colour was the star?"
    planted = sa.memory.load(2)  # make block 2 the one whose vector matches the question exactly
    sa.memory.reindex(2, fam.question_vector(question))
    answer = sa.reasoning.answer(Question("q", question, 6 * k / FPS))
    assert answer.data["retrieved_blocks"] == [2]
    context = spy.calls[-1][0]
    at = _contains(context, planted)
    assert at == sa.window.snapshot().sinks.n_tokens  # right after the sinks, before the window
    window_span = sum(b.pos_span for b in sa.window.snapshot().blocks)  # contiguous, the window last
    placed = fam.positions.move(planted, context.next_pos - window_span - planted.pos_span)
    for layer, keys in enumerate(placed.keys):  # its KV, re-rotated to where it sits: just before the window
        assert torch.allclose(context.keys[layer][:, :, at:at + planted.n_tokens], keys, atol=TOL)


def test_make_tiny_and_run_work_from_the_command_line(arch, tmp_path, capsys):
    from test_cli import world_mp4

    from streamvid.cli import main

    assert main(["make-tiny", "--arch", arch, "--out", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    assert main(["run", str(world_mp4()), "--model", str(tmp_path / "m"), "--fps", "1", "--max-new-tokens", "4",
                 "--window-tokens", "20", "--frame-px", "56", "--ask", "5:What do you see?"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [x["type"] for x in lines] == ["answer", "stats"]
    assert lines[0]["question"] == "What do you see?" and lines[0]["t_s"] == 5.0
    assert lines[1]["blocks_in_memory"] > 0
