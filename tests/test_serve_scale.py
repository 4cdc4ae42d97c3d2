"""`streamvid serve --ray` scaling on streams per replica, and streams resumed on another replica after their own
died. The policy alone first (no Ray); then one local 2-CPU Ray cluster on loopback that starts with one engine
replica and may add one (the tiny random checkpoint): a stream opened while every replica holds its target adds a
replica and new streams land there; a stream opened with a session_dir answers from its memory on a live replica
after the one holding it was killed; an added replica left empty is removed. The Ray part is skipped only where
ray[serve] is not installed."""

from __future__ import annotations

import httpx
import pytest
from conftest import random_frames
from serve_helpers import push_frames, ray_serve, wait_until

from streamvid.assistant import session_store
from streamvid.config import EngineConfig
from streamvid.serve.options import ServeOptions
from streamvid.serve.scaling import EmptyReplicas, ScalePolicy

MODEL_ID = "tiny-qwen"
MEMORY_Q = "What was on screen at 00:01?"  # answered from long-term memory: the window holds the last 2 s only
APP = "streamvid"


# ---- the policy -------------------------------------------------------------------------------------------------
def test_a_replica_is_wanted_only_when_every_live_one_holds_its_target():
    policy = ScalePolicy(min_replicas=1, max_replicas=3, streams_per_replica=2)
    assert policy.autoscaling
    assert policy.order({0: 2, 1: 0, 2: 1}) == [1, 2, 0]
    assert not policy.wants_replica({0: 1}, replicas=1)
    assert policy.wants_replica({0: 2}, replicas=1)
    assert not policy.wants_replica({0: 2, 1: 1}, replicas=2)  # one still below its target
    assert policy.wants_replica({0: 3, 1: 2}, replicas=2)
    assert not policy.wants_replica({0: 3, 1: 2, 2: 2}, replicas=3)  # at max_replicas
    assert not policy.wants_replica({}, replicas=1)  # nothing live to measure
    fixed = ScalePolicy(min_replicas=2)
    assert not fixed.autoscaling and fixed.max_replicas == 2 and not fixed.wants_replica({0: 9, 1: 9}, 2)
    for bad, words in (({"min_replicas": 0}, "--replicas"), ({"min_replicas": 2, "max_replicas": 1}, "--max-replicas"),
                       ({"max_replicas": 3}, "--streams-per-replica"),
                       ({"max_replicas": 3, "streams_per_replica": 0}, "--streams-per-replica"),
                       ({"scale_down_after_s": -1.0}, "--scale-down-after-s")):
        with pytest.raises(ValueError, match=words):
            ScalePolicy(**bad)


def test_only_added_replicas_empty_for_the_whole_delay_are_removable():
    empty = EmptyReplicas(ScalePolicy(min_replicas=1, max_replicas=4, streams_per_replica=1, scale_down_after_s=10))
    fixed = {0}
    assert empty.removable({0: 0, 1: 0, 2: 1}, fixed, now=0.0) == []
    assert empty.removable({0: 0, 1: 0, 2: 0}, fixed, now=9.0) == []
    assert empty.removable({0: 0, 1: 0, 2: 0}, fixed, now=10.0) == [1]  # never the fixed replica 0
    assert empty.removable({0: 0, 1: 1, 2: 0}, fixed, now=19.0) == [2]  # 1 took a stream: its clock is gone
    assert empty.removable({0: 0, 2: 0, 3: 0}, fixed, now=25.0) == [2]  # 1 did not answer: not empty either
    empty.forget(2)
    assert empty.removable({0: 0, 1: 0, 3: 0}, fixed, now=26.0) == []  # 1 starts over; 3 since 25
    assert empty.removable({0: 0, 1: 0, 3: 0}, fixed, now=35.0) == [3]
    assert empty.removable({0: 0, 1: 0, 3: 0}, fixed, now=36.0) == [1, 3]


@pytest.mark.parametrize(("argv", "words"), [
    (["--max-replicas", "4", "--streams-per-replica", "2"], "are for --ray"),
    (["--ray", "--streams-per-replica", "2"], "--streams-per-replica needs --max-replicas above --replicas (2)"),
    (["--ray", "--replicas", "3", "--max-replicas", "4"], "needs --streams-per-replica"),
    (["--ray", "--min-replicas", "3", "--max-replicas", "2", "--streams-per-replica", "1"], "--streams-per-replica"),
    (["--ray", "--replicas", "1", "--max-replicas", "2", "--streams-per-replica", "1", "--scale-down-after-s", "-1"],
     "--scale-down-after-s"),
    (["--session-save-s", "-1"], "--session-save-s must be a number of seconds >= 0"),
    (["--stream-idle-timeout-s", "nan"], "--stream-idle-timeout-s must be a number of seconds >= 0"),
])
def test_scaling_session_and_idle_flags_are_checked_before_anything_starts(argv, words, capsys):
    from streamvid.cli.main import main

    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err, err


# ---- on Ray Serve -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    return tmp_path_factory.mktemp("sessions")


@pytest.fixture(scope="module")
def config(tiny_model_dir) -> EngineConfig:
    return EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=8, window_s=2.0, device="cpu")


