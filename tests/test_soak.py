"""Soak: a simulated 3-hour stream at full speed through the threaded session (tiny random model, synthetic
frames): host RSS stays flat once memory reaches its caps, RAM and disk of long-term memory stay within them,
threads and file descriptors do not leak, the spill folder is removed on stop, and the stats count the blocks
spilled and dropped."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time

import numpy as np

from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.media.synthetic_source import SyntheticSource

STREAM_S = 3 * 3600.0
FPS = 1.0  # one chunk of 2 frames per 2 s of stream: 5,400 chunks (about 9 KB of KV each) in 3 hours
RAM_MB, DISK_MB = 2.0, 6.0
ASK_EVERY_S = 600.0


def _rss_mb() -> float:
    """Resident memory after handing the allocator's free pages back to the system, so that it measures what is
    still in use rather than where glibc's arenas happened to peak (a plateau of freed pages is not a leak)."""
    libc = ctypes.util.find_library("c")
    if libc:
        ctypes.CDLL(libc).malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _new_threads(before: set[threading.Thread]) -> list[str]:
    """Threads alive now that were not before (those of earlier tests may end meanwhile: they are not counted)."""
    return [t.name for t in threading.enumerate() if t not in before]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _fd_targets() -> dict[str, str]:
    """What each open descriptor points at (for a failure message)."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            pass
    return out


def test_three_hours_at_full_speed_stay_within_caps(adapter, tmp_path):
    n_frames = int(STREAM_S * FPS)
    palette = np.random.default_rng(0).integers(0, 256, (64, 56, 56, 3), dtype=np.uint8)
    source = SyntheticSource(lambda i, t: palette[(i * 7 + i // 5) % 64], fps=FPS, n_frames=n_frames)
    cfg = EngineConfig.from_settings(model="unused", fps=FPS, window_tokens=60, max_new_tokens=2, memory_ram_mb=RAM_MB,
                       memory_disk_mb=DISK_MB, memory_dir=str(tmp_path / "spill"), question_queue_size=4)
    threads0, fds0, fd_targets0 = set(threading.enumerate()), _fds(), _fd_targets()
    sa = StreamingAssistant(cfg, adapter=adapter)
    spill_dir = sa.memory.disk_dir
    sa.start(source)
    samples: list[tuple[float, float, int, int]] = []  # (stream s, rss MB, fds, threads)
    next_ask_s, asked, answered = ASK_EVERY_S, 0, 0
    t0 = time.monotonic()
    while not sa.ingest_done.is_set() or answered < asked:
        now_s = sa.ingest.latest_t_s
        if now_s >= next_ask_s and not sa.ingest_done.is_set():
            sa.ask(f"What was on screen at {int(now_s - 1800) // 60:02d}:{int(now_s - 1800) % 60:02d}?"
                   if now_s > 1800 else "What is on screen?")
            asked += 1
            next_ask_s += ASK_EVERY_S
            samples.append((now_s, _rss_mb(), _fds(), threading.active_count()))
        answered += sum(out.kind == "answer" for out in sa.outputs(timeout_s=0.05))
        assert time.monotonic() - t0 < 1800, "the soak did not finish in 30 minutes"
    sa.memory.flush()  # RAM may run past its cap until the spill thread catches up (add waits at twice the cap)
    stats = sa.stats()
    sa.stop()
    wall_s = time.monotonic() - t0

    assert stats["frames_in"] == n_frames and stats["frames_dropped"] == 0
    assert stats["memory_ram_mb"] <= RAM_MB and stats["memory_disk_mb"] <= DISK_MB
    assert stats["blocks_on_disk"] > 0 and stats["memory_dropped"] > 0, "both caps were reached"
    assert stats["blocks_in_memory"] == stats["blocks_in_ram"] + stats["blocks_on_disk"]
    assert stats["blocks_encoded"] == stats["blocks_in_window"] + stats["blocks_in_memory"] + stats["memory_dropped"]
    assert answered == asked == stats["questions_answered"] >= 15  # each loads blocks back from disk
    # flat: after the first hour (caps reached long before) RSS, fds and threads do not grow with the stream
    hour = [s for s in samples if s[0] >= 3600]
    rss_growth = max(s[1] for s in hour) - hour[0][1]
    assert rss_growth < 12.0, f"RSS grew {rss_growth:.1f} MB over the last two hours: {samples}"
    assert max(s[2] for s in hour) <= hour[0][2] + 2 and max(s[3] for s in hour) == hour[0][3]
    # stop leaves nothing behind
    assert not spill_dir.exists() and not any((tmp_path / "spill").iterdir())
    deadline = time.monotonic() + 10  # threads and descriptors of the stream, and of earlier tests' last moments
    while (_new_threads(threads0) or _fds() > fds0) and time.monotonic() < deadline:
        time.sleep(0.05)
    new_fds = {f: t for f, t in _fd_targets().items() if fd_targets0.get(f) != t}
    assert not _new_threads(threads0) and _fds() <= fds0, f"left open: {_new_threads(threads0)} {new_fds}"
    print(f"\nsoak: {STREAM_S / 3600:.0f} h of stream in {wall_s:.0f} s; RSS {hour[0][1]:.0f} -> "
          f"{samples[-1][1]:.0f} MB (max growth {rss_growth:.1f} MB after 1 h); blocks encoded "
          f"{stats['blocks_encoded']}, in RAM {stats['blocks_in_ram']} ({stats['memory_ram_mb']} MB), on disk "
          f"{stats['blocks_on_disk']} ({stats['memory_disk_mb']} MB), dropped {stats['memory_dropped']}; "
          f"{answered} questions; fds {hour[0][2]} -> {samples[-1][2]}")
