"""`streamvid train-tiny`: dense labels agree with the pixels, samples follow the engine's layout (their dialogue
from earlier moments, their prompt the engine's), a tiny budget trains, saves, and gives a checkpoint the engine
loads, a resumed run continues bit-exactly, and the block side trains the tower's merger and nothing else of it."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from streamvid.adapters.qwen2_5_vl import QwenVLAdapter
from streamvid.cli.main import build_parser
from streamvid.language.spoken_times import stream_times
from streamvid.synth.world import COLOURS, generate
from streamvid.training import data as train_data
from streamvid.training.config import FAMILY_WEIGHTS
from streamvid.training.train_tiny import CELL_PX, N_EVAL_TIMELINES, TrainConfig, TrainingData, train


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    cfg = TrainConfig(out_dir=tmp_path_factory.mktemp("unused"), n_timelines=1, minutes=1.0)
    return TrainingData(cfg, np.random.default_rng(0))


def test_cell_labels_match_the_decoded_pixels(data):
    g = data.cfg.frame_px // CELL_PX
    labelled = 0
    for k in range(0, data.timelines[0].n_frames, 5):
        cells = data.cell_attributes(0, [k])
        image = data.frame(0, k)[:g * CELL_PX, :g * CELL_PX].astype(int)
        patches = image.reshape(g, CELL_PX, g, CELL_PX, 3).transpose(0, 2, 1, 3, 4).reshape(g * g, -1, 3)
        for cell, attributes in zip(patches, cells):
            for i in np.flatnonzero(attributes[:len(COLOURS)]):
                colour = np.array(list(COLOURS.values())[i])
                assert (np.abs(cell - colour).sum(1) < 90).mean() > 0.02  # the labelled colour is in the cell
                labelled += 1
    assert labelled > 10


def test_samples_follow_the_engine_layout(data):
    fpc = data.cfg.frames_per_chunk
    for _ in range(20):
        s = data.sample(4)
        chunks = [c for c in s["chunks"] if not isinstance(c, str)]  # (speech blocks: test_speech_blocks_...)
        assert all(c[0] % fpc == 0 and len(c) == fpc for c in chunks)  # chunks on the engine's grid
        assert [c[0] for c in chunks] == sorted(c[0] for c in chunks)  # time order
        assert s["turns"][-1] == (s["question"], s["answer"], s["family"])
    cfg = TrainConfig(out_dir=data.cfg.out_dir, n_timelines=1, minutes=1.0, families={"backward_at_time": 1.0})
    timed = TrainingData(cfg, np.random.default_rng(1))
    s = timed.sample(2)
    # a question naming a time is answered from the blocks at that time alone, as the engine does
    assert len(s["turns"]) == 1 and len(s["chunks"]) <= cfg.top_k
    (t,) = stream_times(s["question"], now_s=timed.timelines[0].duration_s)
    assert all(abs(c[0] / cfg.fps - t) <= fpc / cfg.fps for c in s["chunks"] if not isinstance(c, str))


def _line(block: str) -> tuple[int, str]:
    """A speech block's "[mm:ss] speech: words" line: (its second, its words)."""
    m = re.fullmatch(r"\n\[(\d\d):(\d\d)\] speech: (.*)\n", block)
    assert m, block
    return int(m[1]) * 60 + int(m[2]), m[3]


