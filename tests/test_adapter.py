"""The Qwen adapter: chunk-by-chunk prefill equals one forward; retrieval vectors; decoding; load errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import random_frames
from streamvid.adapters.qwen2_5_vl import QwenVLAdapter
from streamvid.kv.positions import concat
from streamvid.kv.window import Block
from streamvid.types import Context


def test_chunk_by_chunk_prefill_equals_one_forward(adapter):
    chunks = [random_frames(2, seed=s) for s in (1, 2)]
    question = adapter.prompt("How many shapes are there?")
    # incremental: sinks, chunk, chunk, then the question on the concatenated cache
    sinks = adapter.encode_text(adapter.sink_text)
    blocks = [Block(-1, 0, 0, sinks.keys, sinks.values, 0, sinks.pos_span)]
    for i, frames in enumerate(chunks):
        past = concat(blocks, blocks[-1].pos_start + blocks[-1].pos_span)
        enc = adapter.encode_chunk(frames, past, 1.0)
        blocks.append(Block(i, i, i + 1, enc.keys, enc.values, past.next_pos, enc.pos_span, enc.vector))
    ctx = concat(blocks, blocks[-1].pos_start + blocks[-1].pos_span)
    q_ids = adapter.token_ids(question)
    inc_logits = adapter.forward(q_ids, adapter.text_positions(ctx.next_pos, q_ids.shape[1]), ctx)[0][0, -1]

    # one forward over the same tokens, positions from the model's own get_rope_index over the whole sequence
    video = adapter.video_processor(videos=[np.stack(c) for c in chunks], return_tensors="pt",
                                    do_sample_frames=False, cap_pixels_per_frame=True)
    n = int(video["video_grid_thw"][0].prod()) // 4
    chunk_ids = [adapter.vision_start_id] + [adapter.video_pad_id] * n + [adapter.vision_end_id]
    ids = torch.tensor([adapter.token_ids(adapter.sink_text)[0].tolist() + chunk_ids * 2 + q_ids[0].tolist()])
    types = (ids == adapter.video_pad_id).int() * 2
    pos, _ = adapter.model.model.get_rope_index(ids, mm_token_type_ids=types, video_grid_thw=video["video_grid_thw"],
                                                second_per_grid_ts=torch.ones(2))
    with torch.inference_mode():
        out = adapter.model(input_ids=ids, position_ids=pos, pixel_values_videos=video["pixel_values_videos"],
                            video_grid_thw=video["video_grid_thw"], use_cache=True)
    n_ctx = ctx.n_tokens
    assert ids.shape[1] == n_ctx + q_ids.shape[1]
    assert int(pos[0, 0, -1]) == ctx.next_pos + q_ids.shape[1] - 1
    for layer, (k, v) in enumerate(zip(ctx.keys, ctx.values)):
        assert torch.allclose(out.cache.layers[layer].keys[:, :, :n_ctx], k, atol=1e-4)
        assert torch.allclose(out.cache.layers[layer].values[:, :, :n_ctx], v, atol=1e-4)
    assert torch.allclose(out.logits[0, -1], inc_logits, atol=1e-4)


def test_vectors_are_unit_and_comparable(adapter):
    sinks = adapter.encode_text(adapter.sink_text)
    enc = adapter.encode_chunk(random_frames(2), Context(sinks.keys, sinks.values, sinks.pos_span), 1.0)
    q = adapter.question_vector("What colour was the star?")
    assert enc.vector.shape == q.shape == (adapter.index_dim,)
    assert abs(np.linalg.norm(enc.vector) - 1) < 1e-5 and abs(np.linalg.norm(q) - 1) < 1e-5


def test_generate_streams_pieces_and_respects_limit(adapter):
    sinks = adapter.encode_text(adapter.sink_text)
    ctx = Context(sinks.keys, sinks.values, sinks.pos_span)
    pieces = list(adapter.generate(ctx, adapter.prompt("Hello?"), max_new_tokens=5))
    assert len(pieces) <= 5 and all(isinstance(p, str) for p in pieces)
    assert 0.0 <= adapter.probe(ctx, "Is there a red circle?") <= 1.0


def test_chunk_needs_whole_temporal_patches(adapter):
    sinks = adapter.encode_text(adapter.sink_text)
    with pytest.raises(ValueError, match="multiple of 2 frames"):
        adapter.encode_chunk(random_frames(3), Context(sinks.keys, sinks.values, sinks.pos_span), 1.0)


def test_load_errors_are_one_line(tmp_path, tiny_model_dir):
    with pytest.raises(ValueError, match="cannot load model"):
        QwenVLAdapter(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"index_layer must be in \[0, 2\), got 9"):
        QwenVLAdapter(str(tiny_model_dir), index_layer=9)


@pytest.mark.parametrize("index_layer", [0, 1])
def test_question_vector_runs_only_the_layers_up_to_the_index_layer(tiny_model_dir, index_layer):
    """The question vector's forward stops at the index layer's q_proj: no later layer and no LM head run, and the
    vector equals the mean of that q_proj's output over the question's tokens (heads averaged per KV group)."""
    adapter = QwenVLAdapter(str(tiny_model_dir), index_layer=index_layer)
    lm = adapter.model.model.language_model
    ran: list[str] = []
    hooks = [layer.register_forward_hook(lambda *_, i=i: ran.append(f"layer{i}")) for i, layer in enumerate(lm.layers)]
    hooks.append(adapter.model.lm_head.register_forward_hook(lambda *_: ran.append("lm_head")))
    captured = []
    hooks.append(lm.layers[adapter.index_layer].self_attn.q_proj.register_forward_hook(
        lambda _m, _i, out: captured.append(out.detach())))
    try:
        v = adapter.question_vector("What colour is the circle?")
    finally:
        for h in hooks:
            h.remove()
    assert ran == [f"layer{i}" for i in range(adapter.index_layer)], "layers after the index layer did not run"
    q = captured[0][0].float().mean(0).view(adapter.kv_heads, -1, adapter.head_dim).mean(1).reshape(-1)
    assert np.allclose(v, (q / q.norm()).numpy(), atol=1e-6)


def test_encoded_chunk_carries_the_vision_tokens_the_decoder_received(adapter):
    """Encoded.scene (the change gate's features) equals the vision tower's merged tokens for the chunk, computed
    on their own with get_video_features."""
    frames = random_frames(2, seed=3)
    sinks = adapter.encode_text(adapter.sink_text)
    past = concat([Block(-1, 0, 0, sinks.keys, sinks.values, 0, sinks.pos_span)], sinks.pos_span)
    enc = adapter.encode_chunk(frames, past, 1.0)
    vision = adapter.chunk_inputs(frames, 1.0).vision
    with torch.no_grad():
        (expected,) = adapter.model.model.get_video_features(vision["pixel_values_videos"], vision["video_grid_thw"],
                                                             return_dict=True).pooler_output
    assert enc.scene is not None and enc.scene.shape == tuple(expected.shape) and enc.n_tokens >= len(expected)
    np.testing.assert_allclose(enc.scene.astype(np.float32), expected.float().numpy(), atol=2e-3, rtol=2e-3)
    assert adapter.encode_text("hello", past).scene is None


def test_region_keys_pool_the_token_grid_onto_at_most_four_by_four():
    from streamvid.adapters.vectors import region_keys

    rng = np.random.default_rng(0)
    keys = rng.standard_normal((2 * 8 * 8, 5)).astype(np.float32)  # 2 frames of an 8 x 8 token grid, raster order
    grid = keys.reshape(2, 8, 8, 5).mean(0)
    want = np.stack([grid[2 * r:2 * r + 2, 2 * c:2 * c + 2].reshape(4, 5).mean(0) for r in range(4) for c in range(4)])
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert np.allclose(region_keys(torch.from_numpy(keys), (2, 8, 8)), want, atol=1e-6)
    small = keys[:6]  # a 2 x 3 grid is its own regions
    assert np.allclose(region_keys(torch.from_numpy(small), (1, 2, 3)),
                       small / np.linalg.norm(small, axis=1, keepdims=True), atol=1e-6)
    runs = region_keys(torch.from_numpy(keys[:40]), None)  # no grid: 16 runs of consecutive tokens (3 or 2 each)
    first = keys[:3].mean(0)
    assert runs.shape == (16, 5) and np.allclose(runs[0], first / np.linalg.norm(first), atol=1e-6)


def _copy_checkpoint(src, dst, template: str | None):
    """A copy of the checkpoint folder with its chat template replaced (None: removed)."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "chat_template.jinja":
            (dst / f.name).write_bytes(f.read_bytes())
    if template is not None:
        (dst / "chat_template.jinja").write_text(template)
    return dst


def test_chunk_layout_follows_the_chat_templates_video_placeholder(tmp_path, tiny_model_dir):
    """The chunk's text is what the checkpoint's own chat template writes for a video (here with a label before it),
    expanded by its processor: the label's tokens, then one wrapper around the frames' pad tokens."""
    template = (tiny_model_dir / "chat_template.jinja").read_text().replace(
        "{% if item['type'] == 'video' %}<|vision_start|>", "{% if item['type'] == 'video' %}Clip: <|vision_start|>")
    assert "Clip: " in template
    adapter = QwenVLAdapter(str(_copy_checkpoint(tiny_model_dir, tmp_path / "labelled", template)))
    frames = random_frames(2, px=56)
    chunk = adapter.chunk_inputs(frames, 1.0)
    grid = adapter.video_processor(videos=[np.stack(frames)], return_tensors="pt", do_sample_frames=False,
                                   cap_pixels_per_frame=True)["video_grid_thw"]
    pads = int(grid.prod()) // 4  # merged 2 x 2
    label = adapter.tokenizer.encode("Clip: ", add_special_tokens=False)
    assert chunk.ids[0].tolist() == label + [adapter.vision_start_id] + [adapter.video_pad_id] * pads + [
        adapter.vision_end_id]


def test_a_checkpoint_without_a_chat_template_says_so_in_one_line(tmp_path, tiny_model_dir, caplog):
    with caplog.at_level("WARNING", logger="streamvid.adapters.qwen2_5_vl"):
        adapter = QwenVLAdapter(str(_copy_checkpoint(tiny_model_dir, tmp_path / "bare", None)))
    lines = [r.getMessage() for r in caplog.records if r.name == "streamvid.adapters.qwen2_5_vl"]
    assert len(lines) == 1 and "\n" not in lines[0] and "video placeholder" in lines[0]
    assert adapter.video_text == "<|vision_start|><|video_pad|><|vision_end|>"
    ids = adapter.chunk_inputs(random_frames(2, px=56), 1.0).ids[0].tolist()
    assert ids[0] == adapter.vision_start_id and ids[-1] == adapter.vision_end_id
    assert set(ids[1:-1]) == {adapter.video_pad_id}
