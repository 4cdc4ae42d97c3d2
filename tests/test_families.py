"""Every supported family, end to end on a small random checkpoint from `make_tiny` (no download):
the registry picks its adapter (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, LLaVA-OneVision, LLaVA-NeXT-Video, SmolVLM2,
InternVL3.5); chunk-by-chunk encoding equals one forward over the same tokens with the model's
own positions; a moved block equals a fresh encoding at the new positions; the engine's greedy answer equals HF
`generate` token for token (float32 and bfloat16), and on a window with evicted blocks and retrieved memory it
equals HF's own forward and greedy loop over the same tokens at the same positions (one-layer checkpoints, K/V and
logits too); retrieval brings a planted block's KV into the context;
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
from conftest import hf_greedy_tokens, random_frames

from streamvid.adapters.base import adapter_class, load_adapter
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.kv.positions import concat
from streamvid.kv.window import Block
from streamvid.language.asked import Question
from streamvid.types import Context, Frame

ARCHS = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "llava-onevision", "llava-next-video", "smolvlm2", "internvl3.5")
ADAPTER_CLASS = {"qwen2-vl": "QwenVLAdapter", "qwen2.5-vl": "QwenVLAdapter", "qwen3-vl": "Qwen3VLAdapter",
                 "llava-onevision": "LlavaOnevisionAdapter", "llava-next-video": "LlavaNextVideoAdapter",
                 "smolvlm2": "SmolVLMAdapter", "internvl3.5": "InternVLAdapter"}
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
    return _sequence_inputs(adapter, parts, prompt)


def _sequence_inputs(adapter, parts, prompt: str) -> dict:
    """The sinks, the chunks `parts` (ChunkInputs, in this order) and `prompt` as one sequence with their vision
    inputs, as HF's processor hands them to the model."""
    ids = torch.cat([adapter.token_ids(adapter.sink_text), *[p.ids for p in parts], adapter.token_ids(prompt)], dim=1)
    inputs = {"input_ids": ids.to(adapter.device), "attention_mask": torch.ones_like(ids).to(adapter.device)}
    if adapter.position_axes == 3:
        inputs["pixel_values_videos"] = torch.cat([p.vision["pixel_values_videos"] for p in parts])
        inputs["video_grid_thw"] = torch.cat([p.vision["video_grid_thw"] for p in parts])
        inputs["mm_token_type_ids"] = ((ids == adapter.video_pad_id).int() * 2).to(adapter.device)
        if adapter.model.config.model_type == "qwen2_5_vl":  # seconds per temporal patch (Qwen2.5-VL only)
            inputs["second_per_grid_ts"] = torch.tensor([adapter.frames_per_chunk_multiple / FPS] * len(parts))
    else:  # LLaVA: pixel_values_videos; SmolVLM: pixel_values (+ pixel_attention_mask); InternVL: pixel_values
        for name in parts[0].vision:
            inputs[name] = torch.cat([p.vision[name] for p in parts])
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
                 "LlavaNextVideoForConditionalGeneration", "SmolVLMForConditionalGeneration",
                 "InternVLForConditionalGeneration"):
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


@pytest.mark.parametrize("t_start_s", [0.0, 75.0])
def test_smolvlm2_chunk_is_the_processors_frames_at_their_stream_times(t_start_s, family_adapters, family_dirs):
    """A SmolVLM2 chunk's ids: the processor's ids for the same frames as frames of a clip at FPS, from the first
    frame's text to the last frame's end (its intro sentence before, its outtro after, left out)."""
    adapter = _adapter(family_adapters, family_dirs, "smolvlm2")
    frames = random_frames(2, seed=3)
    first = round(t_start_s * FPS)
    meta = {"fps": FPS, "frames_indices": [first, first + 1], "total_num_frames": first + 2}
    hf = adapter.processor(text="<video>", videos=[np.stack(frames)], video_metadata=[meta], do_sample_frames=False,
                           add_special_tokens=False, return_tensors="pt")["input_ids"][0].tolist()
    chunk = adapter.chunk_inputs(frames, len(frames) / FPS, t_start_s)
    ids = chunk.ids[0].tolist()
    at = next(i for i in range(len(hf)) if hf[i:i + len(ids)] == ids)
    assert adapter.tokenizer.decode(hf[:at]).startswith("You are provided the following series of two frames")
    assert adapter.tokenizer.decode(hf[at + len(ids):]) == "\n\n"
    stamp = f"{int(t_start_s // 60):02d}:{int(t_start_s % 60):02d}"
    assert adapter.tokenizer.decode(ids).startswith(f"\nFrame from {stamp}:<fake_token_around_image>")
    assert int(chunk.video_mask.sum()) == 2 * adapter.processor.image_seq_len


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
        self.decodings: list = []  # the scheduler's decodings (their .tokens: the ids it generated)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def generate(self, context, prompt, max_new_tokens, stop=None):
        self.calls.append((context, prompt))
        return self._real.generate(context, prompt, max_new_tokens, stop)

    def start_decoding(self, context, prompt, max_new_tokens):
        """The scheduler's way in: its answers are decoded batched (`decode`) from these."""
        decoding = self._real.start_decoding(context, prompt, max_new_tokens)
        self.calls.append((context, prompt))
        self.decodings.append(decoding)
        return decoding


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
    assert engine == hf_greedy_tokens(adapter, _reference_inputs(adapter, chunks, adapter.prompt(question)))


