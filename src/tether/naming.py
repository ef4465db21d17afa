"""Task names: what one may be (``validate_task_name``: printable, at most 200
characters, as the server's wire schema has it too), and the default,
``module.qualname``, where ``module`` is the name the handler's module is
imported under, also when it runs as a script.

A module run as ``python app.py`` is ``__main__`` (``__mp_main__`` again in a
multiprocessing child), yet every producer that does ``import app`` gets
``app``. Naming its tasks ``__main__.add`` would make the worker started that
way and its producers disagree on every name, and each job would die as an
unknown task. So a script's tasks take the name its importers use:

1. run with ``python -m pkg.mod``: ``__spec__.name`` (``pkg.mod``);
2. run as a file: the file's path, dotted, relative to the ``sys.path`` entry
   it is imported from: ``app`` for ``app.py`` (Python puts the script's own
   directory on ``sys.path``). When a longer name also works, because the
   file sits in a package (``pkg/mod.py`` beside ``pkg/__init__.py``) whose
   parent is on ``sys.path`` too (installed, or on ``PYTHONPATH``), the
   longer one: ``pkg.mod``, what ``import pkg.mod`` gives. A file under no
   entry (``python -P``) is named as if its first non-package ancestor were;
3. no file at all (an interactive session, ``python -c``, a notebook), or a
   file name that is not a module name (``my-app.py``): no importable name
   exists, and registration refuses with a clear message rather than invent
   one no other process can match.

A module inside a package run by path while the package's parent is not on
``sys.path`` is named from its own directory (``mod``), as this process can
import it; run it with ``python -m pkg.mod`` for ``pkg.mod``.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = ["C0_CONTROLS", "MAX_HOST", "MAX_TASK_NAME", "MAX_WORKER_ID", "OTHER_CONTROLS", "TASK_NAME_PATTERN",
           "check_worker_identity", "default_task_name", "script_loaded_twice", "validate_identity", "validate_task_name"]

#: characters that steer a terminal or reorder what it shows rather than print
#: (regex class ranges, read alike by Python and by JSON Schema's ECMA-262): the
#: C0 controls (ESC among them), then DEL, the C1 controls (CSI alone is
#: U+009B), the line and paragraph separators and the bidirectional overrides
C0_CONTROLS = r"\x00-\x1f"
OTHER_CONTROLS = r"\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
MAX_TASK_NAME = 200
#: a task name: printable text, 1 to MAX_TASK_NAME characters; the server's wire
#: schema holds names to the same pattern and length (store/http/wire.py TASK)
TASK_NAME_PATTERN = f"^[^{C0_CONTROLS}{OTHER_CONTROLS}]*$"
_TASK_NAME = re.compile(TASK_NAME_PATTERN[:-1] + r"\Z")


def validate_task_name(name: str) -> str:
    """A task name as the app registers it and the server takes it: 1 to 200
    characters, none of them a control character (the default name,
    ``module.qualname``, is one unless it runs past 200 characters)."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_TASK_NAME or not _TASK_NAME.match(name):
        raise ConfigError(
            f"task name {name!r} is not usable: give 1 to {MAX_TASK_NAME} characters, none of them a control "
            "character (newline, tab, escape, a bidirectional override...)"
        )
    return name


#: Unicode categories an identity may not contain: controls (Cc), format
#: characters (Cf: zero-width spaces and joiners, the bidi marks and overrides,
#: soft hyphens, the BOM), line and paragraph separators (Zl, Zp), surrogates
#: (Cs), private use (Co) and unassigned code points (Cn)
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
#: scripts whose letters pass for one another (Latin "a", Cyrillic U+0430, Greek U+03B1):
#: an identity may use letters of one of them, not a mix
LOOKALIKE_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")
MAX_WORKER_ID, MAX_HOST = 200, 255


def validate_identity(text: str, what: str, max_length: int) -> str:
    """A worker id or host as a worker registers it: one that displays as
    exactly one identity. 1 to ``max_length`` characters; unchanged by NFKC
    normalisation (no full-width letters, ligatures, superscripts, no-break or
    other odd spaces: compatibility forms of other characters); no character
    of ``REFUSED_CATEGORIES`` (terminal escapes, zero-width characters, bidi
    overrides); no whitespace but the plain space, none at either end; and no
    letters from two of ``LOOKALIKE_SCRIPTS`` ("worker-1" with a Cyrillic
    "o", U+043E). ConfigError otherwise, naming the first offending character."""
    if not isinstance(text, str) or not 1 <= len(text) <= max_length:
        shown = f"{len(text)} characters" if isinstance(text, str) else type(text).__name__
        raise ConfigError(f"{what} must be 1 to {max_length} characters, got {shown}")
    problem = _identity_problem(text)
    if problem is not None:
        raise ConfigError(f"{what} {text[:60]!r} is refused: {problem} (an identity must display as itself: "
                          "printable, no invisible, reordering or look-alike characters)")
    return text


def check_worker_identity(worker_id: str, host: str) -> None:
    """A registering worker's id and host (every store's ``register_worker``)."""
    validate_identity(worker_id, "worker id", MAX_WORKER_ID)
    validate_identity(host, "worker host", MAX_HOST)


