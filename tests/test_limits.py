"""What one request may cost the engine: token caps on questions, dialogues and watch conditions, watches per
stream, and the per-step token budget with chunked prefill (a long prompt fed over several steps gives the same
answer as one forward, and as HF `generate`; other streams' answers go on meanwhile). Tiny random checkpoint."""

from __future__ import annotations

import httpx
import pytest
import torch

from conftest import random_frames
from serve_helpers import running
from streamvid.adapters.batching import Decoding
from streamvid.config import EngineConfig
from streamvid.engine.engine import Engine
from streamvid.engine.step_budget import shares
from streamvid.serve import ServeOptions, build_app
from streamvid.types import Answer, Context, Frame

EMOJI = "\U0001F600"


@pytest.fixture(scope="module")
def config(tiny_model_dir) -> EngineConfig:
    return EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=6, memory_top_k=0)


def tokens_of(adapter, text: str) -> int:
    """An independent count: the tokenizer's ids of the templated prompt."""
    return len(adapter.tokenizer.encode(adapter.prompt(text), add_special_tokens=False))


def feed(stream, n: int, seed: int = 0) -> None:
    for i, image in enumerate(random_frames(n, seed=seed)):
        stream.insert(Frame(image, i / 2, i))


# ---- caps ---------------------------------------------------------------------------------------------------------
def test_a_question_over_the_token_cap_is_refused_in_one_line_naming_the_cap(config, adapter):
    engine = Engine(config.replace(max_question_tokens=64), adapter)
    try:
        s = engine.open()
        question = EMOJI * 40  # 40 characters, far under the character cap, but several tokens each
        n = tokens_of(adapter, question)
        assert n > 64
        with pytest.raises(ValueError) as e:
            s.ask(question)
        assert str(e.value) == (f"question too long: {n} tokens, at most 64 (--max-question-tokens); make it "
                                f"shorter")
        assert s.questions_waiting == 0
        assert s.ask("What colour is it?") == "q0"  # the stream goes on
    finally:
        engine.close()


def test_a_watch_over_the_condition_cap_and_one_watch_too_many_are_refused(config, adapter):
    engine = Engine(config.replace(max_condition_tokens=40, max_watches=2), adapter)
    try:
        s = engine.open()
        with pytest.raises(ValueError, match=r"^condition too long: \d+ tokens, at most 40 "
                                             r"\(--max-condition-tokens\); make it shorter$"):
            s.watch("a red circle " + EMOJI * 30)
        with pytest.raises(ValueError, match="condition too long"):  # "tell me when" questions are watches too
            s.ask("Tell me when a red circle " + EMOJI * 30 + " appears.")
        assert s.watch("a red circle") == "w0"
        s.ask("Tell me when a blue square appears.")
        engine.run_until_idle()  # the question becomes a trigger
        assert len(s.reasoning.triggers) == 2
        with pytest.raises(ValueError, match=r"^this stream watches 2 conditions, at most 2 \(--max-watches\)"):
            s.watch("a green star")
        with pytest.raises(ValueError, match="--max-watches"):
            s.ask("Tell me when a green star appears.")
        assert s.unwatch("w0")
        assert s.watch("a green star") == "w1"
    finally:
        engine.close()


def test_a_dialogue_over_its_token_cap_loses_its_oldest_turns_and_says_so(config, adapter):
    long_turn = ("What do you see? " * 20, "A red circle. " * 20)
    short_turn = ("And now?", "A blue square.")
    cost = len(adapter.tokenizer.encode(adapter.prompt("Is it red?", [short_turn]), add_special_tokens=False)) \
        - tokens_of(adapter, "Is it red?")
    engine = Engine(config.replace(max_dialogue_tokens=cost, dialogue_turns=2), adapter)
    try:
        s = engine.open()
        feed(s, 4)
        s.ask("Is it red?", dialogue=[long_turn, short_turn])
        s.ask("Is it red?", dialogue=[short_turn])
        engine.run_until_idle()
        answers = []
        while not s.outputs.empty():
            out = s.outputs.get_nowait()
            if isinstance(out, Answer):
                answers.append(out)
        assert [a.to_json().get("dialogue_turns_dropped") for a in answers] == [1, None]
        assert answers[0].text == answers[1].text  # the same prompt once the long turn is dropped
    finally:
        engine.close()


