"""`streamvid score --ray`: episodes as Ray tasks on a local 2-worker CPU cluster give the local run's report.

Ray is in the test extras (pip install -e ".[test]"): a missing Ray fails here rather than skipping."""

from __future__ import annotations

import json

import pytest
import ray
from test_replay import replay_episode, grey_video  # noqa: F401  (the module's video fixture)

from streamvid.config import EngineConfig
from streamvid.eval.batch import score_files


@pytest.mark.slow  # starting a local Ray cluster takes a while
def test_ray_local_cluster_matches_local_run(grey_video, tiny_model_dir, tmp_path):  # noqa: F811
    eps = tmp_path / "eps.jsonl"
    eps.write_text("".join(json.dumps(replay_episode(grey_video, f"e{i}")) + "\n" for i in range(3)))
    cfg = EngineConfig.from_settings(model=str(tiny_model_dir), fps=2.0, max_new_tokens=3)
    local = score_files([eps], cfg, tmp_path / "local", mode="replay", plots=False)
    on_ray = score_files([eps], cfg, tmp_path / "ray", mode="replay", plots=False, ray="local", ray_workers=2)

    def timing_free(path):
        keep = ("run", "answer", "probe", "alert")
        return [{k: v for k, v in r.items() if k not in ("ttft_ms", "tokens_per_s")}
                for r in map(json.loads, path.read_text().splitlines()) if r["type"] in keep]

    assert timing_free(tmp_path / "ray" / "trace.jsonl") == timing_free(tmp_path / "local" / "trace.jsonl")
    drop = ("system", "ttft_ms_median")
    assert {k: v for k, v in on_ray.items() if k not in drop} == {k: v for k, v in local.items() if k not in drop}
    assert on_ray["n"] == 6 and not ray.is_initialized()  # the local cluster was shut down
