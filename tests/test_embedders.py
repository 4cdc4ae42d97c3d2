"""Retrieval embedders (streamvid/adapters/embedders.py): the model's own vectors by default, exactly as before; a CLIP
or SigLIP checkpoint behind the same interface (tiny random ones built here, no download), from ingest to retrieval;
sessions refuse to mix embedders; the CLI flag."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import random_frames
from test_reasoning import SpyAdapter, holds_block, fill_chunks, sample_frame

from streamvid.adapters.embedders import FORMS, ModelEmbedder, distinct_rows, embedder_name, make_embedder
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.assistant.session_store import SnapshotError, check_embedder
from streamvid.cli.main import build_parser, engine_config, main
from streamvid.config import EngineConfig
from streamvid.kv.positions import concat
from streamvid.language.asked import Question
from streamvid.types import Encoded

CLIP_DIM = 24
SIGLIP_DIM = 32


# ---- tiny random checkpoints -------------------------------------------------------------------------------------
def _clip_checkpoint(out: Path) -> Path:
    """CLIPModel with small text and vision towers, a 32-px CLIPImageProcessor and a character-level CLIP tokenizer
    (byte-level alphabet, with and without CLIP's end-of-word suffix, no merges)."""
    from tokenizers import pre_tokenizers
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    chars = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {t: i for i, t in enumerate(["<|startoftext|>", "<|endoftext|>", *chars, *(c + "</w>" for c in chars)])}
    tokenizer = CLIPTokenizer(vocab=vocab, merges=[], model_max_length=32)
    processor = CLIPProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                                 crop_size={"height": 32, "width": 32}),
                              tokenizer=tokenizer)
    text = {"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "max_position_embeddings": 32, "bos_token_id": 0, "eos_token_id": 1,
            "pad_token_id": 1}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "image_size": 32, "patch_size": 8}
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=CLIP_DIM)
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(out)
    processor.save_pretrained(out)
    return out


def _siglip_checkpoint(out: Path) -> Path:
    """SiglipModel (text projection 48 -> 32 = the vision width) with a sentencepiece tokenizer trained here."""
    import sentencepiece as spm
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel, SiglipProcessor, SiglipTokenizer

    lines = ["what colour was the star", "a red circle and a blue square", "which shape was green"] * 20
    with tempfile.TemporaryDirectory() as tmp:
        prefix = str(Path(tmp) / "sp")
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=prefix, vocab_size=60,
                                       model_type="bpe", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2,
                                       hard_vocab_limit=False)
        tokenizer = SiglipTokenizer(vocab_file=prefix + ".model", model_max_length=16)
        processor = SiglipProcessor(image_processor=SiglipImageProcessor(size={"height": 32, "width": 32}),
                                    tokenizer=tokenizer)
        text = {"vocab_size": len(tokenizer), "hidden_size": 48, "intermediate_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 2, "max_position_embeddings": 16, "projection_size": SIGLIP_DIM,
                "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": None}
        vision = {"hidden_size": SIGLIP_DIM, "intermediate_size": 64, "num_hidden_layers": 2,
                  "num_attention_heads": 2, "image_size": 32, "patch_size": 8}
        config = SiglipConfig(text_config=text, vision_config=vision)
        torch.manual_seed(0)
        SiglipModel(config).save_pretrained(out)
        processor.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    return _clip_checkpoint(tmp_path_factory.mktemp("clip") / "tiny-clip")


@pytest.fixture(scope="module")
def siglip_dir(tmp_path_factory):
    return _siglip_checkpoint(tmp_path_factory.mktemp("siglip") / "tiny-siglip")