@pytest.mark.parametrize("family", ["realtime_said", "backward_said_at_time", "when_said"])
def test_speech_questions_are_laid_out_as_the_engine_hears(family, tmp_path_factory):
    """Speech blocks sit where the engine puts them: in the window, each just before the first chunk that starts
    at or after the end of its line in the gold track (`synth.speech.plan_lines` times, ends from the sample's
    timeline); retrieved ones in time order; a question naming a time gets the blocks at that second alone. The
    answer is in the context: the newest line's words (realtime; in a window as short as 4 s too, where a line
    said 6 s ago has left it: such a question is not asked, as the engine's 8 s hold it), the words of the line at
    the named second, the second of the line that says the quoted word."""
    cfg = TrainConfig(out_dir=tmp_path_factory.mktemp("unused"), n_timelines=1, minutes=2.0, families={family: 1.0})
    speech = TrainingData(cfg, np.random.default_rng(5))
    fps, fpc = cfg.fps, cfg.frames_per_chunk
    for i in range(12):
        s = speech.sample(6 if i % 2 else 4, speech.eval_ids)  # (the held-out streams all have sound)
        gold = {math.floor(u.t_s + 1e-6): u for u in speech.timelines[s["ti"]].speech}
        blocks = [(i, _line(c)) for i, c in enumerate(s["chunks"]) if isinstance(c, str)]
        assert blocks and all(sec in gold for _, (sec, _) in blocks)
        for i, (sec, _) in blocks:  # the next chunk starts at or after the line's end; in the window, the one
            nxt = next((c for c in s["chunks"][i + 1:] if not isinstance(c, str)), None)  # before it starts before
            if nxt is not None:
                assert nxt[0] / fps >= gold[sec].t_end_s - 1e-6 or nxt[0] / fps >= sec
        said = {sec: words for _, (sec, words) in blocks}
        if family == "realtime_said":
            assert s["answer"] == blocks[-1][1][1] and s["t_s"] - gold[blocks[-1][1][0]].t_end_s >= 1.5 - 1e-6
        elif family == "backward_said_at_time":
            (t,) = stream_times(s["question"], now_s=s["t_s"])
            assert s["answer"] == said[int(t)] and len(s["turns"]) == 1 and len(s["chunks"]) <= cfg.top_k
            assert all(abs(c[0] / fps - t) <= fpc / fps for c in s["chunks"] if not isinstance(c, str))
        else:
            word = re.search(r"'(\w+)'", s["question"])[1]
            m, sec = map(int, s["answer"].split(":"))
            assert word in gold[m * 60 + sec].text.split()


def test_answers_about_speech_are_taught_to_look_at_what_they_copy(tmp_path_factory):
    """An answer about what was said is taught, at each position that predicts one of its tokens, to look at the
    speech block's token with the same characters (the line's words, or the "mm:ss" of the line that said the
    quoted word), and the end of the turn at what ends the copied text; a quoted word's question tokens look at the
    same characters in that line."""
    from streamvid.checkpoints.tiny import build_tiny_checkpoint
    from streamvid.training.train_tiny import Batcher

    cfg = TrainConfig(out_dir=tmp_path_factory.mktemp("unused"), n_timelines=1, minutes=2.0,
                      families={"realtime_said": 1.0, "backward_said_at_time": 1.0, "when_said": 1.0})
    speech = TrainingData(cfg, np.random.default_rng(4))
    adapter = QwenVLAdapter(str(build_tiny_checkpoint(tmp_path_factory.mktemp("m"), hidden=32, layers=2)))
    speech.encode_chunks(adapter.model, adapter.video_processor)
    batcher, tok = Batcher(adapter, speech), adapter.tokenizer
    end = tok.convert_tokens_to_ids("<|im_end|>")
    quoted = 0
    for _ in range(9):
        s = speech.sample(6, speech.eval_ids, turns=0)
        batch = batcher.build([s])
        ids = batch["input_ids"][0].tolist()
        copies = sorted((p, t) for _, p, (t,) in batch["answer_looks"])
        answer = tok.encode(s["answer"], add_special_tokens=False)
        assert [ids[p + 1] for p, _ in copies] == answer + [end]  # every answer token, then the end of the turn
        assert "".join(tok.decode([ids[t]]) for _, t in copies[:-1]).strip() == s["answer"]
        assert tok.decode([ids[copies[-1][1]]]) in ("\n", "]")
        word = re.search(r"'(\w+)'", s["question"])[1] if s["family"] == "when_said" else ""
        for _, p, (t,) in batch["word_looks"]:  # (the line may split the word into other pieces: "O", "range")
            assert tok.decode([ids[p]]).strip() in word and tok.decode([ids[t]]).lower().strip() in word
            quoted += 1
    assert quoted > 0