@pytest.fixture(scope="module")
def cluster(config, sessions):
    """One engine replica to start with; a second one added when a stream opens while every replica holds 1,
    removed once it has held no stream for 2 s."""
    pytest.importorskip("ray.serve", reason="needs ray[serve] (pip install -e '.[test]')")
    options = ServeOptions(model_id=MODEL_ID, max_new_tokens=8, answer_timeout_s=60.0, heartbeat_s=1.0,
                           allow_dirs=(str(sessions),), session_save_s=0.3)
    with ray_serve(config, options, APP, replicas=1, max_replicas=2, streams_per_replica=1, scale_down_after_s=2.0,
                   cpus_per_replica=1.0, threads=1) as url:
        yield url


@pytest.fixture(scope="module")
def http(cluster):
    with httpx.Client(base_url=cluster, timeout=120.0) as client:
        yield client


@pytest.fixture(scope="module")
def streams():
    """What the tests below share: the streams they opened, by name."""
    return {}


def ask(base: str, sid: str, question: str = MEMORY_Q):
    import openai

    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=120.0)
    reply = client.chat.completions.create(model=MODEL_ID, extra_body={"stream_id": sid},
                                           messages=[{"role": "user", "content": question}])
    return reply.choices[0].message.content, reply.model_extra["streamvid"]


def apps() -> dict:
    from ray import serve

    return {name: str(getattr(a.status, "value", a.status)) for name, a in serve.status().applications.items()}


def open_stream(http: httpx.Client, **body) -> str:
    r = http.post("/v1/streams", json={"source": "push", **body})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_a_replica_is_added_when_every_replica_holds_its_target(cluster, http, streams, sessions):
    streams["saved"] = open_stream(http, session_dir=str(sessions / "cam1"))
    assert streams["saved"].startswith("r0.") and APP + "-engine1" not in apps()
    streams["second"] = open_stream(http)  # r0 holds its 1: a replica is added; this one does not wait for it
    assert streams["second"].startswith("r0.")
    wait_until(lambda: apps().get(APP + "-engine1") == "RUNNING", timeout_s=180, what="the added replica")

    def opened_on_r1():  # (the ingress takes the new replica on once it runs: a moment after Ray Serve says so)
        sid = open_stream(http)
        if sid.startswith("r1."):
            return sid
        http.delete(f"/v1/streams/{sid}")
        return None

    streams["third"] = wait_until(opened_on_r1, timeout_s=30, what="a new stream on the least loaded replica, r1")
    assert {s["id"] for s in http.get("/v1/streams").json()["data"]} == set(streams.values())


def test_a_stream_is_resumed_on_a_live_replica_after_its_own_died(cluster, http, streams, sessions):
    import ray

    saved, lost = streams["saved"], streams["second"]
    push_frames(http, saved, random_frames(8, seed=21))
    first, extra = ask(cluster, saved)
    assert extra["retrieved_blocks"]  # from long-term memory
    before = http.get(f"/v1/streams/{saved}").json()
    n = before["session"]["saves"]
    wait_until(lambda: http.get(f"/v1/streams/{saved}").json()["session"]["saves"] >= n + 2,
               what="a periodic save begun after the answer")
    (replica,) = [r for r in ray.util.list_named_actors(all_namespaces=True)
                  if r["name"].startswith(f"SERVE_REPLICA::{APP}#engine0#")]
    ray.kill(ray.get_actor(replica["name"], namespace=replica["namespace"]), no_restart=True)

    dead = http.get(f"/v1/streams/{saved}")
    assert dead.status_code == 503, dead.text
    message = dead.json()["error"]["message"]
    assert "died or" in message and "can be resumed" in message and '"resume": true' in message, message
    gone = http.get(f"/v1/streams/{lost}").json()["error"]["message"]
    assert "lost" in gone and "resume" not in gone, gone  # opened without a session_dir

    r = http.post("/v1/streams", json={"session_dir": str(sessions / "cam1"), "resume": True})
    assert r.status_code == 201, r.text
    resumed = streams["resumed"] = r.json()["id"]
    assert resumed.split("-")[0] != saved.split("-")[0]  # another replica (or a new incarnation of r0)
    status = http.get(f"/v1/streams/{resumed}").json()
    assert status["session"]["resumed"] and status["blocks_in_memory"] == before["blocks_in_memory"]
    again, extra_again = ask(cluster, resumed)
    assert again == first and extra_again["t_s"] == status["t_s"]
    assert extra_again["retrieved_blocks"] == extra["retrieved_blocks"]  # the blocks pushed before the kill
    assert extra_again["evidence_t_s"] == extra["evidence_t_s"]
    final = http.delete(f"/v1/streams/{resumed}").json()
    assert final["session"]["error"] is None
    assert session_store.read_meta(sessions / "cam1")["dialogue"] == [[MEMORY_Q, first], [MEMORY_Q, again]]


def test_an_added_replica_left_without_streams_is_removed(cluster, http, streams):
    for sid in http.get("/v1/streams").json()["data"]:
        http.delete(f"/v1/streams/{sid['id']}")
    wait_until(lambda: APP + "-engine1" not in apps(), timeout_s=120, what="the empty added replica's removal")
    assert apps()[APP] == "RUNNING"  # with replica r0, which stays
    assert http.get(f"/v1/streams/{streams['third']}").status_code == 404
    r = wait_until(lambda: (r := http.post("/v1/streams", json={"source": "push"})).status_code == 201 and r,
                   timeout_s=120, what="a stream on r0 again")
    assert r.json()["id"].startswith("r0.")