@pytest.fixture(scope="session")
def one_layer_adapters(tmp_path_factory):
    """float32 adapters of one-decoder-layer checkpoints from `make_tiny`, built on first use per family."""
    from streamvid.checkpoints.families import make_tiny

    root, made = tmp_path_factory.mktemp("families-1-layer"), {}

    def get(arch: str):
        if arch not in made:
            made[arch] = load_adapter(str(make_tiny(arch, root / arch, seed=0, layers=1)), dtype="float32")
        return made[arch]

    return get


def _hf_positions(adapter, inputs: dict) -> torch.Tensor:
    """HF's own position ids of `inputs` from 0: the model's get_rope_index (M-RoPE), or 0..L-1 (1-D RoPE)."""
    ids = inputs["input_ids"]
    if adapter.position_axes == 1:
        return torch.arange(ids.shape[1]).view(1, -1)
    extra = {"second_per_grid_ts": inputs["second_per_grid_ts"]} if "second_per_grid_ts" in inputs else {}
    with torch.inference_mode():
        return adapter.model.model.get_rope_index(ids, inputs["mm_token_type_ids"],
                                                  video_grid_thw=inputs["video_grid_thw"],
                                                  attention_mask=inputs["attention_mask"], **extra)[0]


def _hf_greedy(adapter, inputs: dict, positions: torch.Tensor, n_ctx: int, max_new_tokens: int):
    """HF's own forward from an empty cache over the whole sequence at `positions`, then its greedy loop one token
    at a time (text positions after the last); the generated ids up to a stop token, the K/V of the first `n_ctx`
    tokens and the logits of the first generated token."""
    model, tokens = adapter.model, []
    with torch.inference_mode():
        out = model(**inputs, position_ids=positions.to(adapter.device), use_cache=True)
        kv = [(layer.keys[:, :, :n_ctx].clone(), layer.values[:, :, :n_ctx].clone()) for layer in out.cache.layers]
        first_logits = out.logits[0, -1].clone()
        pos = int(positions.max()) + 1
        for _ in range(max_new_tokens):
            token = int(out.logits[0, -1].argmax())
            if token in adapter.stop_ids:
                break
            tokens.append(token)
            step = torch.tensor([[pos]])
            step = step.view(1, 1, 1).expand(3, 1, 1) if adapter.position_axes == 3 else step
            out = model(input_ids=torch.tensor([[token]], device=adapter.device), position_ids=step.to(adapter.device),
                        cache=out.cache, use_cache=True)
            pos += 1
    return tokens, kv, first_logits


