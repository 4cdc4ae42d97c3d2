"""What a session snapshot may hold (session_store.py): checked before any of it is used, so a snapshot whose
meta.json was edited (its checksum updated too) is refused as damaged like one with a flipped byte.

The rules are tables: a dict {key: spec} is a JSON object with those keys (a key ending in "?" may be absent;
keys not named are never read, and allowed), and a spec is one of the small checkers below (integer, number,
text, boolean, optional, list_of, pair, mapping). Numbers are finite and within sane bounds; times and ids are
not negative. Beyond the tables: file names stay inside the snapshot folder (relative, no "..", no symlinks), the
files listed are exactly the ones a snapshot has, block ids, layers, shapes and dims agree across meta.json,
memory.json and the safetensors headers (read here as bytes, never unpickled), every id is below next_block_id,
and the saved config makes a valid EngineConfig.

Every check raises SchemaError (a ValueError) with one line: where, what was expected, and what was found.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import reprlib
import struct
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from streamvid.config import SETTINGS, EngineConfig
from streamvid.kv.budget import MEMORY_KINDS
from streamvid.kv.recurrent_state import check_state_header

MAX_T_S = 1e9  # stream seconds (31 years)
MAX_ID = 2**53  # block ids: exact in a JSON number
MAX_POS = 2**31  # rotary positions
MAX_BYTES = 2**50
MAX_TEXT = 1_000_000  # characters of one question or answer
MAX_CONFIG_NUMBER = 1e12  # any number in the saved config (MB caps, seconds, counts)
MAX_HEADER = 100 * 2**20  # bytes of a safetensors header (the limit the safetensors library sets)
_ELEMENT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I8": 1, "U8": 1}  # what memory.py reads
META, WINDOW, MEMORY = "meta.json", "window.safetensors", "memory"  # a snapshot folder's files (session_store)
MEMORY_FILES = (f"{MEMORY}/memory.json", f"{MEMORY}/index.faiss")  # and memory.json's block files
_HEX64 = re.compile(r"[0-9a-f]{64}")
_BLOCK_FILE = re.compile(r"block_[0-9]{1,20}\.safetensors")

Spec = Callable[[object, str], None]


class SchemaError(ValueError):
    """One line: where in the snapshot, what was expected, what was found."""


def _fail(where: str, expected: str, value: object) -> SchemaError:
    shown = repr(value) if isinstance(value, (str, int, float)) else reprlib.repr(value)  # any depth: bounded
    shown = shown[:40] + "..." + shown[-40:] if len(shown) > 90 else shown  # the end of a long path too
    return SchemaError(f"{where} must be {expected}, got {shown}")


# ---- checkers ------------------------------------------------------------------------------------------------
def integer(lo: int, hi: int) -> Spec:
    def check(value, where):
        if type(value) is not int or not lo <= value <= hi:
            raise _fail(where, f"an integer in [{lo}, {hi}]", value)
    return check


def number(lo: float, hi: float) -> Spec:
    def check(value, where):
        if type(value) not in (int, float) or not math.isfinite(value) or not lo <= value <= hi:
            raise _fail(where, f"a finite number in [{lo:g}, {hi:g}]", value)
    return check


def text(max_len: int = 4096, pattern: re.Pattern | None = None, printable: bool = True) -> Spec:
    def check(value, where):
        if type(value) is not str or len(value) > max_len or (pattern and not pattern.fullmatch(value)) or (
                printable and not value.isprintable()):
            raise _fail(where, f"{'printable ' * printable}text{f' matching {pattern.pattern}' if pattern else ''} of "
                               f"at most {max_len} characters", value)
    return check


def boolean(value, where) -> None:
    if type(value) is not bool:
        raise _fail(where, "true or false", value)


def optional(spec) -> Spec:
    def check(value, where):
        if value is not None:
            _spec(spec)(value, where)
    return check


def list_of(spec, max_len: int, increasing: bool = False) -> Spec:
    def check(value, where):
        if type(value) is not list or len(value) > max_len:
            raise _fail(where, f"a list of at most {max_len} items", value)
        for i, item in enumerate(value):
            _spec(spec)(item, f"{where}[{i}]")
        if increasing and any(a >= b for a, b in itertools.pairwise(value)):
            raise _fail(where, "increasing", value)
    return check


def pair(first, second) -> Spec:
    def check(value, where):
        if type(value) is not list or len(value) != 2:
            raise _fail(where, "a pair [a, b]", value)
        _spec(first)(value[0], f"{where}[0]")
        _spec(second)(value[1], f"{where}[1]")
    return check


def mapping(key, value_spec, max_len: int) -> Spec:
    def check(value, where):
        if type(value) is not dict or len(value) > max_len:
            raise _fail(where, f"an object of at most {max_len} entries", value)
        for k, v in value.items():
            _spec(key)(k, f"{where} name")
            _spec(value_spec)(v, f"{where}[{k!r}]")
    return check


def _spec(spec) -> Spec:
    return _object(spec) if isinstance(spec, dict) else spec


def _object(table: dict) -> Spec:
    def check(value, where):
        if type(value) is not dict:
            raise _fail(where, "an object", value)
        for key, spec in table.items():
            name = key.removesuffix("?")
            if name in value:
                _spec(spec)(value[name], f"{where}.{name}" if where else name)
            elif not key.endswith("?"):
                raise SchemaError(f"{where + '.' if where else ''}{name} is missing")
    return check


def check(value, spec, where: str = "") -> None:
    """SchemaError unless `value` matches `spec` (a table or a checker); `where` prefixes the message."""
    _spec(spec)(value, where)


# ---- the tables ----------------------------------------------------------------------------------------------
def file_name(value, where) -> None:
    """A file of the snapshot folder: relative, "/"-separated, no "." / ".." / empty parts, printable."""
    ok = type(value) is str and 0 < len(value) <= 1024 and value.isprintable() and "\\" not in value
    if not ok or PurePosixPath(value).is_absolute() or {"", ".", ".."} & set(value.split("/")):
        raise _fail(where, "a path inside the snapshot folder", value)


def config_value(value, where) -> None:
    """A saved EngineConfig field: null, true/false, bounded text, or a bounded finite number (EngineConfig
    checks each field's kind and range; this keeps the numbers within what arithmetic on them survives)."""
    if value is None or type(value) is bool:
        return
    if type(value) is str:
        return text(printable=False)(value, where)
    number(-MAX_CONFIG_NUMBER, MAX_CONFIG_NUMBER)(value, where)


TIME = number(0.0, MAX_T_S)
ID = integer(0, MAX_ID)
HEX64 = text(64, _HEX64)
LAYERS = integer(1, 4096)
POINTER_JSON = {  # session.json
    "format": text(), "format_version": integer(0, MAX_ID), "snapshot": text(32, re.compile(r"snap-[0-9]{1,18}")),
    "meta_sha256": HEX64}
META_JSON = {
    "format": text(), "format_version": integer(0, MAX_ID),
    "model": {"model": text(), "model_type": optional(text(256)), "config_sha256": HEX64,
              "weights_fingerprint": optional(HEX64)},
    "embedder?": {"name": text(), "dim": integer(1, 2**20)},
    "kv": {"dtype": text(32), "layers": LAYERS, "kv_heads": integer(1, 4096), "head_dim": integer(1, 2**16)},
    "config": mapping(text(256), config_value, 1000),
    "stream_t_s": TIME, "next_block_id": ID,
    "dialogue": list_of(pair(text(MAX_TEXT, printable=False), text(MAX_TEXT, printable=False)), 100_000),
    "window_blocks": list_of(ID, 1_000_000, increasing=True),
    "memory": boolean, "saved_unix_s": number(0.0, 1e12),
    "files": mapping(file_name, {"bytes": integer(0, MAX_BYTES), "sha256": HEX64}, 10_000_000),
}
MEMORY_JSON = {  # memory/memory.json (LongTermMemory.snapshot)
    "dim": integer(1, 2**20), "dropped": integer(0, MAX_ID),
    "blocks": list_of({"id": ID, "file": text(64, _BLOCK_FILE), "t_start_s": TIME, "t_end_s": TIME,
                       "speech?": boolean}, 10_000_000),
}
WINDOW_ENTRY = {  # one block of window.safetensors' "blocks" metadata (the sinks first, id -1)
    "id": integer(-1, MAX_ID), "t_start_s": TIME, "t_end_s": TIME, "pos_start": integer(0, MAX_POS),
    "pos_span": integer(0, MAX_POS), "layers": LAYERS, "speech?": text(MAX_TEXT),
}
MEMORY_BLOCK = {  # the "block" metadata of a memory block file (stored_block.StoredBlock.record)
    "id": ID, "t_start_s": TIME, "t_end_s": TIME, "pos_start": integer(0, MAX_POS), "pos_span": integer(0, MAX_POS),
    "n_layers": LAYERS, "kind?": text(16, re.compile("|".join(MEMORY_KINDS))), "dtype?": text(32),
    "speech?": text(MAX_TEXT),
}
_SCALES = {"float": (), "int8": ("ks", "vs"), "int4": ("ks", "kz", "vs", "vz")}  # compact.compact_tensors
_ST_NAMES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16"}


# ---- meta.json -----------------------------------------------------------------------------------------------
def engine_config(saved: dict, **changes) -> EngineConfig:
    """The EngineConfig of a saved config (fields this version does not know are ignored)."""
    return EngineConfig.from_settings(**{k: v for k, v in saved.items() if k in SETTINGS}, **changes)


def check_meta(meta) -> None:
    """meta.json against META_JSON, its config a valid EngineConfig of the model it names, and every window block
    older than the next block id."""
    check(meta, META_JSON)
    if meta["config"].get("model", meta["model"]["model"]) != meta["model"]["model"]:
        raise SchemaError(f"config.model {meta['config']['model']!r} is not model.model {meta['model']['model']!r}")
    try:
        engine_config(meta["config"])
    except (TypeError, ValueError) as e:
        raise SchemaError(f"config is not a valid engine config ({str(e).splitlines()[0] if str(e) else e!r})") \
            from None
    _check_ids(meta["window_blocks"], meta["next_block_id"], "window_blocks")


def _check_ids(ids: list[int], next_id: int, where: str) -> None:
    if len(set(ids)) != len(ids):
        raise SchemaError(f"{where} lists a block twice")
    if ids and max(ids) >= next_id:
        raise SchemaError(f"{where} holds block {max(ids)}, not older than next_block_id {next_id}")


def _check_times(start: float, end: float, where: str) -> None:
    """A block's span. (Not bounded by stream_t_s: a second run_simulated on one assistant starts its input at 0
    again, so a saved clock can be earlier than blocks it keeps.)"""
    if not start <= end:
        raise SchemaError(f"{where} ends at {end} s, before it starts at {start} s")


def check_snapshot(folder: Path, meta: dict) -> None:
    """The snapshot in `folder` whose meta.json is `meta` (format version checked): meta.json, the files it lists
    (names, sizes, sha256: exactly a snapshot's files), memory.json and the safetensors headers."""
    try:
        check_meta(meta)
    except SchemaError as e:
        raise SchemaError(f"{META}: {e}") from None
    required = {WINDOW, *(MEMORY_FILES if meta["memory"] else ())}
    check_listed(meta, required, exact=False)
    for name, want in meta["files"].items():
        path = regular_file(folder, name)
        if path.stat().st_size != want["bytes"] or file_sha256(path) != want["sha256"]:
            raise SchemaError(f"{name} does not match its checksum")
    memory = read_memory_doc(folder / MEMORY, meta) if meta["memory"] else {"blocks": []}
    check_listed(meta, required | {f"{MEMORY}/{e['file']}" for e in memory["blocks"]})
    check_memory_blocks(folder / MEMORY, meta, memory)
    check_window(folder / WINDOW, WINDOW, meta)


# ---- files ---------------------------------------------------------------------------------------------------
def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(2**20):
            h.update(chunk)
    return h.hexdigest()


def regular_file(folder: Path, name: str) -> Path:
    """folder/name, after checking that neither it nor a folder on the way is a symbolic link, and that it is a
    regular file (`name` passed file_name)."""
    path = folder
    for part in name.split("/"):
        path = path / part
        if path.is_symlink():
            link = "" if path.name == name else f" ({path.relative_to(folder)} is)"
            raise SchemaError(f"{name} is a symbolic link{link}, not a file of the snapshot")
    if not path.is_file():
        raise SchemaError(f"{name} is missing")
    return path


def check_listed(meta: dict, required: set[str], exact: bool = True) -> None:
    """The files meta.json lists include `required` (and, `exact`, are no others)."""
    listed = set(meta["files"])
    if required - listed:
        raise SchemaError(f"{META}: files lists no {min(required - listed)}")
    if exact and listed - required:
        raise SchemaError(f"{META}: files lists {min(listed - required)}, which this snapshot does not use")


def read_header(path: Path, name: str) -> tuple[dict, dict]:
    """(tensors, metadata) of a safetensors file, read as bytes and checked: the header's length, JSON, and
    every tensor's dtype, shape and byte range within the file. tensors: name -> (dtype, shape)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 0 < n <= min(MAX_HEADER, size - 8):
            raise SchemaError(f"{name} is not a safetensors file ({size} bytes{f', a {n}-byte header' * (n >= 0)})")
        try:
            header = json.loads(f.read(n))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise SchemaError(f"{name} has a safetensors header that is not JSON") from None
    if type(header) is not dict:
        raise SchemaError(f"{name} has a safetensors header that is not an object")
    metadata = header.pop("__metadata__", {})
    check(metadata, mapping(text(), text(2**30, printable=False), 100), f"{name} metadata")
    tensors = {}
    for key, entry in header.items():
        where = f"{name} tensor {key!r}"
        check(entry, {"dtype": text(8), "shape": list_of(integer(0, 2**40), 8), "data_offsets": pair(
            integer(0, size), integer(0, size))}, where)
        start, end = entry["data_offsets"]
        width = _ELEMENT_BYTES.get(entry["dtype"])
        if width is None or end - start != math.prod(entry["shape"]) * width or start % width or end > size - 8 - n:
            raise SchemaError(f"{where} does not fit the file ({entry})")
        tensors[key] = (entry["dtype"], tuple(entry["shape"]))
    return tensors, metadata


def _json_metadata(metadata: dict, key: str, name: str):
    try:
        return json.loads(metadata[key])
    except (KeyError, ValueError, RecursionError):
        raise SchemaError(f"{name} has no {key!r} metadata in JSON") from None


def _check_kv(tensors: dict, prefix: str, layers: int, kv: dict | None, name: str, scales: tuple = ()) -> None:
    """K and V of each layer (and the `scales` of a compact kind): present, and (window blocks, `kv` given)
    (1, kv_heads, tokens, head_dim) of the saved dtype."""
    for i in range(layers):
        for k in (f"{prefix}{s}{i}" for s in scales):
            if k not in tensors:
                raise SchemaError(f"{name} has no tensor {k}")
        for k in (f"{prefix}k{i}", f"{prefix}v{i}"):
            if k not in tensors:
                raise SchemaError(f"{name} has no tensor {k}")
            dtype, shape = tensors[k]
            if kv is not None and (dtype != _ST_NAMES.get(kv["dtype"]) or len(shape) != 4
                                   or (shape[0], shape[1], shape[3]) != (1, kv["kv_heads"], kv["head_dim"])):
                raise SchemaError(f"{name} tensor {k} is {dtype} {list(shape)}, not the {kv} meta.json lists")


def _check_vector(tensors: dict, key: str, dim: int | None, name: str, required: bool) -> None:
    if key not in tensors:
        if required:
            raise SchemaError(f"{name} has no tensor {key}")
        return
    dtype, shape = tensors[key]
    if dtype != "F32" or len(shape) not in (1, 2) or 0 in shape or (dim is not None and shape[-1] != dim):
        raise SchemaError(f"{name} tensor {key} is {dtype} {list(shape)}, not float32 (rows, {dim})")


# ---- window and memory ---------------------------------------------------------------------------------------
def check_window(path: Path, name: str, meta: dict) -> None:
    """window.safetensors: its block list (the sinks, then the blocks meta.json lists, in order) and tensors."""
    tensors, metadata = read_header(path, name)
    entries = _json_metadata(metadata, "blocks", name)
    check(entries, list_of(WINDOW_ENTRY, 1_000_001), f"{name} blocks")
    if [e["id"] for e in entries[1:]] != meta["window_blocks"] or not entries or entries[0]["id"] != -1:
        raise SchemaError(f"{name} does not hold the sinks and the blocks meta.json lists")
    dim = meta.get("embedder", {}).get("dim")
    for j, e in enumerate(entries):
        if e["layers"] != meta["kv"]["layers"]:
            raise SchemaError(f"{name} block {e['id']} has {e['layers']} layers, meta.json {meta['kv']['layers']}")
        _check_times(e["t_start_s"], e["t_end_s"], f"{name} block {e['id']}")
        _check_kv(tensors, f"b{j}.", e["layers"], meta["kv"], name)
        if f"b{j}.mk0" in tensors:
            _check_kv(tensors, f"b{j}.m", e["layers"], meta["kv"], name)
        _check_vector(tensors, f"b{j}.vector", dim, name, required=False)
    check_state_header(tensors, name, SchemaError)  # a hybrid model's recurrent state, when saved


def read_memory_doc(folder: Path, meta: dict) -> dict:
    """memory.json of the snapshot's memory `folder`, checked against MEMORY_JSON and meta.json."""
    try:
        doc = json.loads((folder / "memory.json").read_text())
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise SchemaError("memory.json is not JSON") from None
    check(doc, MEMORY_JSON, "memory.json")
    if doc["dim"] != meta.get("embedder", {}).get("dim", doc["dim"]):
        raise SchemaError(f"memory.json has vectors of dim {doc['dim']}, meta.json {meta['embedder']['dim']}")
    _check_ids([e["id"] for e in doc["blocks"]], meta["next_block_id"], "memory.json")
    if len({e["file"] for e in doc["blocks"]}) != len(doc["blocks"]):
        raise SchemaError("memory.json names a block file twice")
    for e in doc["blocks"]:
        _check_times(e["t_start_s"], e["t_end_s"], f"memory.json block {e['id']}")
    return doc


def check_memory_blocks(folder: Path, meta: dict, doc: dict) -> None:
    """The header of every block file memory.json (`doc`) names: its tensors and its block metadata."""
    for e in doc["blocks"]:
        name = f"memory/{e['file']}"
        tensors, metadata = read_header(regular_file(folder, e["file"]), name)
        block = _json_metadata(metadata, "block", name)
        check(block, MEMORY_BLOCK, f"{name} block")
        if (block["id"], block["n_layers"]) != (e["id"], meta["kv"]["layers"]):
            raise SchemaError(f"{name} holds block {block['id']} of {block['n_layers']} layers, not block "
                              f"{e['id']} of {meta['kv']['layers']}")
        if block.get("dtype", meta["kv"]["dtype"]) != meta["kv"]["dtype"]:
            raise SchemaError(f"{name} holds {block['dtype']!r} KV, meta.json {meta['kv']['dtype']!r}")
        _check_kv(tensors, "", block["n_layers"], None, name, _SCALES.get(block.get("kind", "float"), ()))
        _check_vector(tensors, "vector", doc["dim"], name, required=True)