def test_answers_are_taught_to_look_at_the_named_object_in_the_newest_block(data, tmp_path_factory):
    """For a question about now, the colour word is taught to look at the newest block's cells whose decoded
    pixels show that colour, and the answer at the word."""
    from streamvid.synth.questions import mentions
    from streamvid.training.train_tiny import Batcher

    cfg = TrainConfig(out_dir=data.cfg.out_dir, n_timelines=1, minutes=1.0, families={"realtime_shape": 1.0})
    shape_data = TrainingData(cfg, np.random.default_rng(3))
    from streamvid.checkpoints.tiny import build_tiny_checkpoint

    adapter = QwenVLAdapter(str(build_tiny_checkpoint(tmp_path_factory.mktemp("m"), hidden=32, layers=2)))
    shape_data.encode_chunks(adapter.model, adapter.video_processor)
    batcher = Batcher(adapter, shape_data)
    g = cfg.frame_px // CELL_PX
    checked = 0
    for _ in range(6):
        s = shape_data.sample(3, turns=0)
        batch = batcher.build([s])
        _, a, b = batch["chunk_spans"][-1]
        (_, pos, words), = batch["answer_looks"]
        assert batch["input_ids"][0, pos + 1] == adapter.tokenizer.encode(s["answer"])[0]  # predicts the answer
        (_, word, targets), = batch["word_looks"]
        assert words == [word]  # the answer looks at the colour word, the colour word at the objects
        assert adapter.tokenizer.decode(batch["input_ids"][0, word]).strip() in COLOURS
        assert all(a <= t < b for t in targets)  # the newest block only
        _, colour = mentions(s["question"])
        palette = np.array(list(COLOURS.values()))
        images = np.stack([shape_data.frame(s["ti"], k) for k in s["chunks"][-1]]).astype(int)  # the block's frames
        for t in targets:
            r, c = divmod(t - a, g)
            cell = images[:, r * CELL_PX:(r + 1) * CELL_PX, c * CELL_PX:(c + 1) * CELL_PX].reshape(-1, 3)
            d = np.abs(cell[:, None] - palette[None]).mean(2)  # (pixels, colours)
            named = (d.argmin(1) == list(COLOURS).index(colour)) & (d.min(1) < 45)
            assert named.mean() > 0.05, (colour, named.mean())
            checked += 1
    assert checked >= 6


def test_listed_objects_look_at_their_cells(tmp_path_factory):
    """An answer that lists what was on screen ("purple hexagon, red star"): at each listed colour word, which
    predicts that object's shape, layer 1 is taught to look at the cells of the timed blocks whose decoded pixels
    show that colour, and layer 2 at the word itself."""
    from streamvid.checkpoints.tiny import build_tiny_checkpoint
    from streamvid.training.train_tiny import Batcher

    cfg = TrainConfig(out_dir=tmp_path_factory.mktemp("unused"), n_timelines=1, minutes=1.0,
                      families={"backward_at_time": 1.0})
    timed = TrainingData(cfg, np.random.default_rng(4))
    adapter = QwenVLAdapter(str(build_tiny_checkpoint(tmp_path_factory.mktemp("m"), hidden=32, layers=2)))
    timed.encode_chunks(adapter.model, adapter.video_processor)
    batcher = Batcher(adapter, timed)
    tok, g = adapter.tokenizer, cfg.frame_px // CELL_PX
    palette = np.array(list(COLOURS.values()))
    listed = 0
    for _ in range(20):
        s = timed.sample(3, turns=0)
        batch = batcher.build([s])
        ids = batch["input_ids"][0]
        colours = [w.split()[0] for w in s["answer"].split(", ") if len(w.split()) == 2]
        looks = {pos: cells for _, pos, cells in batch["word_looks"]}
        at_self = [pos for _, pos, targets in batch["answer_looks"] if targets == [pos]]
        assert [tok.decode(ids[pos]).strip() for pos in at_self] == colours
        spans = batch["chunk_spans"]
        for pos in at_self:
            colour = tok.decode(ids[pos]).strip()
            for t in looks[pos]:
                (_, a, _), frames = next(((sp, f) for sp, f in zip(spans, s["chunks"]) if sp[1] <= t < sp[2]))
                r, c = divmod(t - a, g)
                images = np.stack([timed.frame(s["ti"], k) for k in frames]).astype(int)
                cell = images[:, r * CELL_PX:(r + 1) * CELL_PX, c * CELL_PX:(c + 1) * CELL_PX].reshape(-1, 3)
                d = np.abs(cell[:, None] - palette[None]).mean(2)
                assert ((d.argmin(1) == list(COLOURS).index(colour)) & (d.min(1) < 45)).mean() > 0.05
            listed += 1
    assert listed >= 10


