"""Default task names: ``module.qualname``, where ``module`` is the name the
handler's module is imported under, also when it runs as a script.

A module run as ``python app.py`` is ``__main__`` (``__mp_main__`` again in a
multiprocessing child), yet every producer that does ``import app`` gets
``app``. Naming its tasks ``__main__.add`` would make the worker started that
way and its producers disagree on every name, and each job would die as an
unknown task. So a script's tasks take the name its importers use:

1. run with ``python -m pkg.mod``: ``__spec__.name`` (``pkg.mod``);
2. run as a file: the file's path, dotted, from the first directory upward
   that is not a package (has no ``__init__.py``): ``app`` for ``app.py`` in
   a plain directory, ``pkg.mod`` for ``pkg/mod.py`` beside
   ``pkg/__init__.py``. That is what ``import`` resolves from that directory
   (the script's own directory is on ``sys.path`` when Python runs it);
3. no file at all (an interactive session, ``python -c``, a notebook): no
   importable name exists, and registration refuses with a clear message
   rather than invent one no other process can match.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = ["default_task_name"]

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


def module_name_of(file: Path) -> str | None:
    """The dotted name ``import`` finds ``file`` under, counting from the first
    directory upward that is not a package; None if a part is not an identifier."""
    path = file.resolve()
    parts = [] if path.stem == "__init__" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    if not parts or not all(p.isidentifier() for p in parts) or path.suffix != ".py":
        return None
    return ".".join(parts)