def test_a_narration_prompt_over_the_question_cap_is_refused_when_the_stream_opens(config, adapter):
    engine = Engine(config, adapter)
    try:
        with pytest.raises(ValueError, match="narration prompt too long"):
            engine.open(config.replace(narrate=True, narrate_prompt="Describe " * 200, max_question_tokens=64))
    finally:
        engine.close()


def test_the_api_refuses_an_over_cap_question_with_a_400_and_shows_the_caps(config, adapter):
    engine = Engine(config.replace(max_question_tokens=64), adapter)
    app = build_app(engine, ServeOptions(model_id="tiny", max_new_tokens=6))
    try:
        with running(app) as url, httpx.Client(base_url=url, timeout=60.0) as http:
            sid = http.post("/v1/streams", json={"source": "push", "fps": 2.0}).json()["id"]
            r = http.post("/v1/chat/completions", json={"model": "tiny", "stream_id": sid,
                                                        "messages": [{"role": "user", "content": EMOJI * 40}]})
            assert r.status_code == 400
            message = r.json()["error"]["message"]
            assert "\n" not in message and "at most 64 (--max-question-tokens)" in message
            limits = http.get(f"/v1/streams/{sid}").json()["limits"]
            assert limits == {"max_question_tokens": 64, "max_dialogue_tokens": 2048, "max_condition_tokens": 128,
                              "max_watches": 32, "step_tokens": engine.step_tokens}
    finally:
        engine.close()


# ---- chunked prefill ----------------------------------------------------------------------------------------------
def context_of(adapter, text: str) -> tuple[Context, list[int]]:
    """A text context (sinks + `text`) and its token ids."""
    ids = adapter.token_ids(adapter.sink_text + text)[0].tolist()
    enc = adapter.encode_text(adapter.sink_text + text, None)
    return Context(enc.keys, enc.values, enc.pos_span), ids


def step_until_prefilled(adapter, decodings: list[Decoding], limits: list[int | None]) -> int:
    """`decode` the decodings together, each prompt fed at most its limit per step, until every prompt is fed and
    has given its first token; the number of steps."""
    steps = 0
    while any(d.prefill_left or not d.tokens for d in decodings):
        for d, limit in zip(decodings, limits):
            d.prefill_limit = limit
        adapter.decode(decodings)
        steps += 1
    return steps


def run_to_end(adapter, decodings: list[Decoding]) -> None:
    while not all(d.done for d in decodings):
        adapter.decode(decodings)


def assert_same_kv(a: Context, b_keys, b_values, next_pos: int) -> None:
    assert a.next_pos == next_pos
    for k, v, rk, rv in zip(a.keys, a.values, b_keys, b_values):
        assert k.shape == rk.shape
        assert torch.allclose(k, rk, atol=1e-4) and torch.allclose(v, rv, atol=1e-4)


