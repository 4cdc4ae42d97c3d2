"""Sessions that survive a restart: save / resume equal an uninterrupted run; a kill -9 in the middle of a save
leaves the previous snapshot loadable; damaged or foreign snapshots are refused with one clear line."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from streamvid.assistant import session_lock, session_store
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.assistant.session_store import SnapshotError
from streamvid.config import EngineConfig
from streamvid.media.synthetic_source import SyntheticSource

FPS = 2.0
N1, N2 = 24, 10  # frames before and after the restart


def _cfg(model) -> EngineConfig:
    return EngineConfig.from_settings(model=str(model), window_tokens=40, max_new_tokens=4, fps=FPS)


@pytest.fixture(scope="module")
def frames():
    rng = np.random.default_rng(3)
    return [rng.integers(0, 256, (56, 56, 3), dtype=np.uint8) for _ in range(N1 + N2)]


def _source(frames, start: int, n: int) -> SyntheticSource:
    return SyntheticSource(lambda i, t: frames[start + i], fps=FPS, n_frames=n)


BEFORE = [(3.5, "What colour is the circle?")]  # on a chunk boundary, as the end of an input is
AFTER = [(0.0, "What was on screen at 00:02?"), (2.5, "How many shapes are there?")]


@pytest.fixture(scope="module")
def saved(tiny_model_dir, adapter, frames, tmp_path_factory):
    """A session that watched the first N1 frames and answered BEFORE, saved; and its assistant."""
    directory = tmp_path_factory.mktemp("session") / "s"
    sa = StreamingAssistant(_cfg(tiny_model_dir), adapter=adapter)
    before = sa.run_simulated(_source(frames, 0, N1), BEFORE)
    summary = sa.save(directory)
    return directory, sa, before, summary


def test_resumed_session_answers_like_one_that_never_stopped(tiny_model_dir, adapter, frames, saved):
    directory, _, before, summary = saved
    assert summary["stream_t_s"] == N1 / FPS and summary["blocks_in_memory"] > 0
    resumed = StreamingAssistant.resume(directory, adapter=adapter)
    assert resumed.stream_offset_s == N1 / FPS
    after = resumed.run_simulated(_source(frames, N1, N2), AFTER)
    # the reference: one session over all the frames, the same questions at the same session times
    ref_sa = StreamingAssistant(_cfg(tiny_model_dir), adapter=adapter)
    ref = ref_sa.run_simulated(_source(frames, 0, N1 + N2), BEFORE + [(N1 / FPS + t, q) for t, q in AFTER])
    assert [a.text for a in before] == [r.text for r in ref[:1]]
    for got, want, (t_in, _) in zip(after, ref[1:], AFTER, strict=True):
        assert got.text == want.text
        assert got.data["t_s"] == want.data["t_s"] == N1 / FPS + t_in and got.data["input_t_s"] == t_in
        assert got.data["evidence_t_s"] == want.data["evidence_t_s"]
        assert got.data["retrieved_blocks"] == want.data["retrieved_blocks"]
    assert after[0].data["retrieved_blocks"], "the 00:02 question is answered from blocks seen before the restart"
    assert all(t1 <= 3.0 for t0, t1 in after[0].data["evidence_t_s"])
    assert list(resumed.reasoning.dialogue) == list(ref_sa.reasoning.dialogue)
    resumed.stop()
    ref_sa.stop()


def test_window_and_memory_blocks_come_back_exactly(adapter, saved):
    directory, sa, _, _ = saved
    resumed = StreamingAssistant.resume(directory, adapter=adapter)
    a, b = sa.window.snapshot(), resumed.window.snapshot()
    assert [x.id for x in a.blocks] == [x.id for x in b.blocks]
    for x, y in zip((a.sinks, *a.blocks), (b.sinks, *b.blocks)):
        assert (x.t_start_s, x.t_end_s, x.pos_start, x.pos_span) == (y.t_start_s, y.t_end_s, y.pos_start, y.pos_span)
        assert all(torch.equal(p, q) for p, q in zip(x.keys + x.values, y.keys + y.values))
    assert len(resumed.memory) == len(sa.memory) > 0
    for block_id in sa.memory.ids_at(0.0, pad_s=1e9):
        x, y = sa.memory.load(block_id), resumed.memory.load(block_id)
        assert all(torch.equal(p, q) for p, q in zip(x.keys + x.values, y.keys + y.values))
        assert np.array_equal(x.vector, y.vector)
    probe = adapter.question_vector("What colour was the circle?")
    assert resumed.memory.search(probe, 3) == sa.memory.search(probe, 3)
    assert resumed.ingest.next_block_id == sa.ingest.next_block_id
    resumed.stop()


def _copy(directory: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(directory, out)
    return out


def _current(directory: Path) -> Path:
    return directory / json.loads((directory / "session.json").read_text())["snapshot"]


@pytest.mark.parametrize("damage", ["flip_block_byte", "truncate_index", "drop_window", "garble_pointer",
                                    "garble_meta"])
def test_damaged_snapshot_is_refused_with_one_line(adapter, saved, tmp_path, damage):
    directory = _copy(saved[0], tmp_path)
    snap = _current(directory)
    if damage == "flip_block_byte":
        path = sorted((snap / "memory").glob("block_*.safetensors"))[0]
        data = bytearray(path.read_bytes())
        data[-3] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "truncate_index":
        path = snap / "memory" / "index.faiss"
        path.write_bytes(path.read_bytes()[:40])
    elif damage == "drop_window":
        (snap / "window.safetensors").unlink()
    elif damage == "garble_pointer":
        (directory / "session.json").write_text("{not json")
    else:
        (snap / "meta.json").write_text("{}")
    with pytest.raises(SnapshotError) as e:
        StreamingAssistant.resume(directory, adapter=adapter)
    message = str(e.value)
    assert "\n" not in message and "is damaged" in message and "remove the folder" in message


def test_other_format_version_and_other_model_are_refused(tiny_model_dir, adapter, saved, tmp_path):
    directory = _copy(saved[0], tmp_path)
    pointer = json.loads((directory / "session.json").read_text())
    (directory / "session.json").write_text(json.dumps({**pointer, "format_version": 99}))
    with pytest.raises(SnapshotError, match="format version 99; this streamvid reads version 1"):
        StreamingAssistant.resume(directory, adapter=adapter)
    (directory / "session.json").write_text(json.dumps(pointer))
    other = tmp_path / "other_model"
    shutil.copytree(tiny_model_dir, other)
    weights = other / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01  # retrained weights: same config, same size
    weights.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match=r"was saved with model .* not .*other_model.*pass --model"):
        StreamingAssistant.resume(directory, config=_cfg(other), adapter=adapter)
    assert StreamingAssistant.resume(directory, adapter=adapter).stream_t_s == N1 / FPS


def test_a_second_process_cannot_use_a_session_in_use(tmp_path):
    lock = session_lock.SessionLock(tmp_path / "s")
    code = ("import sys; from streamvid.assistant.session_lock import SessionLock\n"
            "try:\n    SessionLock(sys.argv[1])\nexcept ValueError as e:\n    print(e)\n")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True, timeout=60)
    assert "in use by another streamvid process" in p.stdout
    lock.release()
    session_lock.SessionLock(tmp_path / "s").release()


CHILD = textwrap.dedent('''
    import json, sys, threading
    import numpy as np
    from streamvid.assistant import session_store
    from streamvid.assistant.assistant import StreamingAssistant
    from streamvid.config import EngineConfig
    from streamvid.media.synthetic_source import SyntheticSource

    model, directory, stage = sys.argv[1:4]
    rng = np.random.default_rng(5)
    frames = [rng.integers(0, 256, (56, 56, 3), dtype=np.uint8) for _ in range(400)]
    sa = StreamingAssistant(EngineConfig.from_settings(model=model, window_tokens=12, max_new_tokens=2, fps=2.0))
    sa.run_simulated(SyntheticSource(lambda i, t: frames[i], 2.0, 20), [])
    print(json.dumps(sa.save(directory)), flush=True)

    def hang(label):
        print("at " + label, flush=True)
        threading.Event().wait()

    if stage == "files":  # after the first files of the new snapshot are written and synced
        real = session_store.file_sha256
        calls = [0]
        def sha(path):
            calls[0] += 1
            if calls[0] == 3:
                hang("files")
            return real(path)
        session_store.file_sha256 = sha
    elif stage == "rename":  # the new folder is complete, not yet named
        session_store.os.rename = lambda a, b: hang("rename")
    elif stage == "pointer":  # the new pointer is written to its temp file, not yet in place
        session_store.os.replace = lambda a, b: hang("pointer")
    n = 20
    while True:
        sa.run_simulated(SyntheticSource(lambda i, t: frames[n + i], 2.0, 6), [])
        n += 6
        print("saving " + json.dumps(sa.stream_t_s), flush=True)
        print(json.dumps(sa.save(directory)), flush=True)
''')


@pytest.mark.parametrize("stage", ["files", "rename", "pointer", "any"])
def test_kill_9_during_a_save_leaves_a_loadable_snapshot(tiny_model_dir, adapter, tmp_path, stage):
    directory = tmp_path / "s"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_model_dir), str(directory), stage],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        first = json.loads(child.stdout.readline() or "null")
        assert first is not None, child.stderr.read()
        done, saving = [first["stream_t_s"]], None
        while True:
            line = child.stdout.readline()
            assert line, child.stderr.read()
            if line.startswith("at "):
                break
            if line.startswith("saving "):
                saving = round(json.loads(line.split(" ", 1)[1]), 3)
            else:
                done.append(json.loads(line)["stream_t_s"])
            if stage == "any" and len(done) == 4:  # in the middle of the next save, wherever it is
                break
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        child.kill()
        child.stdout.close()
        child.stderr.close()
    resumed = StreamingAssistant.resume(directory, adapter=adapter)
    if stage == "any":
        assert round(resumed.stream_t_s, 3) in {*done, saving}
    else:
        assert stage != "files" or len(done) == 1
        assert round(resumed.stream_t_s, 3) == done[-1], "the snapshot the pointer names is the last finished one"
    assert resumed.memory is not None and len(resumed.memory) > 0
    resumed.stop()
    # the next save cleans up what the killed one left behind
    resumed.save(directory)
    assert sorted(p.name for p in directory.iterdir() if p.is_dir()) == [_current(directory).name]


def test_resuming_with_memory_off_warns_and_keeps_the_window(tiny_model_dir, adapter, saved, caplog):
    directory, sa, _, _ = saved
    resumed = StreamingAssistant.resume(directory, config=_cfg(tiny_model_dir).replace(memory_top_k=0),
                                        adapter=adapter)
    assert resumed.memory is None and "memory is off" in caplog.text
    assert [b.id for b in resumed.window.snapshot().blocks] == [b.id for b in sa.window.snapshot().blocks]
    assert resumed.stream_t_s == N1 / FPS
    resumed.stop()


# ---- snapshots whose meta.json was edited and its checksum updated ------------------------------------------------
def _write_meta(directory: Path, meta: dict) -> None:
    """meta.json of the current snapshot replaced by `meta` (NaN written as NaN, as json.dumps does), its sha256 in
    session.json updated to match: checksums alone no longer tell the edit apart."""
    (_current(directory) / "meta.json").write_text(json.dumps(meta))
    pointer = json.loads((directory / "session.json").read_text())
    pointer["meta_sha256"] = _listed(_current(directory) / "meta.json")["sha256"]
    (directory / "session.json").write_text(json.dumps(pointer))


def _listed(path: Path) -> dict:
    return {"bytes": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def _empty_memory_block(meta: dict, snap: Path) -> None:
    path = min((snap / "memory").glob("block_*.safetensors"))
    path.write_bytes(b"")
    meta["files"][f"memory/{path.name}"] = _listed(path)


def _outside(name: Callable[[Path, Path], str]) -> Callable[[dict, Path], None]:
    """An edit that lists a file outside the snapshot folder, under the name `name(file, snapshot folder)`."""
    def edit(meta: dict, snap: Path) -> None:
        (snap.parent.parent / "secret.txt").write_text("not part of any session\n")
        meta["files"][name(snap.parent.parent / "secret.txt", snap)] = _listed(snap.parent.parent / "secret.txt")
    return edit


def _symlink_out(meta: dict, snap: Path) -> None:
    shutil.move(snap / "window.safetensors", snap.parent.parent / "window.safetensors")
    (snap / "window.safetensors").symlink_to(snap.parent.parent / "window.safetensors")


TAMPERING = {  # name: (edit of meta.json and the folder, what the message names)
    "empty_memory_block": (_empty_memory_block, "block_000000000.safetensors"),
    "next_block_id_text": (lambda m, s: m.update(next_block_id="abc"), "next_block_id"),
    "stream_t_s_nan": (lambda m, s: m.update(stream_t_s=float("nan")), "stream_t_s"),
    "stream_t_s_negative": (lambda m, s: m.update(stream_t_s=-50.0), "stream_t_s"),
    "stream_t_s_huge": (lambda m, s: m.update(stream_t_s=1e308), "stream_t_s"),
    "dialogue_half_turn": (lambda m, s: m.update(dialogue=[["q"]]), "dialogue"),
    "files_empty": (lambda m, s: m.update(files={}), "files lists no "),
    "file_outside_absolute": (_outside(lambda file, snap: str(file)), "secret.txt"),
    "file_outside_dotdot": (_outside(os.path.relpath), "../../secret.txt"),
    "symlink_out": (_symlink_out, "window.safetensors is a symbolic link"),
}


@pytest.mark.parametrize("tampering", list(TAMPERING))
def test_edited_metadata_with_a_matching_checksum_is_refused(adapter, saved, tmp_path, tampering):
    edit, names = TAMPERING[tampering]
    directory = _copy(saved[0], tmp_path)
    meta = json.loads((_current(directory) / "meta.json").read_text())
    edit(meta, _current(directory))
    _write_meta(directory, meta)
    with pytest.raises(SnapshotError) as e:
        StreamingAssistant.resume(directory, adapter=adapter).stop()
    message = str(e.value)
    assert "\n" not in message and "is damaged: " in message and "remove the folder" in message
    assert names in message.split("is damaged: ", 1)[1], message


def test_the_cli_refuses_an_edited_snapshot_with_exit_2(tiny_model_dir, saved, tmp_path, capsys):
    from streamvid.cli.main import main

    directory = _copy(saved[0], tmp_path)
    _write_meta(directory, {**json.loads((_current(directory) / "meta.json").read_text()), "stream_t_s": math.nan})
    assert main(["run", str(tmp_path / "any.mp4"), "--model", str(tiny_model_dir), "--session", str(directory)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "is damaged: meta.json: stream_t_s must be a finite number" in err


def test_a_model_whose_config_changed_is_named_as_such(tiny_model_dir, adapter, saved, tmp_path):
    other = tmp_path / "other_model"
    shutil.copytree(tiny_model_dir, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "note": "edited"}))  # same model_type and weights
    with pytest.raises(SnapshotError) as e:
        StreamingAssistant.resume(saved[0], config=_cfg(other), adapter=adapter)
    assert f"not {other}, whose config differs (config.json sha256 " in str(e.value) and "\n" not in str(e.value)
    assert "weights" not in str(e.value) and "pass --model" in str(e.value)
    directory = _copy(saved[0], tmp_path)  # the same path, a config that changed since the save
    meta = json.loads((_current(directory) / "meta.json").read_text())
    _write_meta(directory, {**meta, "model": {**meta["model"], "config_sha256": "0" * 64}})
    with pytest.raises(SnapshotError, match=f"model {tiny_model_dir} whose config differs .*000000000000... saved"):
        StreamingAssistant.resume(directory, adapter=adapter)


# ---- any edit of meta.json: resumed with valid state, or one line -----------------------------------------------
DELETE = object()
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
    | st.sampled_from([-1, 0, 1, 11, 12, 13, 2**63, 0.5, 12.0, 1e308, "", "abc", "/etc/passwd", "../x",
                       "window.safetensors", "snap-000000", "memory/memory.json", "float32", "qwen2_5_vl", "model",
                       "0" * 64]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6)
SNAPSHOT_ERRORS = ("is damaged: ", "was saved with", "holds KV as", "format version")


def _like(value) -> st.SearchStrategy:
    """Values of the JSON type `value` has: the edits that a check of types alone lets through."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, float):
        return st.floats(-1.0, 2 * value + 1.0) | st.floats()
    if isinstance(value, int):
        return st.integers(-2, 2 * value + 2) | st.integers()
    if isinstance(value, str):
        return st.text(max_size=80) | st.just(value[:-1]) | st.just(value + "x")
    if isinstance(value, list) and value:
        return st.permutations(value) | st.lists(st.sampled_from(value), max_size=len(value) + 1)
    if isinstance(value, dict) and value:
        return st.sets(st.sampled_from(sorted(value))).map(lambda keys: {k: value[k] for k in keys})
    return st.nothing()