def test_train_saves_a_checkpoint_the_engine_loads(tmp_path, monkeypatch):
    record = train(TrainConfig(out_dir=tmp_path / "m", steps=3, batch=2, n_timelines=1, minutes=0.5, log_every=1,
                               eval_samples=4, vision_warmup_steps=2, warmup_scenes=4))
    assert record["steps_done"] == 3
    warmup = [h for h in record["history"] if "vision_warmup_step" in h]
    main = [h for h in record["history"] if "step" in h]
    assert [h["vision_warmup_step"] for h in warmup] == [0, 1] and [h["step"] for h in main] == [0, 1, 2]
    assert all(h["lm_loss"] > 0 and h["attention"] > 0 for h in main)
    (check,) = [h["vision_check"] for h in record["history"] if "vision_check" in h]
    assert set(check) == {"colour", "shape"} and all(0 <= v <= 1 for v in check.values())
    assert set(main[-1]["held_out"]) <= set(FAMILY_WEIGHTS)
    adapter = QwenVLAdapter(str(tmp_path / "m"))
    assert adapter.model.config.model_type == "qwen2_5_vl"
    assert json.loads((tmp_path / "m" / "training.json").read_text())["steps_done"] == 3

    # fine-tuning that checkpoint: no warm-up, the tower as it was, the language model moved, the record kept
    tuned = train(TrainConfig(out_dir=tmp_path / "t", steps=2, batch=2, n_timelines=1, minutes=0.5, log_every=1,
                              eval_samples=4, init_from=tmp_path / "m", lr=1e-2, seed=1))
    assert not [h for h in tuned["history"] if "vision_warmup_step" in h] and tuned["steps_done"] == 2
    assert tuned["fine_tuned_from"]["steps_done"] == 3 and tuned["config"]["init_from"] == str(tmp_path / "m")
    before, after = adapter.model.state_dict(), QwenVLAdapter(str(tmp_path / "t")).model.state_dict()
    visual = [k for k in before if ".visual." in k or k.startswith("visual.")]
    assert visual and all(torch.equal(before[k], after[k]) for k in visual)
    assert any(not torch.equal(before[k], after[k]) for k in before if "language_model.layers" in k)

    # ... and the tower refined alone (no main steps): the tower moves, the language model stays as it was, and only
    # the held-out timelines of its vision check are built
    built = []
    monkeypatch.setattr(train_data, "generate", lambda seed, *a, **k: built.append(seed) or generate(seed, *a, **k))
    refined = train(TrainConfig(out_dir=tmp_path / "r", steps=0, n_timelines=3, minutes=0.5, log_every=1,
                                eval_samples=4, init_from=tmp_path / "m", seed=2, vision_refine_steps=3,
                                warmup_scenes=4))
    assert built == [2 * 100_000 + 50_000 + i for i in range(N_EVAL_TIMELINES)]  # the held-out seeds of seed 2
    steps = [h for h in refined["history"] if "vision_refine_step" in h]
    assert [h["vision_refine_step"] for h in steps] == [0, 1, 2] and all(h["anchor"] >= 0 for h in steps)
    assert refined["steps_done"] == 0 and not [h for h in refined["history"] if "step" in h]
    (check,) = [h["vision_check"] for h in refined["history"] if "vision_check" in h]
    assert set(check) == {"colour", "shape"}
    after = QwenVLAdapter(str(tmp_path / "r")).model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in visual)
    assert all(torch.equal(before[k], after[k]) for k in before if k not in visual)


