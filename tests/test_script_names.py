"""Default task names agree between a module run as a script and its importers.

The layout the README shows: ``app.py`` registers default-named handlers and
ends with ``if __name__ == "__main__": app.run_worker()``; it is started as
``python app.py`` (so it is ``__main__``), while producers ``import app`` and
enqueue ``app.add``. Real processes in a fresh directory, on both backends:
the jobs must succeed, not die as unknown tasks. Then the rule's other cases
(``python -m``, a package, a multiprocessing child, no file at all), each in a
real interpreter.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether import JobState
from tether.model import TERMINAL_STATES
from tether.naming import default_task_name, module_name_of
from tether.store import Store

pytestmark = pytest.mark.processes

SRC = Path(__file__).resolve().parent.parent / "src"

APP = '''
import os
from tether import JobContext, Tether

app = Tether(os.environ["TETHER_DATABASE_URL"], lease_ttl=2, heartbeat_interval=0.4, reaper_interval=0.5)

@app.task
def add(ctx: JobContext, x: int, y: int) -> int:
    return x + y

@app.task()
async def shout(ctx: JobContext, word: str) -> str:
    return word.upper()

class Maths:
    @staticmethod
    def double(ctx: JobContext, x: int) -> int:
        return 2 * x

double = app.task(Maths.double)

if __name__ == "__main__":
    print("names:", sorted(app.tasks), flush=True)
    app.run_worker(concurrency=2)
'''

PRODUCER = '''
import app
print(app.add.enqueue(x=2, y=3), app.shout.enqueue(word="hi"), app.double.enqueue(x=21))
print(sorted(app.app.tasks))
'''


def _env(db_url: str) -> dict[str, str]:
    # Only tether's sources on the path: the script's own directory is what
    # Python adds for `python app.py`, and the producer's cwd for `python -c`.
    return {**os.environ, "TETHER_DATABASE_URL": db_url, "PYTHONPATH": str(SRC)}


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "app.py").write_text(textwrap.dedent(APP))
    return folder


@pytest.fixture
def worker(project: Path, db_url: str, store: Store) -> Iterator[subprocess.Popen[str]]:
    # Started from elsewhere, by path, as people do from a service file.
    log = (project.parent / "worker.log").open("w")
    proc = subprocess.Popen([sys.executable, str(project / "app.py")], cwd=project.parent, env=_env(db_url),
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()


def test_a_script_worker_runs_the_jobs_its_importers_enqueue(
    project: Path, db_url: str, store: Store, worker: subprocess.Popen[str]
) -> None:
    out = _run(["-c", PRODUCER], project, _env(db_url)).split("\n")
    ids = [int(i) for i in out[0].split()]
    assert out[1] == "['app.Maths.double', 'app.add', 'app.shout']"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        jobs = [store.get_job(i) for i in ids]
        if all(j is not None and j.state in TERMINAL_STATES for j in jobs):
            break
        assert worker.poll() is None, (project.parent / "worker.log").read_text()
        time.sleep(0.1)
    log = (project.parent / "worker.log").read_text()
    assert "names: ['app.Maths.double', 'app.add', 'app.shout']" in log
    results = [(j.state, j.result, j.last_error) for i in ids if (j := store.get_job(i)) is not None]
    assert results == [(JobState.SUCCEEDED, 5, None), (JobState.SUCCEEDED, "HI", None),
                       (JobState.SUCCEEDED, 42, None)], log


NAMES = '''
import sys
from tether import Tether
app = Tether("sqlite:///unused.db")
@app.task
def add(ctx, x): return x
print(add.name)
'''


def test_python_m_and_packages_take_the_importers_name(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    pkg = tmp_path / "pkg" / "sub"
    pkg.mkdir(parents=True)
    for folder in (pkg.parent, pkg):
        (folder / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(NAMES)
    (tmp_path / "pkg" / "__main__.py").write_text(NAMES)
    (tmp_path / "plain.py").write_text(NAMES)
    assert _run(["-m", "pkg.sub.mod"], tmp_path, env).strip() == "pkg.sub.mod.add"
    # By path, with the package's parent on sys.path (installed, or PYTHONPATH):
    # the package's name; without it, the name this process can import it by.
    on_path = {**env, "PYTHONPATH": f"{SRC}{os.pathsep}{tmp_path}"}
    assert _run([str(tmp_path / "pkg/sub/mod.py")], Path("/"), on_path).strip() == "pkg.sub.mod.add"
    assert _run(["pkg/sub/mod.py"], tmp_path, env).strip() == "mod.add"
    assert _run(["-m", "pkg"], tmp_path, env).strip() == "pkg.__main__.add"
    assert _run(["-m", "plain"], tmp_path, env).strip() == "plain.add"
    assert _run([str(tmp_path / "plain.py")], Path("/"), env).strip() == "plain.add"
    # Imported, as a worker's --app imports it: the same names.
    assert _run(["-c", "import pkg.sub.mod"], tmp_path, env).strip() == "pkg.sub.mod.add"
    assert _run(["-c", "import plain"], tmp_path, env).strip() == "plain.add"


def test_a_stray_init_beside_the_script_does_not_change_its_name(tmp_path: Path) -> None:
    # app.py in a folder that happens to hold an __init__.py, whose parent is
    # not on sys.path: importers there `import app`, so the name is app.add.
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "app.py").write_text(NAMES)
    assert _run(["app.py"], tmp_path, env).strip() == "app.add"
    assert _run(["-c", "import app"], tmp_path, env).strip() == "app.add"


def test_a_multiprocessing_child_of_a_script_takes_the_same_name(tmp_path: Path) -> None:
    # A spawned child re-runs the script as __mp_main__.
    (tmp_path / "spawner.py").write_text(NAMES.replace("print(add.name)", textwrap.dedent('''
        def child(q): q.put(add.name)
        if __name__ == "__main__":
            import multiprocessing as mp
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,))
            p.start()
            print(add.name, q.get(timeout=30))
            p.join()
        ''')))
    out = _run(["spawner.py"], tmp_path, {**os.environ, "PYTHONPATH": str(SRC)})
    assert out.split() == ["spawner.add", "spawner.add"]


def test_no_file_behind_main_refuses_with_a_clear_message(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", NAMES], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(SRC)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "ConfigError: task 'add' is defined in __main__ with no file behind it" in done.stderr
    assert "@app.task(name='add')" in done.stderr
    # An explicit name is always taken as given.
    named = NAMES.replace("@app.task\n", "@app.task(name='add')\n")
    assert _run(["-c", named], tmp_path, {**os.environ, "PYTHONPATH": str(SRC)}).strip() == "add"


def test_module_name_of_paths(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    root, pkg = str(tmp_path), str(tmp_path / "pkg")
    assert module_name_of(tmp_path / "app.py", [root]) == "app"
    assert module_name_of(tmp_path / "pkg" / "mod.py", [pkg, root]) == "pkg.mod"  # the longest
    assert module_name_of(tmp_path / "pkg" / "mod.py", [pkg]) == "mod"
    assert module_name_of(tmp_path / "pkg" / "mod.py", []) == "pkg.mod"  # under no entry: the package walk
    assert module_name_of(tmp_path / "pkg" / "__init__.py", [root]) == "pkg"
    assert module_name_of(tmp_path / "my-app.py", [root]) is None  # not an identifier
    assert module_name_of(tmp_path / "app", [root]) is None  # no .py: nothing imports it
    assert default_task_name(module_name_of) == "tether.naming.module_name_of"  # imported modules: as before


def test_an_unimportable_script_name_refuses(tmp_path: Path) -> None:
    (tmp_path / "my-app.py").write_text(NAMES)
    done = subprocess.run([sys.executable, "my-app.py"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(SRC)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stderr
    assert "ConfigError: task 'add' is defined in the script" in done.stderr
    assert "is not an importable module name" in done.stderr


TWICE_APP = '''
import sys
from tether import JobContext, Tether

app = Tether(sys.argv[1])

@app.task
def first(ctx: JobContext) -> int:
    return 1

if sys.argv[2] == "cycle":
    import extra  # extra.py does `from app import app`: Python runs this file again, as module app

if __name__ == "__main__":
    app.migrate()
    app.run_worker(burst=True)
'''

TWICE_EXTRA = '''
from tether import JobContext
from app import app

@app.task
def third(ctx: JobContext) -> int:
    return 3
'''


@pytest.mark.parametrize("layout", ["cycle", "plain"])
def test_a_script_imported_again_by_its_module_name_is_warned_of(tmp_path: Path, layout: str) -> None:
    """``python app.py`` where a module it imports does ``from app import app``
    makes two apps; the worker's lacks extra.third and would leave its jobs
    queued without a word. The worker names the lost tasks and the fix."""
    (tmp_path / "app.py").write_text(TWICE_APP)
    (tmp_path / "extra.py").write_text(TWICE_EXTRA)
    done = subprocess.run([sys.executable, "app.py", f"sqlite:///{tmp_path / 't.db'}", layout], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    warned = "was also imported as the module 'app'" in done.stderr
    assert warned is (layout == "cycle"), done.stderr
    if warned:
        assert "(extra.third) are not this worker's" in done.stderr
        assert "tether worker --app app:app" in done.stderr
