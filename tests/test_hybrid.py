"""Qwen3.5, the hybrid family (Gated DeltaNet linear-attention layers with a full-attention layer every fourth), on
a small random checkpoint from `make_tiny("qwen3.5")` (no download), checked against HF's own forward:

- the engine's state after chunks ingested one by one (the attention layer's K/V, every linear layer's convolution
  history and recurrent state), the logits of a question on it and the greedy answer equal HF's forward / generate
  over the same tokens in one pass from an empty cache, while nothing is evicted;
- an answer, a trigger probe and a look run on a copy of the recurrent state: the stream's own is unchanged
  (tensor for tensor) after them, and advances with the next chunk;
- a session snapshot saves and restores the recurrent state exactly;
- rows of several streams (chunk encodes, probes, decoding) give what each row gives alone;
- a block moved by partial RoPE (a quarter of each head rotary) equals a fresh encoding at the new positions.

Tolerances: 1e-4 absolute in float32 (measured differences ~1e-6).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import hf_greedy_tokens, random_frames

from streamvid.adapters.base import load_adapter
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.kv.positions import concat
from streamvid.kv.window import Block
from streamvid.language.asked import Question
from streamvid.types import Context, Frame

TOL = 1e-4
FPS = 2.0
K = 2  # frames per chunk: Qwen3.5's temporal patch
LAYERS = 6  # linear, linear, linear, full, linear, linear: a linear layer after the attention layer too


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from streamvid.checkpoints.families import make_tiny

    return make_tiny("qwen3.5", tmp_path_factory.mktemp("qwen3_5") / "m", seed=0, layers=LAYERS)


@pytest.fixture(scope="module")
def adapter(model_dir):
    return load_adapter(str(model_dir), dtype="float32")


def _chunks(n: int, seed: int = 10) -> list[list[np.ndarray]]:
    return [random_frames(K, seed=seed + i, px=64) for i in range(n)]


def _feed(sa: StreamingAssistant, chunks) -> None:
    sa.feed(Frame(img, i / FPS, i) for i, img in enumerate(f for frames in chunks for f in frames))


def _assistant(adapter, window_tokens: int = 100_000, model: str = "unused", **settings) -> StreamingAssistant:
    cfg = EngineConfig.from_settings(model=model, fps=FPS, frames_per_chunk=K, window_tokens=window_tokens,
                                     memory_top_k=0, max_new_tokens=12, dialogue_turns=0, **settings)
    return StreamingAssistant(cfg, adapter=adapter)


def _reference(adapter, chunks, prompt: str = "") -> dict:
    """The sinks, the chunks and `prompt` as one sequence with its vision inputs, as HF's processor hands them to
    the model (no position ids: HF computes its own over the whole sequence)."""
    parts = [adapter.chunk_inputs(f, len(f) / FPS, i * len(f) / FPS) for i, f in enumerate(chunks)]
    ids = torch.cat([adapter.token_ids(adapter.sink_text), *[p.ids for p in parts],
                     *([adapter.token_ids(prompt)] if prompt else [])], dim=1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "pixel_values_videos": torch.cat([p.vision["pixel_values_videos"] for p in parts]),
            "video_grid_thw": torch.cat([p.vision["video_grid_thw"] for p in parts]),
            "mm_token_type_ids": (ids == adapter.video_pad_id).int() * 2}


def _hf_forward(adapter, inputs: dict):
    from transformers import DynamicCache

    cache = DynamicCache(config=adapter.model.config)
    with torch.inference_mode():
        out = adapter.model(**inputs, cache=cache, use_cache=True)
    return out.logits[0, -1], cache


class Spy:
    """The real adapter, recording the context and prompt of each answer the scheduler decodes, and its decoding."""

    def __init__(self, real):
        self._real = real
        self.calls: list[tuple[Context, str]] = []
        self.decodings: list = []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def start_decoding(self, context, prompt, max_new_tokens):
        decoding = self._real.start_decoding(context, prompt, max_new_tokens)
        self.calls.append((context, prompt))
        self.decodings.append(decoding)
        return decoding


def _state_tensors(state) -> list[torch.Tensor]:
    return [t.clone() for t in (*state.conv, *state.recurrent)]


def test_make_tiny_qwen3_5_is_hybrid_and_loads_behind_its_adapter(model_dir, adapter):
    config = json.loads((model_dir / "config.json").read_text())
    kinds = config["text_config"]["layer_types"]
    assert config["model_type"] == "qwen3_5" and kinds.count("full_attention") == 1 and len(kinds) == LAYERS
    assert type(adapter).__name__ == "Qwen3_5Adapter"
    assert adapter.kv_layer_ids == [kinds.index("full_attention")] and adapter.kv_shape.layers == 1
    assert adapter.index_layer == kinds.index("full_attention")  # the attention layer nearest the middle
    assert adapter.tokenizer.encode("What colour is the circle?", add_special_tokens=False)  # not empty
    # the chat template's own text around the video: ChatML, an empty think block opening the answer
    assert adapter.sink_text.endswith("<|im_start|>user\n")
    assert adapter.prompt("Hi?") == "Hi?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_engine_state_after_chunks_equals_one_hf_forward(adapter):
    """Three chunks ingested one by one by the engine (nothing evicted): the window's attention K/V (sinks +
    blocks), each linear layer's conv and recurrent state, a question's logits and the greedy answer equal HF's
    forward and `generate` over the same tokens in one pass."""
    chunks = _chunks(3)
    spy = Spy(adapter)
    sa = _assistant(spy)
    _feed(sa, chunks)
    snap = sa.window.snapshot()
    assert len(snap.blocks) == 3 and snap.state is not None
    _, cache = _hf_forward(adapter, _reference(adapter, chunks))
    context = concat([snap.sinks, *snap.blocks], snap.next_pos, snap.state)
    kv = [cache.layers[i] for i in adapter.kv_layer_ids]
    assert len(context.keys) == len(kv) == 1
    for layer, k, v in zip(kv, context.keys, context.values, strict=True):
        assert k.shape == layer.keys.shape
        assert torch.allclose(k, layer.keys, atol=TOL) and torch.allclose(v, layer.values, atol=TOL)
    linear = [i for i, kind in enumerate(adapter.model.config.text_config.layer_types) if kind == "linear_attention"]
    assert list(snap.state.layers) == linear
    for i, conv, rec in zip(snap.state.layers, snap.state.conv, snap.state.recurrent, strict=True):
        assert torch.allclose(conv, cache.layers[i].conv_states[0], atol=TOL)
        assert torch.allclose(rec, cache.layers[i].recurrent_states[0], atol=TOL)
        assert rec.abs().max() > 1e-3  # a state that says something

    question = "What do you see?"
    prompt = adapter.prompt(question)
    ids = adapter.token_ids(prompt)
    with torch.inference_mode():
        logits = adapter.forward(ids, adapter.text_positions(context.next_pos, ids.shape[1]), context)[0][0, -1]
    ref_logits, _ = _hf_forward(adapter, _reference(adapter, chunks, prompt))
    assert torch.allclose(logits, ref_logits, atol=TOL)

    sa.ask(question)  # the scheduler's answer: its decoding's tokens are the engine's own
    sa.engine.run_until_idle()
    assert any(o.kind == "answer" for o in sa.outputs(timeout_s=0.1))
    answered, engine = spy.calls[-1], spy.decodings[-1].tokens
    assert answered[0].state is snap.state and answered[1] == prompt  # the stream's state, not a copy or the sinks'
    assert engine == hf_greedy_tokens(adapter, _reference(adapter, chunks, prompt))


def test_answers_and_probes_leave_the_stream_state_unchanged(adapter):
    """The scheduler's answer, a trigger probe and a direct probe run on copies of the recurrent state: the
    stream's state tensors are the same before and after, and the next chunk advances them."""
    sa = _assistant(adapter)
    _feed(sa, _chunks(2))
    state = sa.window.snapshot().state
    before = _state_tensors(state)
    sa.ask("What do you see?")
    sa.watch("a red circle appears")
    sa.engine.run_until_idle()
    assert any(o.kind == "answer" for o in sa.outputs(timeout_s=0.1))
    sa.reasoning.probe(Question("p", "Is there a red circle?", 2 * K / FPS))
    after = sa.window.snapshot().state
    assert after is state
    for a, b in zip(before, _state_tensors(after), strict=True):
        assert torch.equal(a, b)
    # the answer's context started from that state: decoding it again from the same context gives the same tokens
    # (a cache that had advanced the stream's own state would answer the second time from a different state)
    ctx = concat([sa.window.snapshot().sinks, *sa.window.snapshot().blocks], sa.window.snapshot().next_pos, state)
    prompt = adapter.prompt("What do you see?")
    assert list(adapter.generate_ids(ctx, prompt, 6)) == list(adapter.generate_ids(ctx, prompt, 6))
    for a, b in zip(before, _state_tensors(state), strict=True):
        assert torch.equal(a, b)
    _feed(sa, _chunks(1, seed=50))  # a third chunk (frames 0..1 again in time: the stream only needs new frames)
    assert not all(torch.equal(a, b) for a, b in zip(before, _state_tensors(sa.window.snapshot().state)))


