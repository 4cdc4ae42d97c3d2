"""Benchmark prompt templates render as the benchmarks' own code words them."""

from __future__ import annotations

import pytest

from streamvid.eval.prompts import native_text, poll_text, render

Q = {"id": "q0", "kind": "user_query", "t": 3.0, "text": "What is on the table?",
     "options": ["A. A cup.", "B. A book.", "C. A phone.", "D. Nothing.", "E. Translated with DeepL"]}


def test_native_is_the_question_with_its_options():
    assert native_text(Q) == ("What is on the table?\nA. A cup.\nB. A book.\nC. A phone.\nD. Nothing.\n"
                              "E. Translated with DeepL")
    assert render({**Q, "prompt": None}) == native_text(Q)


def test_ovo_bench_options_joined_with_semicolons():
    text = render({**Q, "options": Q["options"][:4], "prompt": "ovo-bench"})
    assert text == ("\nQuestion: What is on the table?\nOptions:\nA. A cup.; B. A book.; C. A phone.; D. Nothing.;\n\n"
                    "Respond only with the letter corresponding to your chosen option (e.g., A, B, C). \n"
                    "Do not include any additional text or explanation in your response.\n")
    ssr = render({"id": "q1", "text": "boil water", "prompt": "ovo-bench-ssr"})
    assert "from the whole procedures: \nboil water\nYour task is to determine" in ssr


def test_streamingbench_shows_four_options_and_the_sqa_history():
    text = render({**Q, "prompt": "streamingbench"})
    assert text.endswith("Question: What is on the table?\n\nOptions:\nA. A cup.\nB. A book.\nC. A phone.\nD. Nothing."
                         "\n\nThe best option is:")
    first = {**Q, "id": "q0", "prompt": "streamingbench-sqa"}
    ctx = {"id": "c0", "kind": "context", "t": 3.0, "text": "At timestamp 00:00:03, ...; Answer: B; "}
    second = {**Q, "id": "q1", "t": 5.0, "text": "And now?", "prompt": "streamingbench-sqa"}
    events = [first, ctx, second]
    assert "contextual information" not in render(first, events)
    assert ("Please answer the questions based on the contextual information: At timestamp 00:00:03, ...; Answer: B; "
            "\n\nHere is the question.") in render(second, events)


def test_poll_and_unknown_template():
    poll = poll_text({"text": 'When X, output "3".', "gold_output": "3"})
    assert 'Question: When X, output "3". Is it the right time to output "3"? You can only answer yes or no.' in poll
    assert render({"id": "q", "text": "Where?", "prompt": "rvs"}) == (
        "Answer the following open-ended question based on the video. Where?")
    with pytest.raises(ValueError, match="unknown prompt template 'nope' on event 'q'"):
        render({"id": "q", "text": "x", "prompt": "nope"})