def _reference(model_dir: Path):
    """The checkpoint loaded independently of streamvid: (chunk vector, question vector) functions computed with
    the model's own get_image_features / get_text_features on its processor's output."""
    from transformers import AutoModel, AutoProcessor

    model, processor = AutoModel.from_pretrained(model_dir).eval(), AutoProcessor.from_pretrained(model_dir)
    padding = "max_length" if model.config.model_type == "siglip" else True

    def unit(x):
        return x / x.norm(dim=-1, keepdim=True)

    def chunk(frames):
        with torch.no_grad():
            feats = model.get_image_features(**processor(images=frames, return_tensors="pt")).pooler_output
        return unit(unit(feats).mean(0)).numpy()

    def question(text):
        with torch.no_grad():
            inputs = processor(text=[text], return_tensors="pt", padding=padding)
            return unit(model.get_text_features(**inputs).pooler_output[0]).numpy()

    return chunk, question


# ---- (a) the default: the model's own vectors, unchanged -----------------------------------------------------------
def test_model_embedder_gives_the_adapters_own_vectors(adapter):
    embedder = make_embedder(EngineConfig(), adapter)
    assert isinstance(embedder, ModelEmbedder) and embedder.name == "model" and embedder.dim == adapter.index_dim
    question = "What colour was the star?"
    assert np.array_equal(embedder.question_vector(question), adapter.question_vector(question))
    sinks = adapter.encode_text(adapter.sink_text, None)
    frames = random_frames(2, seed=5)
    enc = adapter.encode_chunk(frames, concat([_sink_block(sinks)], sinks.pos_span), 1.0)
    # reference: the index layer's pre-RoPE keys of the video tokens, read by a hook of this test's own
    proj = adapter.model.model.language_model.layers[adapter.index_layer].self_attn.k_proj
    seen = []
    handle = proj.register_forward_hook(lambda _m, _i, out: seen.append(out[0].float()))
    try:
        ids = adapter.chunk_inputs(frames, 1.0).ids[0]
        adapter.encode_chunk(frames, concat([_sink_block(sinks)], sinks.pos_span), 1.0)
    finally:
        handle.remove()
    video = seen[0][ids == adapter.model.config.video_token_id].numpy()  # a 2 x 2 token grid: one region each
    mean = video.mean(0) / np.linalg.norm(video.mean(0))
    want = (mean[None] + 2 * video / np.linalg.norm(video, axis=1, keepdims=True)) / 3
    assert np.allclose(embedder.chunk_vector(frames, enc), want, atol=1e-5)  # random frames: 4 distinct regions
    assert np.allclose(enc.vector, mean, atol=1e-5)


class _RecordingAdapter(SpyAdapter):
    """The real adapter, keeping every Encoded that encode_chunk returns."""

    def __init__(self, real):
        super().__init__(real)
        self.encoded: list[Encoded] = []

    def encode_chunk(self, *args, **kwargs):
        enc = self._real.encode_chunk(*args, **kwargs)
        self.encoded.append(enc)
        return enc


def test_default_engine_stores_and_searches_the_adapters_vectors(adapter):
    spy = _RecordingAdapter(adapter)
    sa = StreamingAssistant(EngineConfig.from_settings(model="unused", window_tokens=40, memory_top_k=2,
                                                       max_new_tokens=2),
                            adapter=spy)
    fill_chunks(sa, 10)
    assert sa.memory.dim == adapter.index_dim and len(sa.memory) >= 4
    for block_id in range(len(sa.memory)):  # block i is the i-th chunk encoded
        enc = spy.encoded[block_id]
        assert np.allclose(sa.memory.load(block_id).vector, (enc.vector[None] + 2 * distinct_rows(enc.regions)) / 3)
    q = "What colour was the star?"
    want = [i for i, _ in sa.memory.search(adapter.question_vector(q), 2)]
    answer = sa.reasoning.answer(Question("q", q, 10.0))
    assert sorted(answer.data["retrieved_blocks"]) == sorted(want)


def _sink_block(enc):
    from streamvid.kv.window import Block

    return Block(id=-1, t_start_s=0.0, t_end_s=0.0, keys=enc.keys, values=enc.values, pos_start=0,
                 pos_span=enc.pos_span)


