"""The question text a model sees for a stream-episode query: each benchmark's own prompt template.

A `user_query` names its template in `prompt` (set by the converter); without one the question is followed by
its options, one per line. The wording follows the benchmarks' code, cited per template:

* ovo-bench, ovo-bench-rec/-ssr/-crr — JoeLeelyf/OVO-Bench `constant.py` (BR_PROMPT_TEMPLATE and the forward
  templates) with options joined as in `utils/OVOBench.py` ("A. x; B. y;").
* streamingbench, streamingbench-sqa, streamingbench-proactive — THUNLP-MT/StreamingBench
  `src/benchmark/StreamingBench.py`, `StreamingBenchSQA.py`, `StreamingBenchProactive.py` (the first four
  options, one per line; "The best option is:"; the SQA history; the proactive polling question).
* rvs — IVGSZ/Flash-VStream `Flash-VStream-Qwen/inference_mcq_vqa.py` (open-ended prefix).
* proactivevideoqa, svbench — the question as it is.

`native_text` is what `--mode native` asks: the bare question (with its options), as a user would type it, so
that "tell me when ..." requests still become triggers.
"""

from __future__ import annotations

_OVO_MC = ("\nQuestion: {question}\nOptions:\n{options}\n\nRespond only with the letter corresponding to your "
           "chosen option (e.g., A, B, C). \nDo not include any additional text or explanation in your response.\n")
_OVO_REC = ("\nYou're watching a video in which people may perform a certain type of action repetively. \n"
            "The person performing this kind of action are referred to as 'they' in the following statement.\n"
            "You're task is to count how many times have different people in the video perform this kind of "
            "action in total.\nOne complete motion counts as one. \nNow, answer the following question: {question}\n"
            "Provide your answer as a single number (e.g., 0, 1, 2, 3…) indicating the total count.\n"
            "Do not include any additional text or explanation in your response.\n")
_OVO_SSR = ("\nYou're watching a tutorial video which contain a sequential of steps. \nThe following is one step "
            "from the whole procedures: \n{question}\nYour task is to determine if the man or woman in the video is "
            "currently performing this step.\nAnswer only with “Yes” or “No”.\nDo not include any additional "
            "text or explanation in your response.\n")
_OVO_CRR = ("\nYou're responsible of answering questions based on the video content. \nThe following question are "
            "relevant to the latest frames, i.e. the end of the video.\n{question}\nDecide whether existing visual "
            "content, especially latest frames, i.e. frames that near the end of the video, provide enough "
            "information for answering the question.\nAnswer only with “Yes” or “No”.\nDo not include any "
            "additional text or explanation in your response.\n")
_SB_MC = ("You are an advanced video question-answering AI assistant. You have been provided with some frames from "
          "the video and a multiple-choice question related to the video. Your task is to carefully analyze the "
          "video and provide the best answer to question, choosing from the four options provided. Respond with "
          "only the letter (A, B, C, or D) of the correct option.\n\nQuestion: {question}\n\nOptions:\n{options}"
          "\n\nThe best option is:")
_SB_SQA = ("You are an advanced video question-answering AI assistant. You have been provided with a video and a "
           "multiple-choice question related to the video. Your task is to carefully analyze the video and the "
           "provided context to answer the question, choosing from the four options provided. Respond with only "
           "the letter (A, B, C, or D) of the correct option.\n\n{context}\n\nHere is the question. Answer it and "
           "don't confuse it with the previous conversation.\nQuestion: {question}\n\nOptions:\n{options}\n\n"
           "The best option is:")
_SB_SQA_LEAD = ("Here are the contextual information related to the video. Please answer the questions based on the "
                "contextual information: ")
_SB_PROACTIVE = ("You are an advanced image question-answering AI assistant. You have been provided with images and "
                 "a question related to the images. Your task is to carefully analyze the images and provide the "
                 "answer to the question. You need to carefully confirm whether the images content meet the "
                 "conditions of the question, and then output the correct content.\n\nQuestion: {question}\n\n"
                 "The answer is:\n")
_RVS = "Answer the following open-ended question based on the video. {question}"

TEMPLATES = ("ovo-bench", "ovo-bench-rec", "ovo-bench-ssr", "ovo-bench-crr", "streamingbench", "streamingbench-sqa",
             "streamingbench-proactive", "rvs", "proactivevideoqa", "svbench")


def native_text(event: dict) -> str:
    return "\n".join([event["text"], *(event.get("options") or [])])


def render(event: dict, events: list[dict] | None = None) -> str:
    """The benchmark prompt for a user_query; `events` (the episode's, in order) supplies the SQA history: the
    context events listed before this query."""
    name = event.get("prompt")
    q, options = event["text"], event.get("options") or []
    if name is None:
        return native_text(event)
    if name not in TEMPLATES:
        raise ValueError(f"unknown prompt template {name!r} on event {event.get('id')!r}; "
                         f"known: {', '.join(TEMPLATES)}")
    if name == "ovo-bench":
        return _OVO_MC.format(question=q, options="; ".join(options) + ";")
    if name == "ovo-bench-rec":
        return _OVO_REC.format(question=q)
    if name == "ovo-bench-ssr":
        return _OVO_SSR.format(question=q)
    if name == "ovo-bench-crr":
        return _OVO_CRR.format(question=q)
    if name == "streamingbench":
        return _SB_MC.format(question=q, options="\n".join(options[:4]))
    if name == "streamingbench-sqa":
        history = []
        for e in events or []:
            if e is event:
                break
            if e.get("kind") == "context":
                history.append(e["text"])
        context = _SB_SQA_LEAD + "".join(history) if history else ""
        return _SB_SQA.format(context=context, question=q, options="\n".join(options[:4]))
    if name == "streamingbench-proactive":
        return _SB_PROACTIVE.format(question=q)
    if name == "rvs":
        return _RVS.format(question=q)
    return q


def poll_text(event: dict) -> str:
    """StreamingBench's proactive polling question ("Is it the right time to output ...?")."""
    return _SB_PROACTIVE.format(question=f"{event['text']} Is it the right time to output "
                                         f"\"{event['gold_output']}\"? You can only answer yes or no.")