@pytest.mark.parametrize("limit", [1, 7, 64])
def test_a_prompt_prefilled_in_pieces_answers_as_one_forward_and_as_hf_generate(adapter, limit):
    context, context_ids = context_of(adapter, "A long preamble about shapes and colours. " * 6)
    prompt = adapter.prompt("What colour was the circle, and where did it go after it left the square? " * 3)
    prompt_ids = adapter.token_ids(prompt)[0].tolist()
    assert len(prompt_ids) > 64
    pieces = Decoding(adapter, context, prompt_ids, 8)
    steps = step_until_prefilled(adapter, [pieces], [limit])
    assert steps == -(-len(prompt_ids) // limit)  # the prompt took that many forwards, the last gave a token
    # HF's own forward over the same tokens from an empty cache (text only: positions are HF's own arange)
    ids = torch.tensor([context_ids + prompt_ids])
    with torch.inference_mode():
        ref = adapter.model(input_ids=ids, use_cache=True)
    n = ids.shape[1]
    assert_same_kv(pieces.own_kv(), [layer.keys for layer in ref.cache.layers],
                   [layer.values for layer in ref.cache.layers], n)
    assert pieces.tokens == [int(ref.logits[0, -1].argmax())]
    run_to_end(adapter, [pieces])
    whole = list(adapter.generate_ids(context, prompt, 8))  # the unsplit path
    with torch.inference_mode():
        out = adapter.model.generate(input_ids=ids, max_new_tokens=8, do_sample=False)
    hf = out[0, n:].tolist()
    stop = next((i for i, t in enumerate(hf) if t in adapter.stop_ids), len(hf))
    assert pieces.tokens == whole == hf[:stop]


def test_prefilling_rows_and_decoding_rows_in_one_batch_each_answer_as_alone(adapter):
    rows = [context_of(adapter, f"Scene {i}: " + "a red circle, a blue square. " * (i + 1))[0] for i in range(3)]
    # prompts that end on different tokens (a tiny random model's next token follows the last one it saw)
    texts = ("What is red", "Which shapes were there, in order, and what colours? " * 4 + "circle", "Count them!")
    prompts = [adapter.token_ids(t)[0].tolist() for t in texts]
    alone = [Decoding(adapter, c, p, 6) for c, p in zip(rows, prompts)]
    for d in alone:
        adapter.decode([d])  # the whole prompt in one forward
    together = [Decoding(adapter, c, p, 6) for c, p in zip(rows, prompts)]
    checked = set()
    while len(checked) < len(together):  # each row's K/V when its prompt is all in, as its prompt fed alone
        for d, limit in zip(together, [None, 5, 2]):
            d.prefill_limit = limit
        adapter.decode(together)
        for i, (d, ref) in enumerate(zip(together, alone)):
            if i not in checked and d.tokens:
                kv = ref.own_kv()
                assert_same_kv(d.own_kv(), kv.keys, kv.values, kv.next_pos)
                checked.add(i)
    run_to_end(adapter, together)
    run_to_end(adapter, alone)
    assert [d.tokens for d in together] == [d.tokens for d in alone]
    assert len({tuple(d.tokens) for d in alone}) > 1  # rows that differ, so a mix-up would show


def test_shares_split_the_budget_equally_and_give_what_one_does_not_need_to_the_others():
    assert shares([1000, 1000], 512) == [256, 256]
    assert shares([10, 1000, 1000], 512) == [10, 251, 251]
    assert shares([5], 0) == [1]  # always progress
    assert sum(shares([300, 40, 7], 100)) <= 100
    assert shares([], 100) == []


def test_a_long_prompt_is_prefilled_over_steps_while_another_stream_answers(config, adapter):
    engine = Engine(config.replace(step_tokens=24, max_new_tokens=4), adapter)
    try:
        a, b = engine.open(), engine.open()
        feed(a, 2, seed=1)
        feed(b, 2, seed=2)
        engine.run_until_idle()
        long_question = "Which shapes were on screen, and what colour was each of them? " * 6
        assert tokens_of(adapter, long_question) > 3 * 24
        a.ask(long_question)
        b.ask("What colour?")
        order = []
        for _ in range(200):
            if not engine.step():
                break
            for s, name in ((a, "a"), (b, "b")):
                while not s.outputs.empty():
                    out = s.outputs.get_nowait()
                    if isinstance(out, Answer):
                        order.append(name)
        assert order == ["b", "a"]  # b's short question was answered while a's prompt was still being fed
        assert engine.forwards["prefill"] >= 3
    finally:
        engine.close()