def test_snapshot_round_trip_restores_the_recurrent_state(adapter, model_dir, tmp_path):
    sa = _assistant(adapter, model=str(model_dir))
    _feed(sa, _chunks(2))
    saved = _state_tensors(sa.window.snapshot().state)
    sa.save(tmp_path / "session")
    sa.stop()
    resumed = StreamingAssistant.resume(tmp_path / "session", config=sa.config, adapter=adapter)
    try:
        state = resumed.window.snapshot().state
        restored = _state_tensors(state)
        assert len(restored) == len(saved)
        for a, b in zip(saved, restored, strict=True):
            assert a.dtype == b.dtype and torch.equal(a, b.to(a.device))
        assert list(state.layers) == list(sa.window.snapshot().state.layers)
    finally:
        resumed.stop()


def _forwards(adapter) -> list:
    """A list that gets one item per decoder forward (a hook on the language model), and the hook's handle."""
    calls: list = []
    return calls, adapter.language_model.register_forward_pre_hook(lambda *_: calls.append(1))


def test_rows_of_several_streams_equal_each_row_alone(adapter):
    """Two streams' chunk encodes (contexts of different lengths, chunks of as many tokens: one forward; of
    different token counts: one forward each), probes and answers equal each row's own."""
    from streamvid.types import ChunkJob

    sinks = adapter.encode_text(adapter.sink_text, None)
    base = Block(-1, 0, 0, sinks.keys, sinks.values, 0, sinks.pos_span, state=sinks.state)
    first = adapter.encode_chunk(_chunks(1, seed=3)[0], concat([base], base.pos_span), 1.0)
    one = concat([base, Block(0, 0, 1, first.keys, first.values, base.pos_span, first.pos_span,
                              state=first.state)], base.pos_span + first.pos_span)
    pasts = [concat([base], base.pos_span), one]
    frames = _chunks(2, seed=7)
    for starts, forwards in (((0.0, 0.0), 1), ((0.0, 10.0), 2)):  # "<0.5 seconds>" / "<10.5 seconds>": widths
        jobs = [ChunkJob(tuple(f), p, 1.0, t) for f, p, t in zip(frames, pasts, starts)]
        calls, hook = _forwards(adapter)
        try:
            batched = adapter.encode_chunks(jobs)
        finally:
            hook.remove()
        assert len(calls) == forwards
        for job, enc in zip(jobs, batched):
            alone = adapter.encode_chunk(list(job.frames), job.past, 1.0, job.t_start_s)
            assert torch.allclose(enc.keys[0], alone.keys[0], atol=TOL)
            assert torch.allclose(enc.values[0], alone.values[0], atol=TOL)
            for a, b in zip((*enc.state.conv, *enc.state.recurrent), (*alone.state.conv, *alone.state.recurrent)):
                assert torch.allclose(a, b, atol=TOL)
    rows = [(p, q) for p in pasts for q in ("Is there a red circle?", "Is there a blue star now? Answer yes or no.")]
    calls, hook = _forwards(adapter)
    try:
        probes = adapter.probe_rows(rows)
    finally:
        hook.remove()
    assert len(calls) == 2  # one forward per prompt length, the two streams' rows together
    assert np.allclose(probes, [adapter.probe(p, q) for p, q in rows], atol=1e-6)
    prompt = adapter.prompt("What do you see?")
    decodings = [adapter.start_decoding(p, prompt, 6) for p in pasts]
    while not all(d.done for d in decodings):
        adapter.decode(decodings)
    assert [d.tokens for d in decodings] == [list(adapter.generate_ids(p, prompt, 6)) for p in pasts]