def _paths(doc, prefix=(), depth=3):
    """Every key (and list index) of `doc` down to `depth` levels, as a tuple of keys."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        yield (*prefix, key)
        if depth > 1:
            yield from _paths(value, (*prefix, key), depth - 1)


@pytest.fixture(scope="module")
def editable(saved, tmp_path_factory):
    """A copy of the saved session, and its meta.json and session.json as saved (each example restores them)."""
    directory = tmp_path_factory.mktemp("editable") / "s"
    shutil.copytree(saved[0], directory)
    return directory, (_current(directory) / "meta.json").read_bytes(), (directory / "session.json").read_bytes()


def _assert_valid(sa: StreamingAssistant, out: Path) -> None:
    snap = sa.window.snapshot()
    ids = [b.id for b in snap.blocks] + (sa.memory.ids_at(0.0, pad_s=1e12) if sa.memory is not None else [])
    assert math.isfinite(sa.stream_t_s) and 0 <= sa.stream_t_s <= 1e9
    assert type(sa.ingest.next_block_id) is int and sa.ingest.next_block_id > max(ids, default=-1)
    assert all(type(q) is str and type(a) is str for q, a in sa.reasoning.dialogue)
    assert all(math.isfinite(b.t_start_s) and math.isfinite(b.t_end_s) for b in snap.blocks)
    sa.save(out)  # and what it saves is valid JSON that resumes
    json.loads((_current(out) / "meta.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} saved"))
    session_store.read_meta(out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_edit_of_meta_json_resumes_valid_state_or_is_one_line(adapter, editable, data):
    directory, meta_bytes, pointer_bytes = editable
    meta = json.loads(meta_bytes)
    path = data.draw(st.sampled_from(sorted(_paths(meta), key=repr)), label="path")
    node = functools.reduce(lambda node, key: node[key], path[:-1], meta)
    value = data.draw(st.just(DELETE) | JSON_VALUES | _like(node[path[-1]]), label="value")
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    try:
        _write_meta(directory, meta)
        with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):  # config.memory.dir may be "x"
            try:
                sa = StreamingAssistant.resume(directory, adapter=adapter)
            except SnapshotError as e:
                message = str(e)
                assert "\n" not in message and message.startswith(f"session {directory} "), message
                assert any(s in message for s in SNAPSHOT_ERRORS) and "--session folder" in message, message
                event("refused: " + next(s for s in SNAPSHOT_ERRORS if s in message))
                return
            event("resumed")
            try:
                _assert_valid(sa, Path(scratch) / "saved")
            finally:
                sa.stop()
    finally:
        (_current(directory) / "meta.json").write_bytes(meta_bytes)
        (directory / "session.json").write_bytes(pointer_bytes)