def test_refinement_scenes_show_the_confusable_shapes():
    """With confusable_frac 1 every scene with objects shows a CONFUSABLE shape, and its labels (cell, colour,
    shape) are the colour the frame has at the cell's centre."""
    from streamvid.synth.world import SHAPES
    from streamvid.training.train_tiny import CONFUSABLE, grid_scene

    rng = np.random.default_rng(1)
    both = 0
    for _ in range(200):
        frame, labels, n = grid_scene(rng, 112, confusable_frac=1.0)
        shown = {SHAPES[i] for i in np.nonzero(labels[:, len(COLOURS):].any(0))[0]}
        assert len(shown) == n and (n == 0 or shown & set(CONFUSABLE))
        both += set(CONFUSABLE) <= shown
        for cell in np.nonzero(labels.any(1))[0]:
            y, x = (cell // 4) * CELL_PX + CELL_PX // 2, (cell % 4) * CELL_PX + CELL_PX // 2
            colour = list(COLOURS)[int(np.argmax(labels[cell, :len(COLOURS)]))]
            assert np.abs(frame[y, x].astype(int) - COLOURS[colour]).max() <= 4  # pixel noise
    assert 30 < both < 150


def test_probe_edge_asks_about_the_newest_chunk_at_any_moment():
    """Trigger probes for training: "yes" only for a pair on screen in every frame of the chunk, "no" only for a
    pair in none of them (checked against the world's objects), both answers drawn, changes included."""
    from streamvid.synth.world import generate
    from streamvid.training.train_tiny import probe_edge

    tl = generate(3, 300.0, 2.0, 4)
    rng = np.random.default_rng(0)
    answers, at_changes = [], 0
    for k in range(1, tl.n_frames, 2):
        frames = [k - 1, k]
        if (qa := probe_edge(tl, frames, rng)) is None:
            continue
        words = qa.text.split()
        pair = (words[3], words[4])
        shown = [any((o.colour, o.shape) == pair for o in tl.objects_at(f / tl.fps)) for f in frames]
        assert qa.answer == ("yes" if all(shown) else "no") and (all(shown) or not any(shown))
        assert qa.text == f"Is there {words[2]} {pair[0]} {pair[1]} now? Answer yes or no."
        answers.append(qa.answer)
        seen = [{(o.colour, o.shape) for o in tl.objects_at(f / tl.fps)} for f in (k - 2, k)] if k > 2 else [set()]
        at_changes += len(seen) == 2 and seen[0] != seen[1]
    assert 0.3 < answers.count("yes") / len(answers) < 0.7 and at_changes > 10


def test_cli_wires_train_tiny():
    args = build_parser().parse_args(["train-tiny", "--out", "x", "--steps", "5"])
    assert args.func.__name__ == "cmd_train_tiny" and args.steps == 5


def test_cli_refining_a_tower_needs_the_checkpoint(tmp_path, capsys):
    from streamvid.cli.main import main

    assert main(["train-tiny", "--out", str(tmp_path / "x"), "--vision-refine-steps", "10", "--steps", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--init DIR" in err[0]
    assert not (tmp_path / "x").exists()


def test_language_model_trains_on_the_vision_tokens_the_engine_computes(tmp_path):
    """The chunk tokens computed once for the whole timeline equal the tower's output on the engine's own chunk
    inputs, and a forward with them in the video slots equals the model's forward from the pixels."""
    import torch

    from streamvid.checkpoints.tiny import build_tiny_checkpoint
    from streamvid.training.train_tiny import Batcher, forward

    cfg = TrainConfig(out_dir=tmp_path / "unused", n_timelines=1, minutes=0.5)
    data = TrainingData(cfg, np.random.default_rng(5))
    adapter = QwenVLAdapter(str(build_tiny_checkpoint(tmp_path / "m", hidden=32, layers=2)))
    model = adapter.model
    data.encode_chunks(model, adapter.video_processor, batch=7)
    fpc = cfg.frames_per_chunk
    assert len(data.tokens[0]) == data.timelines[0].n_frames // fpc
    with torch.no_grad():
        for c in (0, 9, len(data.tokens[0]) - 1):
            frames = list(range(c * fpc, (c + 1) * fpc))
            vision = adapter.chunk_inputs([data.frame(0, k) for k in frames], 1.0).vision
            (expected,) = model.model.get_video_features(vision["pixel_values_videos"], vision["video_grid_thw"],
                                                         return_dict=True).pooler_output
            torch.testing.assert_close(data.chunk_tokens(0, frames), expected, atol=1e-5, rtol=1e-5)
        batch = Batcher(adapter, data).build([data.sample(3, turns=2)])
        chunks = batch["samples"][0]["chunks"]
        video = adapter.video_processor(videos=[np.stack([data.frame(0, k) for k in f]) for f in chunks],
                                        return_tensors="pt", do_sample_frames=False, cap_pixels_per_frame=True)
        reference = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          position_ids=batch["position_ids"], **video).logits
        torch.testing.assert_close(forward(model, batch).logits, reference, atol=1e-4, rtol=1e-4)


def test_each_block_is_computed_from_what_the_engine_computed_it_from(tmp_path):
    """A training row lays out the sinks, the retrieved blocks, the ghosts (the 8 s of blocks before the window,
    which the engine encoded the window's first blocks on) and the window, and each block's keys and values are
    computed from what the engine computed them from: a chunk retrieved from memory from the sinks alone (memory
    keeps a streamvid-trained model's chunks encoded on the sinks), a retrieved speech block from the sinks and the
    retrieved blocks of the 8 s before it, a ghost or window block from the sinks and the ghost and window blocks
    of the 8 s before it. The reference encodes block by block as the engine does: each block's forward on a cache
    of the sinks and the blocks it sees. Positions are the answer context's without the ghosts, and the ghosts
    end where the window starts."""
    from transformers import DynamicCache

    from streamvid.checkpoints.tiny import build_tiny_checkpoint
    from streamvid.training.train_tiny import Batcher, forward

    cfg = TrainConfig(out_dir=tmp_path / "unused", n_timelines=1, minutes=2.0,
                      families={"realtime_said": 1.0, "when_said": 1.0})
    data = TrainingData(cfg, np.random.default_rng(5))
    adapter = QwenVLAdapter(str(build_tiny_checkpoint(tmp_path / "m", hidden=32, layers=2)))
    model, tok = adapter.model, adapter.tokenizer
    data.encode_chunks(model, adapter.video_processor)
    samples = [data.sample(cfg.window_blocks, data.eval_ids) for _ in range(3)]
    batcher = Batcher(adapter, data)
    batch = batcher.build(samples)
    ids, pos = batch["input_ids"], batch["position_ids"]
    embeds = model.get_input_embeddings()(ids)
    embeds[ids == model.config.video_token_id] = batch["video_embeds"].to(embeds.dtype)
    window_s = cfg.window_blocks * cfg.frames_per_chunk / cfg.fps
    n_sinks = len(tok.encode(adapter.sink_text, add_special_tokens=False))

    def kv(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in cache.layers]

    def encode(r: int, tokens: list[int], on: list[list[tuple[torch.Tensor, torch.Tensor]]]):
        """The K/V of a row's `tokens` from one forward on a cache of the blocks `on` (the engine's encode)."""
        cache = DynamicCache(config=model.config.text_config)
        for layer in range(model.config.text_config.num_hidden_layers if on else 0):
            cache.update(torch.cat([o[layer][0] for o in on], 2), torch.cat([o[layer][1] for o in on], 2), layer)
        past = cache.get_seq_length()
        out = model(inputs_embeds=embeds[r, tokens][None], position_ids=pos[:, r, tokens][:, None],
                    past_key_values=cache, attention_mask=torch.ones(1, past + len(tokens), dtype=torch.long))
        return [(k[:, :, past:], v[:, :, past:]) for k, v in kv(out.past_key_values)]

    checked = hidden = 0
    with torch.no_grad():
        trained = kv(forward(model, batch, use_cache=True).past_key_values)
        causal = dict(batch, attention_mask=(batch["attention_mask"][:, 0, -1] == 0).long())  # (padding: none)
        plain = kv(forward(model, causal, use_cache=True).past_key_values)
        for r, s in enumerate(samples):
            k = s["retrieved"]
            laid = ([("memory chunk" if not isinstance(c, str) else "retrieved", t, c)
                     for t, c in zip(s["starts"][:k], s["chunks"][:k])]
                    + [("ghost", t, c) for t, c in s["ghosts"]]
                    + [("window", t, c) for t, c in zip(s["starts"][k:], s["chunks"][k:])])
            spans, at = [], n_sinks  # each block's tokens, counted from the sample
            for _, _, c in laid:
                n = len(tok.encode(c, add_special_tokens=False)) if isinstance(c, str) else (
                    len(data.chunk_tokens(s["ti"], c)) + 2)
                spans.append(list(range(at, at + n)))
                at += n
            assert any(kind == "ghost" for kind, _, _ in laid)
            sinks = encode(r, list(range(n_sinks)), [])
            blocks = []
            for i, (kind, t, _) in enumerate(laid):
                group = {"memory chunk": (), "retrieved": ("memory chunk", "retrieved")}.get(kind, ("ghost", "window"))
                seen = [j for j in range(i) if laid[j][0] in group and laid[j][1] >= t - window_s]
                blocks.append(encode(r, spans[i], [sinks, *(blocks[j] for j in seen)]))
                for layer, (key, value) in enumerate(blocks[i]):
                    torch.testing.assert_close(trained[layer][0][r:r + 1, :, spans[i]], key, atol=1e-5, rtol=0)
                    torch.testing.assert_close(trained[layer][1][r:r + 1, :, spans[i]], value, atol=1e-5, rtol=0)
                checked += 1
                if len(seen) < i:  # what the block does not see would have changed its values
                    hidden += 1
                    assert (plain[-1][1][r:r + 1, :, spans[i]] - blocks[i][-1][1]).abs().max() > 1e-4
            # positions: the answer context's without the ghosts; the ghosts just before the window
            ghost = [x for (kind, _, _), sp in zip(laid, spans) if kind == "ghost" for x in sp]
            rest = [x for x in range(int((ids[r] != batcher.pad_id).sum())) if x not in set(ghost)]
            row = ids[r, rest][None]
            grid = batch["video_grid_thw"][:1].repeat(int((row == adapter.vision_start_id).sum()), 1)
            expected, _ = model.model.get_rope_index(row, mm_token_type_ids=(row == adapter.video_pad_id).int() * 2,
                                                     video_grid_thw=grid, second_per_grid_ts=torch.ones(len(grid)))
            assert torch.equal(pos[:, r, rest], expected[:, 0])
            first_window = spans[next(i for i, (kind, _, _) in enumerate(laid) if kind == "window")][0]
            assert torch.equal(pos[:, r, ghost[-1]] + 1, pos[:, r, first_window])
    assert checked > 20 and hidden > 10


def _timeline_data(tmp_path, seed: int, **kw) -> TrainingData:
    cfg = TrainConfig(out_dir=tmp_path / "unused", n_timelines=1, minutes=kw.pop("minutes", 3.0), **kw)
    return TrainingData(cfg, np.random.default_rng(seed))


def test_earlier_turns_were_asked_earlier_with_the_answer_right_then(tmp_path):
    """Each earlier turn of a sample was asked before the sample's moment (oldest first), and its answer is the
    right answer at its own time (checked against the timeline): where the scene changed in between, it differs
    from the answer now. Timed questions and probes come without dialogue; samples mix 0, 1 and 2 turns."""
    from streamvid.synth.questions import mentions

    counts = _timeline_data(tmp_path, 6, families={"realtime_count": 1.0, "realtime_colour": 1.0},
                            turn_mix=(0.0, 0.0, 1.0), same_family_p=1.0)
    tl = counts.timelines[0]
    fps = counts.cfg.fps
    checked = differ = 0
    for _ in range(60):
        s = counts.sample(4)
        times = [t for *_, t in s["dialogue"]] + [s["t_s"]]
        assert times == sorted(times) and len(set(times)) == len(times)  # earlier, oldest first
        assert [tuple(d[:3]) for d in s["dialogue"]] == s["turns"][:-1]
        for question, answer, family, t in s["dialogue"]:
            assert abs(t * fps - round(t * fps)) < 1e-9  # on the frame grid
            objects = tl.objects_at(t)
            if family == "realtime_count":
                assert answer == str(len(objects))
                differ += answer != s["answer"] and s["family"] == "realtime_count"
            else:
                shape, _ = mentions(question)
                assert family == "realtime_colour" and shape is not None
                assert answer in {o.colour for o in objects if o.shape == shape}
            checked += 1
    assert checked >= 60 and differ >= 3

    alone = _timeline_data(tmp_path, 7, families={"backward_at_time": 1.0, "probe_edge": 1.0, "probe": 1.0},
                           turn_mix=(0.0, 0.0, 1.0))
    assert all(alone.sample(4)["dialogue"] == [] for _ in range(15))
    mixed = _timeline_data(tmp_path, 8, families={"realtime_shape": 1.0, "backward_colour": 1.0})
    sizes = [len(mixed.sample(4)["dialogue"]) for _ in range(60)]
    assert {0, 1, 2} <= set(sizes) and max(sizes) == 2


def test_the_prompt_is_the_engines_with_the_earlier_turns(tmp_path):
    """A sample's prompt tokens are the engine's `adapter.prompt(question, dialogue)` (questions and answers alone,
    no times of their own); only the answer to the question is a target, and the words taught to look at the frames
    are the question's."""
    from streamvid.checkpoints.tiny import build_tiny_checkpoint
    from streamvid.training.train_tiny import Batcher

    data = _timeline_data(tmp_path, 9, families={"realtime_colour": 1.0, "backward_shape": 1.0},
                          turn_mix=(0.0, 0.0, 1.0))
    adapter = QwenVLAdapter(str(build_tiny_checkpoint(tmp_path / "m", hidden=32, layers=2)))
    data.encode_chunks(adapter.model, adapter.video_processor)
    batcher = Batcher(adapter, data)
    tok = adapter.tokenizer
    with_turns = 0
    for _ in range(8):
        s = data.sample(3)
        dialogue = [(q, a) for q, a, _, _ in s["dialogue"]]
        earlier, prompt = batcher.prompt_ids(s)
        text = adapter.prompt(s["question"], dialogue)
        assert earlier + prompt == tok.encode(text, add_special_tokens=False)
        b = batcher.build([s])
        ids, labels = b["input_ids"][0], b["labels"][0]
        targets = labels[labels != -100].tolist()
        assert targets == tok.encode(s["answer"], add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
        question_start = len(ids) - len(prompt) - len(targets)
        assert ids[question_start:question_start + len(prompt)].tolist() == prompt
        assert all(pos >= question_start for _, pos, _ in b["word_looks"] + b["answer_looks"])
        with_turns += bool(dialogue)
    assert with_turns >= 4


def test_resume_continues_bit_exactly(tmp_path, monkeypatch):
    """Four main steps in one go, and the same run stopped after a checkpoint in the vision warm-up and again after
    the one at main step 2, each time resumed: the same float32 weights and optimizer moments at the end (block
    side on, as in a fresh retrain)."""
    from safetensors.torch import load_file

    from streamvid.training import checkpoint
    from streamvid.training.train_tiny import resume

    def config(out):
        return TrainConfig(out_dir=out, steps=4, batch=2, n_timelines=1, minutes=0.5, log_every=1, eval_every=2,
                           eval_samples=2, vision_warmup_steps=3, warmup_scenes=4, checkpoint_every_s=0.0)

    whole = train(config(tmp_path / "a"))
    save = checkpoint.save_state

    def stop_after(out, **kw):
        save(out, **kw)
        if (kw["stage"], kw["step"]) in {("warmup", 1), ("main", 2)}:
            raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save_state", stop_after)
    with pytest.raises(KeyboardInterrupt):
        train(config(tmp_path / "b"))
    assert json.loads((tmp_path / "b" / "resume" / "state.json").read_text())["stage"] == "warmup"
    with pytest.raises(KeyboardInterrupt):
        resume(tmp_path / "b")
    assert json.loads((tmp_path / "b" / "resume" / "state.json").read_text())["step"] == 2
    monkeypatch.setattr(checkpoint, "save_state", save)
    resumed = resume(tmp_path / "b")
    assert resumed["steps_done"] == whole["steps_done"] == 4
    assert [h for h in resumed["history"] if "resumed" in h] == [{"resumed": "warmup", "at_step": 1},
                                                                 {"resumed": "main", "at_step": 2}]
    a, b = (load_file(p / "resume" / "state.safetensors") for p in (tmp_path / "a", tmp_path / "b"))
    weights = [k for k in a if k.startswith(("model.", "opt."))]
    assert a.keys() == b.keys() and any(k.startswith("opt.") for k in weights)
    assert all(torch.equal(a[k], b[k]) for k in weights)
    with pytest.raises(ValueError, match="finished"):
        resume(tmp_path / "b")


def test_block_side_trains_the_merger_and_nothing_else_of_the_tower(tmp_path):
    """With the block side on, the merger makes each chunk's tokens from the frozen blocks' outputs exactly as the
    tower does, layer 0's keys of those tokens are the engine's memory rows, and training moves the merger and the
    language model but no other weight of the tower."""
    from streamvid.adapters.embedders import ModelEmbedder
    from streamvid.checkpoints.tiny import build_tiny_checkpoint
    from streamvid.training.retrieval import layer0_keys
    from streamvid.training.retrieval_recall import engine_rows
    from streamvid.types import Context

    base = build_tiny_checkpoint(tmp_path / "m", hidden=32, layers=3)  # layers 1 and 2 learn where to look
    adapter = QwenVLAdapter(str(base))
    data = _timeline_data(tmp_path, 10, minutes=0.5)
    data.encode_chunks(adapter.model, adapter.video_processor, merger_inputs=True)
    data.merger = adapter.model.model.visual.merger
    sinks = adapter.encode_text(adapter.sink_text, None)
    past = Context(sinks.keys, sinks.values, sinks.pos_span)
    grid = (1, data.cfg.frame_px // CELL_PX, data.cfg.frame_px // CELL_PX)
    with torch.no_grad():
        torch.testing.assert_close(data.all_tokens(0), data.tokens[0], atol=1e-5, rtol=1e-5)
        for c in (0, 7):
            frames = [data.frame(0, k) for k in data.chunk_frames(c)]
            encoded = adapter.encode_chunk(frames, past, 1.0, float(c))
            ours = engine_rows(layer0_keys(adapter.model, data.chunk_tokens(0, data.chunk_frames(c))), grid)
            np.testing.assert_allclose(ours, ModelEmbedder(adapter).chunk_vector(frames, encoded), atol=1e-5)

    # rounded as a trained checkpoint's weights are saved
    before = {k: v.to(torch.bfloat16).float() for k, v in adapter.model.state_dict().items()}
    out = tmp_path / "t"
    train(TrainConfig(out_dir=out, steps=2, batch=2, n_timelines=1, minutes=0.5, log_every=1, eval_samples=2,
                      init_from=base, lr=1e-2, block_side=True))
    after = QwenVLAdapter(str(out)).model.state_dict()
    merger = [k for k in before if ".visual.merger." in k or k.startswith("visual.merger.")]
    tower = [k for k in before if (".visual." in k or k.startswith("visual.")) and k not in merger]
    assert merger and tower
    assert all(not torch.equal(before[k], after[k]) for k in merger if ".mlp." in k and k.endswith("weight"))
    assert all(torch.equal(before[k], after[k]) for k in tower)
    assert any(not torch.equal(before[k], after[k]) for k in before if "language_model.layers.0.self_attn.k_proj" in k)