def test_moved_block_equals_fresh_encoding_with_partial_rope(adapter):
    """Keys re-rotated by a position shift (only the rotary quarter of each head turns) equal the same chunk
    encoded at the shifted positions (linear layers do not depend on positions)."""
    head = adapter.kv_shape.head_dim
    assert adapter.positions.inv_freq.numel() * 2 < head  # partial RoPE: what this test is about
    frames = _chunks(1)[0]
    encoded = []
    for offset in (0, 300):
        sinks = adapter.encode_text(adapter.sink_text, Context((), (), offset))
        base = Block(-1, 0, 0, sinks.keys, sinks.values, offset, sinks.pos_span, state=sinks.state)
        enc = adapter.encode_chunk(frames, concat([base], offset + sinks.pos_span), 1.0)
        encoded.append(Block(0, 0, 1, enc.keys, enc.values, offset + sinks.pos_span, enc.pos_span))
    moved = adapter.positions.move(encoded[0], encoded[1].pos_start)
    assert not torch.allclose(encoded[0].keys[0], encoded[1].keys[0], atol=TOL)
    assert torch.allclose(moved.keys[0], encoded[1].keys[0], atol=TOL)
    assert torch.equal(moved.values[0], encoded[0].values[0])


def test_offline_generate_is_hf_generate_on_the_chat_templates_conversation(adapter):
    """The re-encoding baseline of `streamvid bench` (`--arch qwen3.5-tiny`): what HF does with the conversation the
    chat template renders for a video and a question, prepared here from the messages (not the adapter's text)."""
    from streamvid.adapters.hf import SYSTEM_PROMPT

    frames = random_frames(4, seed=1, px=64)
    question = "What colour is the circle?"
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": question}]}]
    text = adapter.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = adapter.processor(text=[text], videos=[np.stack(frames)], do_sample_frames=False, return_tensors="pt",
                               videos_kwargs={"fps": 2.0, "cap_pixels_per_frame": True})
    with torch.inference_mode():
        expected = adapter.model.generate(**inputs, max_new_tokens=5, do_sample=False)[0, inputs["input_ids"].shape[1]:]
    assert adapter.offline_generate(frames, question, 5, fps=2.0) == expected.tolist()
    assert len(expected) >= 1


def test_kv_shape_counts_the_attention_layers_only():
    """Budgets in MB and memory sizes come from the K/V per token: Qwen3.5-0.8B's published layout (24 layers, every
    fourth full attention, 2 KV heads of 256) holds 6 layers of K/V: 6 * 2 (K, V) * 2 * 256 * 2 bytes a token."""
    from streamvid.kv.budget import KVShape

    kinds = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(24)]
    text = {"num_hidden_layers": 24, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
            "hidden_size": 1024, "layer_types": kinds}
    shape = KVShape.from_config({"model_type": "qwen3_5", "text_config": text}, "bfloat16")
    assert (shape.layers, shape.bytes_per_token) == (6, 12288)
    plain = KVShape.from_config({"text_config": {**text, "layer_types": ["full_attention"] * 24}}, "bfloat16")
    assert plain.bytes_per_token == 4 * 12288


def test_an_index_layer_on_a_linear_layer_is_refused_in_one_line(model_dir):
    with pytest.raises(ValueError) as e:
        load_adapter(str(model_dir), index_layer=0)
    msg = str(e.value)
    assert "\n" not in msg and "index_layer 0" in msg and "linear-attention layer" in msg and "(3)" in msg