# ---- (b) a CLIP / SigLIP checkpoint behind the same interface ------------------------------------------------------
@pytest.mark.parametrize("kind, dim", [("clip", CLIP_DIM), ("siglip", SIGLIP_DIM)])
def test_clip_embedder_matches_the_models_own_features(adapter, kind, dim, request):
    model_dir = request.getfixturevalue(f"{kind}_dir")
    embedder = make_embedder(EngineConfig.from_settings(embedder=f"clip:{model_dir}"), adapter)
    assert embedder.dim == dim and embedder.name == f"clip:{model_dir.resolve()}"
    ref_chunk, ref_question = _reference(model_dir)
    frames = random_frames(2, seed=7)
    chunk = embedder.chunk_vector(frames, None)
    question = embedder.question_vector("What colour was the star?")
    for v in (chunk, question):
        assert v.dtype == np.float32 and v.shape == (dim,)
        assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-5
    np.testing.assert_allclose(chunk, ref_chunk(frames), atol=1e-5)
    np.testing.assert_allclose(question, ref_question("What colour was the star?"), atol=1e-5)
    # the mean of normalised frame features is not the features of one frame
    assert not np.allclose(chunk, ref_chunk(frames[:1]), atol=1e-3)


def test_one_loaded_clip_model_is_shared(adapter, clip_dir):
    config = EngineConfig.from_settings(embedder=f"clip:{clip_dir}")
    assert make_embedder(config, adapter) is make_embedder(config, adapter)


def test_a_checkpoint_that_is_not_clip_is_refused_in_one_line(adapter, tiny_model_dir, tmp_path):
    from streamvid.adapters.clip_embedder import ClipEmbedder

    with pytest.raises(ValueError, match="cannot load the embedder") as e:
        ClipEmbedder(str(tmp_path / "nothing-here"))
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="pass a CLIP or SigLIP checkpoint|cannot load the embedder") as e:
        ClipEmbedder(str(tiny_model_dir))
    assert "\n" not in str(e.value)


# ---- (c) end to end: ingest stores CLIP vectors, a past-tense question retrieves by them --------------------------
@pytest.fixture
def clip_session(adapter, clip_dir):
    spy = SpyAdapter(adapter)
    sa = StreamingAssistant(EngineConfig.from_settings(model="unused", window_tokens=40, memory_top_k=2,
                                                       max_new_tokens=3, embedder=f"clip:{clip_dir}"),
                            adapter=spy)
    fill_chunks(sa, 12)
    return sa, spy


def test_blocks_in_memory_carry_clip_vectors_of_their_frames(clip_session, clip_dir):
    sa, _ = clip_session
    ref_chunk, _ = _reference(clip_dir)
    assert sa.memory.dim == CLIP_DIM and len(sa.memory) >= 8
    for block_id in range(len(sa.memory)):
        frames = [sample_frame(2 * block_id).image, sample_frame(2 * block_id + 1).image]
        np.testing.assert_allclose(sa.memory.load(block_id).vector, ref_chunk(frames), atol=1e-5)
    for block in sa.window.snapshot().blocks:
        assert block.vector.shape == (CLIP_DIM,)


def test_past_tense_question_retrieves_by_clip_vectors(clip_session, clip_dir):
    sa, _ = clip_session
    _, ref_question = _reference(clip_dir)
    q = "What colour was the star?"
    answer = sa.reasoning.answer(Question("q", q, 12.0))
    retrieved = answer.data["retrieved_blocks"]
    assert len(retrieved) == 2
    in_window = {b.id for b in sa.window.snapshot().blocks}
    scores = {i: float(sa.memory.load(i).vector @ ref_question(q)) for i in range(len(sa.memory)) if i not in in_window}
    others = [s for i, s in scores.items() if i not in retrieved]
    assert min(scores[i] for i in retrieved) >= max(others) - 1e-5  # the nearest blocks by the CLIP question vector


