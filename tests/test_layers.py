"""The shape of the code stays as docs/architecture.md draws it: imports go
down the layers only (type-only and deferred imports included), no circle of
imports anywhere in ``src/tether``, and no module grows past a few hundred
lines. Read from the source with ``ast``: nothing is imported to check it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
ROOT = SRC / "tether"

#: lowest first; a module may import its own layer and the ones below it. The
#: first prefix that matches a module's dotted name decides its layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("ground", ("tether._version", "tether.errors", "tether.model", "tether.config", "tether.payload", "tether.logs",
                "tether.naming", "tether.display", "tether.cron", "tether.scratch", "tether.numbers", "tether.jobid", "tether.schedule_model",
                "tether.convert", "tether.search", "tether.key_patterns")),
    ("store parts", ("tether.store.base", "tether.store.buckets", "tether.store.columns", "tether.store.rows",
                     "tether.store.sqlfile", "tether.store.many",
                     "tether.store.pruning", "tether.store.push", "tether.store.worker_rows", "tether.store.control",
                     "tether.store.shared_tx", "tether.store.per_loop", "tether.store.idle",
                     "tether.store.http.schema", "tether.store.http.wire", "tether.store.http.wire_unknown",
                     "tether.store.http.wire_schedules", "tether.store.http.wire_errors",
                     "tether.store.http.wire_many", "tether.store.http.wire_limits", "tether.store.http.wire_flows",
                     "tether.store.http.records",
                     "tether.store.schedules", "tether.store.flows")),
    ("backends", ("tether.store.sqlite", "tether.store.postgres", "tether.store.http")),
    ("store seam", ("tether.store",)),
    ("runtime parts", ("tether.events", "tether.context", "tether.tracing", "tether.transport")),
    ("runtime", ("tether.worker",)),
    ("app", ("tether.app", "tether.workflows", "tether.batches", "tether.many", "tether.task", "tether.handlers", "tether.spec",
             "tether.periodic", "tether.callers", "tether.schedule_control", "tether.queue_control")),
    ("package", ("tether",)),
    ("faces", ("tether.cli", "tether.dashboard", "tether.server", "tether.otel", "tether.metrics",
               "tether.chaos", "tether.__main__", "tether.testing", "tether.contrib")),
]
#: faces are listed last above but must win over "tether" for their own names
_FACES = LAYERS[-1][1]
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def layer_of(module: str) -> int:
    if module.startswith(_FACES):
        return len(LAYERS) - 1
    best = -1
    best_len = -1
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = rank, len(prefix)
    assert best >= 0, f"{module} is in no layer: add it to LAYERS"
    return best


def imports_of(module: str) -> Iterator[tuple[str, int]]:
    """(imported tether module, line) for every import in the module, wherever it stands."""
    path = MODULES[module]
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tether":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "tether":
                continue
            # `from pkg import submodule` imports the submodule
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            yield from ((sub, node.lineno) for sub in subs)
            if len(subs) < len(node.names):
                yield target, node.lineno


def graph() -> dict[str, set[str]]:
    return {m: {t for t, _ in imports_of(m) if t in MODULES and t != m} for m in MODULES}


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_imports_only_go_down() -> None:
    upward = []
    for module in sorted(MODULES):
        for target, line in imports_of(module):
            if target in MODULES and layer_of(target) > layer_of(module):
                upward.append(f"{MODULES[module].relative_to(SRC)}:{line}: {module} ({LAYERS[layer_of(module)][0]}) "
                              f"imports {target} ({LAYERS[layer_of(target)][0]})")
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles() -> None:
    # A package's __init__ that re-exports its submodules, and a submodule that
    # imports a sibling through the package, are one circle in this graph; a
    # submodule may not import its own package's __init__ for that reason.
    assert _cycles(graph()) == []


def test_the_checker_sees_circles_and_upward_imports() -> None:
    """The two checks above would fail on what they look for."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert layer_of("tether.app") > layer_of("tether.worker.runtime") > layer_of("tether.store")
    assert layer_of("tether.cli.main") > layer_of("tether")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module: str) -> None:
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(SRC)} has {lines} lines (at most {MAX_LINES}): split it"