def _identity_problem(text: str) -> str | None:
    if text.isascii():  # the usual case, cheaply: only controls can be wrong
        bad = next((c for c in text if c < " " or c == "\x7f"), None)
        if bad is not None:
            return f"it contains the control character U+{ord(bad):04X}"
        return "it starts or ends with a space" if text != text.strip() else None
    for c in text:
        category = unicodedata.category(c)
        if category in REFUSED_CATEGORIES:
            return f"it contains U+{ord(c):04X} ({unicodedata.name(c, 'unnamed')}, category {category})"
        if c.isspace() and c != " ":
            return f"it contains the space U+{ord(c):04X} ({unicodedata.name(c, 'unnamed')})"
    if unicodedata.normalize("NFKC", text) != text:
        c = next(c for c in text if unicodedata.normalize("NFKC", c) != c)
        return (f"U+{ord(c):04X} ({unicodedata.name(c, 'unnamed')}) is a compatibility form of "
                f"{unicodedata.normalize('NFKC', c)!r} (not NFKC-normalised)")
    scripts = {name.split(" ")[0] for c in text if c.isalpha() and (name := unicodedata.name(c, "")).startswith(
        LOOKALIKE_SCRIPTS)}
    if len(scripts) > 1:
        return f"it mixes letters of the {' and '.join(sorted(scripts))} scripts"
    return "it starts or ends with a space" if text != text.strip() else None


#: the names a module run as the program goes by (multiprocessing's spawned
#: children re-run the main script as ``__mp_main__``)
SCRIPT_MODULES = frozenset({"__main__", "__mp_main__"})


def default_task_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of a handler, with a script's module named as its importers name it."""
    module = fn.__module__
    if module in SCRIPT_MODULES:
        module = _importable_name(module, fn)
    return f"{module}.{fn.__qualname__}"


def _importable_name(module: str, fn: Callable[..., Any]) -> str:
    main = sys.modules.get(module)
    spec = getattr(main, "__spec__", None)
    spec_name = getattr(spec, "name", None)
    if isinstance(spec_name, str) and spec_name and spec_name not in SCRIPT_MODULES:
        return spec_name  # python -m pkg.mod
    file = getattr(main, "__file__", None)
    if not isinstance(file, str) or not file:
        raise ConfigError(
            f"task {fn.__qualname__!r} is defined in {module} with no file behind it (an interactive session, "
            "python -c, or a notebook), so no other process can import it under a name that matches: give it "
            f"a name, @app.task(name={fn.__qualname__!r}), or define it in a module that workers import")
    name = module_name_of(Path(file))
    if name is None:
        raise ConfigError(
            f"task {fn.__qualname__!r} is defined in the script {file}, whose path is not an importable module "
            "name (every part must be a Python identifier), so its importers cannot match its default name: "
            f"rename the file, or give the task a name, @app.task(name={fn.__qualname__!r})")
    return name


def module_name_of(file: Path, path: Sequence[str] | None = None) -> str | None:
    """The dotted name ``file`` is imported under from ``path`` (``sys.path``):
    the longest that some entry gives through regular packages; None if its
    parts are not identifiers or it is not a ``.py`` file."""
    file = file.resolve()
    if file.suffix != ".py":
        return None
    parts = [] if file.stem == "__init__" else [file.stem]
    folder = file.parent
    names: list[tuple[Path, list[str]]] = [(folder, parts)] if parts else []
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts = [folder.name, *parts]
        folder = folder.parent
        names.append((folder, parts))
    if not names:
        return None
    entries = {Path(e or ".").resolve() for e in (sys.path if path is None else path) if isinstance(e, str)}
    on_path = [p for base, p in names if base in entries]
    chosen = on_path[-1] if on_path else names[-1][1]
    return ".".join(chosen) if all(p.isidentifier() for p in chosen) else None


def script_loaded_twice(app: object) -> str | None:
    """When ``app`` was made by a script (``python app.py``, ``__main__``)
    that a module then imported by its name (``from app import app``), Python
    ran the file twice and made two apps: the tasks registered on the
    module's copy are not ``app``'s, and a worker of ``app`` never runs them.
    A warning that names them and the way out; None otherwise."""
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    attr = next((k for k, v in vars(main).items() if v is app), None) if main_file else None
    if not isinstance(main_file, str) or attr is None:
        return None
    try:
        here = Path(main_file).resolve()
        files = [(name, m, f) for name, m in list(sys.modules.items())
                 if m is not None and m is not main and isinstance(f := getattr(m, "__file__", None), str)
                 and Path(f).name == here.name]  # the cheap test first: resolve() reads the disk
        copies = [(name, m) for name, m, f in files if Path(f).resolve() == here]
    except (OSError, ValueError):
        return None
    mine = set(getattr(app, "tasks", ()))
    for name, module in copies:
        others = [v for v in vars(module).values() if type(v) is type(app) and v is not app]
        missing = sorted({t for o in others for t in getattr(o, "tasks", ())} - mine)
        if others:
            lost = (f"the tasks registered on the module's ({', '.join(missing)}) are not this worker's, and "
                    "it never runs them" if missing else "tasks registered on the module's later are not this "
                    "worker's")
            return (f"{here.name} runs as the script (__main__) and was also imported as the module {name!r} "
                    f"(something imported it by name), so it made two apps: {lost}. Start the worker with "
                    f"`tether worker --app {name}:{attr}`, or from a script of its own that imports {name}")
    return None
