"""The library's layout as the docs state it: modules over LIMIT lines only where named in LONG_MODULES (a list
that may only shrink), the per-package map in docs/architecture.md naming every module and package of the tree
(none missing, none stale), the import layers of pyproject.toml's `[tool.importlinter]` contracts held by the
real imports (`lint-imports`), no import circle between modules (grimp's graph), and no private name reached across
objects (ruff's SLF001)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 400
# modules over LIMIT lines (none today): a new one fails the test until it is split by job, or named here with a
# reason; a listed module under the limit fails it too, so the list only shrinks
LONG_MODULES: set[str] = set()


def _tree() -> set[str]:
    """Every module and package folder of the library and the app, as paths from the repository root."""
    out = set()
    for top in ("streamvid", "app"):
        for f in (ROOT / top).rglob("*.py"):
            if "__pycache__" in f.parts:
                continue
            rel = f.relative_to(ROOT)
            if f.name != "__init__.py":
                out.add(rel.as_posix())
            out.add(rel.parent.as_posix() + "/")
    return out


def map_entries(doc: str) -> set[str]:
    """The paths the Layout map names under streamvid/ and app/: an entry is a name ending in .py or / at an even
    indentation under 20 columns (deeper lines continue the entry above)."""
    block = re.search(r"(?ms)^## Layout\n.*?^```\n(.*?)^```", doc)
    assert block, "docs/architecture.md has no Layout map"
    out, stack, top = set(), [], None
    for line in block.group(1).splitlines():
        indent = len(line) - len(line.lstrip(" "))
        m = re.match(r"([\w.-]+(?:\.py|/))(?=\s|$)", line.strip())
        if not m or indent >= 20 or indent % 2:
            continue
        name, depth = m.group(1), indent // 2
        if depth == 0:
            top = name if name in ("streamvid/", "app/") else None
            stack = [name] if top else []
            if top:
                out.add(name)
            continue
        if top is None:
            continue
        stack = stack[:depth]
        assert len(stack) == depth, f"map entry {name!r} is indented under nothing"
        out.add("".join(stack) + name)
        if name.endswith("/"):
            stack.append(name)
    return out


def long_modules() -> set[str]:
    return {p for p in _tree() if p.endswith(".py") and len((ROOT / p).read_text().splitlines()) > LIMIT}


def test_modules_over_the_limit_are_the_named_ones():
    now = long_modules()
    assert not now - LONG_MODULES, (f"modules over {LIMIT} lines that LONG_MODULES does not name (split them): "
                                    f"{sorted(now - LONG_MODULES)}")
    assert not LONG_MODULES - now, (f"modules in LONG_MODULES now at most {LIMIT} lines (take them off the list): "
                                    f"{sorted(LONG_MODULES - now)}")


def test_map_parser_reads_nesting_and_skips_continuations():
    doc = ("## Layout\n\n```\npyproject.toml           deps\nstreamvid/               the library\n"
           "  types.py               Frame\n  kv/                    the KV\n    window.py            the window,\n"
           "                         memory.py and more on a continuation line\napp/                     the app\n"
           "  ui.py                  the page\ntests/                   pytest\n```\n")
    assert map_entries(doc) == {"streamvid/", "streamvid/types.py", "streamvid/kv/", "streamvid/kv/window.py",
                                "app/", "app/ui.py"}


def test_architecture_map_names_every_module():
    named = map_entries((ROOT / "docs" / "architecture.md").read_text())
    tree = _tree()
    assert not tree - named, f"docs/architecture.md's Layout map misses: {sorted(tree - named)}"
    assert not named - tree, f"docs/architecture.md's Layout map names what is not there: {sorted(named - tree)}"


def test_top_of_the_library_stays_small():
    entries = [p.name for p in (ROOT / "streamvid").iterdir() if p.name != "__pycache__"
               and (p.suffix == ".py" or (p / "__init__.py").exists())]
    assert len(entries) <= 21, sorted(entries)  # 15 packages; config, errors, once, periodic, types


@pytest.mark.skipif(importlib.util.find_spec("importlinter") is None,
                    reason="import-linter is not installed (the test extra installs it)")
def test_import_layers_hold():
    run = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()",
                          "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def import_cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of a module graph (module -> the modules it imports), each as its modules in a strongly
    connected component of two or more (Tarjan's algorithm); a module importing itself is not a cycle."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        on.add(m)
        for d in imports.get(m, ()):
            if d not in index:
                visit(d)
                low[m] = min(low[m], low[d])
            elif d in on:
                low[m] = min(low[m], index[d])
        if low[m] == index[m]:
            part = []
            while True:
                x = stack.pop()
                on.discard(x)
                part.append(x)
                if x == m:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for m in sorted(imports):
        if m not in index:
            visit(m)
    return found


def test_import_cycles_are_found():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d", "a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.skipif(importlib.util.find_spec("grimp") is None,
                    reason="grimp is not installed (import-linter, in the test extra, brings it)")
def test_no_import_circles():
    import grimp

    graph = grimp.build_graph("streamvid", "streamvid_app")
    imports = {m: {d for d in graph.find_modules_directly_imported_by(m) if d.split(".")[0] in
                   ("streamvid", "streamvid_app")} for m in graph.modules}
    assert import_cycles(imports) == []


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (the test extra installs it)")
def test_no_private_name_is_reached_across_objects():
    """`obj._name` only on self or cls (ruff's SLF001), in the library, the app, the tests, benchmarks and scripts:
    what another module needs is a public name."""
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "SLF001", "--output-format", "concise",
                          "streamvid", "app", "tests", "benchmarks", "scripts"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
