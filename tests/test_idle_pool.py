"""The sound and speech pools (audio/recognition.IdlePool): a job never waits behind another while the pool may
still start a thread for it, and threads end when idle."""

from __future__ import annotations

import threading

from streamvid.audio.recognition import IdlePool


def test_a_job_submitted_beside_a_long_one_gets_a_thread_of_its_own():
    """The speech route's pattern: a quick job (loading the voice) runs, its thread goes idle, then a long job (a
    synthesis) and another quick one are submitted at once. The quick one must not wait for the long one: the idle
    thread takes one of them and a second thread the other. (Counting idle threads alone once let the second wait
    behind the first, the idle thread being about to take it.)"""
    for _ in range(20):  # the old rule failed most rounds; the new one never may
        pool = IdlePool(2, "test-pool")
        pool.submit(lambda: None).result(timeout=10)  # a thread now idle
        release = threading.Event()
        long = pool.submit(release.wait, 30)
        quick = pool.submit(lambda: "done")
        try:
            assert quick.result(timeout=10) == "done"
        finally:
            release.set()
        assert long.result(timeout=10) is True


def test_at_most_threads_jobs_run_at_once():
    pool = IdlePool(2, "test-pool")
    release, inside, most, lock = threading.Event(), [0], [0], threading.Lock()

    def job():
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        release.wait(30)
        with lock:
            inside[0] -= 1

    jobs = [pool.submit(job) for _ in range(6)]
    for _ in range(200):
        with lock:
            if inside[0] == 2:
                break
        threading.Event().wait(0.02)
    release.set()
    for j in jobs:
        j.result(timeout=30)
    assert most[0] == 2
