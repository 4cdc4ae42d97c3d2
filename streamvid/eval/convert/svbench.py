"""SVBench (per-video QA-chain files) to stream episodes.

Source read: yzy-bupt/SVBench — `construct_data/construct_QA_chain.py` (a chain of 5-6 questions per scene,
GPT output {"questions": [...], "answers": [...]}, scene times in seconds), `construct_data/
process_QA_chain_format.py` (the annotation format: one JSON file per video, `<video name>.json`, a list of
{`images`, `chain`: {`questions`, `answers`}, `qac_timestamps_start`, `qac_timestamps_end`}, with `{}` where a
scene got no chain), `evaluation/eval_chainQA_gpt4_gpt4o.py` and `evaluation/eval_ConQA_gpt4_gpt4o.py` (the
per-video answer files and the GPT-4 judge over dialogue and streaming chains), README (videos as
`<video name>.mp4`).

Mapping: every question of a chain is a `user_query` at the end of its scene (`qac_timestamps_end`: the scene
has been seen), in chain order, with an `expected_answer` {"text": answer} scored "substring"; `chain` and
`turn` say where it sits. A later question in a chain builds on the earlier answers (a dialogue): the episode's
`protocol.dialogue_turns` asks the scorer to keep the chain's earlier turns as dialogue context. The official
scores (semantic accuracy, coherence, ... 0-10 from a GPT-4 judge, and the streaming links between chains)
need a judge model and are not reproduced; the report says that open-ended answers are scored by substring
only. Empty scenes (`{}`) are skipped.

Episodes: one per file (video), `video.path` = --videos / `<file stem>.mp4`.
"""

from __future__ import annotations

from pathlib import Path

from .common import EpisodeBuilder, read_json, records, video_under

DIALOGUE_TURNS = 6  # a chain has 5-6 questions: keep the whole chain as context


def convert(files: list[str | Path], videos_dir: str | Path) -> list[dict]:
    episodes = []
    for f in files:
        path = Path(f)
        ep = EpisodeBuilder("svbench", path.stem, video_under(videos_dir, f"{path.stem}.mp4"), orig_id=path.stem,
                            task="qa-chain", protocol={"context": "prefix", "context_window_s": None,
                                                       "decision_hz": None, "dialogue_turns": DIALOGUE_TURNS})
        for n, rec in enumerate(records(read_json(path), path.name, where="scene")):
            rec.check_object()
            if not rec.data:
                continue
            start, end = rec.time("qac_timestamps_start"), rec.time("qac_timestamps_end")
            if start > end:
                raise rec.fail("qac_timestamps_start", f"expected start <= end ({end:g}), got {start:g}")
            chain = rec.get("chain", dict)
            qs, ans = chain.get("questions"), chain.get("answers")
            if not isinstance(qs, list) or not qs or not all(isinstance(q, str) and q.strip() for q in qs):
                raise rec.fail("chain", "expected 'questions': a non-empty list of texts")
            if not isinstance(ans, list) or len(ans) != len(qs) or not all(isinstance(a, str) for a in ans):
                raise rec.fail("chain", f"expected 'answers': {len(qs)} texts, one per question, "
                                        f"got {ans if not isinstance(ans, list) else len(ans)}")
            for turn, (q, a) in enumerate(zip(qs, ans, strict=True)):
                qid = ep.query(end, q, task="qa-chain", category="svbench", prompt="svbench", chain=n, turn=turn,
                               scene=[round(start, 3), round(end, 3)])
                ep.answer(qid, {"text": a}, "substring")
        if ep.events:
            episodes.append(ep.build())
    return episodes