def test_planted_block_is_retrieved_by_its_clip_vector(clip_session):
    sa, spy = clip_session
    q = "What colour was the star?"
    planted = sa.memory.load(3)
    sa.memory.reindex(3, sa.embedder.question_vector(q))
    answer = sa.reasoning.answer(Question("q", q, 12.0))
    assert 3 in answer.data["retrieved_blocks"] and [3.0, 4.0] in answer.data["evidence_t_s"]
    assert holds_block(spy.contexts[-1], planted)


# ---- sessions: saved with one embedder, refused with another ------------------------------------------------------
def test_session_saved_with_clip_is_refused_with_the_models_vectors(tiny_model_dir, adapter, clip_dir, tmp_path,
                                                                   monkeypatch):
    cfg = EngineConfig.from_settings(model=str(tiny_model_dir), window_tokens=40, max_new_tokens=2,
                                     embedder=f"clip:{clip_dir}")
    sa = StreamingAssistant(cfg, adapter=adapter)
    fill_chunks(sa, 8)
    sa.save(tmp_path / "s")
    n_memory = len(sa.memory)
    sa.stop()
    meta = json.loads(next((tmp_path / "s").glob("snap-*/meta.json")).read_text())
    assert meta["embedder"] == {"name": f"clip:{clip_dir.resolve()}", "dim": CLIP_DIM}
    with pytest.raises(SnapshotError, match=r"saved with retrieval vectors from embedder clip:.* not model: pass "
                                            r"--embedder clip:") as e:
        StreamingAssistant.resume(tmp_path / "s", cfg.replace(embedder="model"), adapter=adapter)
    assert "\n" not in str(e.value)
    monkeypatch.chdir(clip_dir.parent)  # the same checkpoint by a relative path is the same embedder
    resumed = StreamingAssistant.resume(tmp_path / "s", cfg.replace(embedder=f"clip:{clip_dir.name}"), adapter=adapter)
    try:
        assert resumed.memory.dim == CLIP_DIM and len(resumed.memory) == n_memory > 0
        answer = resumed.reasoning.answer(Question("q", "What colour was the star?", 8.0))
        assert answer.data["retrieved_blocks"]
    finally:
        resumed.stop()


def test_sessions_from_before_embedders_count_as_the_models_vectors(tmp_path):
    check_embedder(tmp_path, {}, "model")
    with pytest.raises(SnapshotError, match="embedder model, not clip:x"):
        check_embedder(tmp_path, {}, "clip:x")


# ---- (d) the flag ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["bogus", "clip:", "clip:  ", "CLIP:x", "siglip"])
def test_bad_embedder_flag_is_one_line_naming_the_allowed_forms(capsys, value):
    assert main(["run", "clip.mp4", "--embedder", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"embedder must be {FORMS}, got {value!r}" in err
    with pytest.raises(ValueError, match="embedder must be 'model' or 'clip:<HF id or local dir>'"):
        EngineConfig.from_settings(embedder=value)


@pytest.mark.parametrize("argv", [["run", "v.mp4"], ["demo"], ["score", "e.jsonl"]])
def test_embedder_flag_reaches_the_engine_config(argv):
    args = build_parser().parse_args([*argv, "--embedder", "clip:openai/clip-vit-base-patch32"])
    assert engine_config(args).memory.embedder == "clip:openai/clip-vit-base-patch32"
    assert engine_config(build_parser().parse_args(argv)).memory.embedder == "model"


def test_embedder_names():
    assert embedder_name("model") == "model"
    assert embedder_name("clip:openai/clip-vit-base-patch32") == "clip:openai/clip-vit-base-patch32"


def test_distinct_rows_drops_near_copies_only():
    rng = np.random.default_rng(1)
    base = rng.standard_normal((3, 32))
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    near = base[1] + 0.01 * rng.standard_normal(32)  # cosine ~0.998 to row 1
    near /= np.linalg.norm(near)
    rows = np.stack([base[0], base[1], near, base[2], base[0]])
    kept = distinct_rows(rows)
    assert np.array_equal(kept, base)  # in order; the near copy and the repeat dropped
    assert np.array_equal(distinct_rows(rows, same=1.01), rows)