def test_engine_answer_with_evicted_and_retrieved_blocks_equals_hf_forward(arch, one_layer_adapters):
    """The scheduler's answer on a window that has evicted blocks, with two memory blocks retrieved (the context:
    sinks + retrieved blocks + window), token for token equal to HF's own forward and greedy loop from an empty
    cache over the same tokens and vision inputs as one sequence: the sinks, the retrieved chunks in time order,
    the window's chunks and the prompt, at contiguous positions that end where the window stays (HF's own
    positions for that sequence, shifted so the window's first token sits where the engine encoded it). The
    retrieved blocks and the sinks were moved there by rotating their cached keys; the reference computes them
    afresh at those positions. The context's K/V must equal the reference's too.

    One decoder layer: a token's K/V at the first layer depend on its token and position only, so the cached K/V
    of blocks encoded earlier on other contexts equal a fresh forward over this context's tokens. (From the second
    layer on, a window block's K/V hold what it attended to when it was encoded, including blocks evicted since;
    no single forward over the context reproduces that, by design.) Memory stores blocks as they were ("float") so
    the comparison is exact to float32 rounding."""
    adapter = one_layer_adapters(arch)
    spy = Spy(adapter)
    k = max(2, adapter.frames_per_chunk_multiple)
    chunks = _chunks(adapter, 6)
    per_chunk = adapter.chunk_inputs(chunks[-1], k / FPS, 5 * k / FPS).ids.shape[1]
    cfg = EngineConfig.from_settings(model="unused", fps=FPS, frames_per_chunk=k, window_tokens=2 * per_chunk + 2,
                                     memory_top_k=2, memory_kv="float", max_new_tokens=12, dialogue_turns=0)
    sa = StreamingAssistant(cfg, adapter=spy)
    sa.feed(Frame(img, i / FPS, i) for i, img in enumerate(f for frames in chunks for f in frames))
    window = sa.window.snapshot().blocks
    assert [b.id for b in window] == [4, 5] and len(sa.memory) == 4  # blocks 0-3 evicted to memory
    question = "What colour was the star?"  # past tense: memory is searched
    for planted in (0, 2):  # these two match the question best: neither is next to the window nor to the other
        sa.memory.reindex(planted, sa.embedder.question_vector(question))
    sa.ask(question)
    sa.engine.run_until_idle()
    answer = next(o for o in sa.outputs(timeout_s=0.1) if o.kind == "answer")
    assert answer.retrieved_blocks == [0, 2]
    assert answer.evidence_t_s == [[0.0, k / FPS], [2 * k / FPS, 3 * k / FPS], [4 * k / FPS, 6 * k / FPS]]
    (context, prompt), decoding = spy.calls[-1], spy.decodings[-1]
    assert prompt == adapter.prompt(question)

    # the reference: the tokens and vision inputs of sinks, chunks 0, 2, 4, 5 and the prompt, as one sequence
    used = [0, 2, 4, 5]
    parts = [adapter.chunk_inputs(chunks[i], k / FPS, i * k / FPS) for i in used]
    inputs = _sequence_inputs(adapter, parts, prompt)
    n_sinks = adapter.token_ids(adapter.sink_text).shape[1]
    first_window_token = n_sinks + sum(p.ids.shape[1] for p in parts[:2])
    n_ctx = first_window_token + sum(p.ids.shape[1] for p in parts[2:])
    assert context.n_tokens == n_ctx
    hf = _hf_positions(adapter, inputs)
    shift = window[0].pos_start - int(hf[..., first_window_token].min())  # the window stays where it was encoded
    assert shift > 0  # the sinks and the retrieved blocks were moved forward, to just before the window
    positions = hf + shift
    assert context.next_pos == int(positions[..., n_ctx].min())  # the prompt starts right after the window
    ref, kv, ref_logits = _hf_greedy(adapter, inputs, positions, n_ctx, 12)
    assert len(ref) >= 3, "the random model stops at once: the comparison would say nothing"

    for (ref_k, ref_v), keys, values in zip(kv, context.keys, context.values, strict=True):
        assert torch.allclose(keys, ref_k, atol=TOL * max(1.0, float(ref_k.abs().max())))
        assert torch.allclose(values, ref_v, atol=TOL)
    assert decoding.tokens == ref  # the ids the scheduler generated for this answer
    assert answer.tokens == len(ref)
    # a random model's tokens and logits barely depend on the context: a retrieved block one position off, or not
    # rotated at all, leaves its greedy tokens as they were and moves its logits by 5e-6 to 1e-3 (under TOL for most
    # families); the K/V above move by 0.3 to 5, which is what catches it
    q_ids = adapter.token_ids(prompt)
    with torch.inference_mode():
        logits = adapter.forward(q_ids, adapter.text_positions(context.next_pos, q_ids.shape[1]), context)[0][0, -1]
    assert torch.allclose(logits, ref_logits, atol=TOL)


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


@pytest.mark.parametrize("arch", [*ARCHS, "qwen3.5"])  # Qwen3.5's blocks go to memory with attention K/V only
def test_make_tiny_and_run_work_from_the_command_line(arch, tmp_path, capsys):
    from test_cli import world_mp4

    from streamvid.cli.main import main

    assert main(["make-tiny", "--arch", arch, "--out", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    assert main(["run", str(world_mp4()), "--model", str(tmp_path / "m"), "--fps", "1", "--max-new-tokens", "4",
                 "--window-tokens", "20", "--frame-px", "56", "--ask", "5:What do you see?"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [x["type"] for x in lines] == ["answer", "stats"]
    assert lines[0]["question"] == "What do you see?" and lines[0]["t_s"] == 5.0
    assert lines[1]["blocks_in_memory"] > 0
