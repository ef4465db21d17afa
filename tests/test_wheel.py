"""The package a user installs: ``python -m build`` makes an sdist and a wheel
(the wheel from the sdist, so the sdist is whole) that pass ``twine check``;
the wheel holds the SQL, the dashboard's files and ``py.typed``; installed
into a fresh virtualenv by the tutorial's own install lines, from a directory
outside the source tree, it runs the tutorial (migrate, enqueue from an app
module, a burst worker, a worker SIGKILLed mid-job and its job recovered) on
SQLite and on PostgreSQL.

Quick and offline after the first run: the build runs without isolation (the
test extra brings setuptools), and the wheel's dependencies come from a
wheelhouse kept under ~/.cache (made once with ``pip wheel``, which reads
pip's cache), so the install itself runs with ``PIP_NO_INDEX``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import tether
from tests.tutorial_run import TUTORIAL, check_tutorial, run_tutorial, tutorial_url

pytestmark = [pytest.mark.processes, pytest.mark.wheel]

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tether-tests" / "wheelhouse"


def _run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float = 300) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, args))} exited {done.returncode}:\n{done.stdout}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    return out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("tether-*.whl")
    return wheel


def test_dists_pass_twine_check(dist: Path) -> None:
    (sdist,) = dist.glob("tether-*.tar.gz")
    assert sdist.name == f"tether-{tether.__version__}.tar.gz"
    assert _wheel(dist).name == f"tether-{tether.__version__}-py3-none-any.whl"
    output = _run(sys.executable, "-m", "twine", "check", "--strict", sdist, _wheel(dist))
    assert output.count("PASSED") == 2, output


def test_wheel_holds_the_package_data_and_metadata(dist: Path) -> None:
    with zipfile.ZipFile(_wheel(dist)) as zf:
        names = set(zf.namelist())
        (meta_name,) = (n for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(meta_name).decode())
    source = ROOT / "src"
    wanted = {str(p.relative_to(source)) for p in (source / "tether").rglob("*")
              if p.is_file() and p.suffix in (".sql", ".html", ".css", ".js", ".typed", ".py")
              and "__pycache__" not in p.parts}
    assert "tether/py.typed" in wanted and "tether/store/postgres/queries.sql" in wanted
    assert wanted <= names, sorted(wanted - names)
    assert meta["Version"] == tether.__version__
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("License-File") == ["LICENSE"]
    (license_name,) = (n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
    with zipfile.ZipFile(_wheel(dist)) as zf:
        assert zf.read(license_name).decode() == (ROOT / "LICENSE").read_text()
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    assert meta["Requires-Python"] == ">=3.11"
    assert "Typing :: Typed" in meta.get_all("Classifier")
    extras = set(meta.get_all("Provides-Extra"))
    assert {"nats", "server", "dashboard", "metrics", "otel", "django", "docs"} <= extras, extras


def _wheelhouse(wheel: Path) -> Path:
    """The wheel's dependencies as wheels, kept between runs (keyed by what the
    wheel requires), so that installing it needs no network."""
    with zipfile.ZipFile(wheel) as zf:
        (meta_name,) = (n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(meta_name).decode())
    needs = sorted(r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r)
    house = CACHE / hashlib.sha256("\n".join([sys.version, *needs]).encode()).hexdigest()[:16]
    if not (house / ".complete").exists():
        house.mkdir(parents=True, exist_ok=True)
        _run(sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", house, *needs)
        (house / ".complete").touch()
    return house


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh directory in which the tutorial's install lines ran, pip
    pointed at the built wheel: its .venv/bin."""
    home = tmp_path_factory.mktemp("reader")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV", "TETHER_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PIP_NO_INDEX"] = "1"
    env["PIP_FIND_LINKS"] = f"{dist} {_wheelhouse(_wheel(dist))}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _run("bash", TUTORIAL / "install.sh", cwd=home, env=env)
    bin_dir = home / ".venv" / "bin"
    where = _run(bin_dir / "python", "-c", "import tether; print(tether.__file__, tether.__version__)",
                 cwd=home, env={k: v for k, v in env.items() if not k.startswith("PIP_")})
    path, version = where.split()
    assert Path(path).is_relative_to(home / ".venv"), f"tether came from {path}, not the fresh venv"
    assert version == tether.__version__
    return bin_dir


def test_tutorial_from_the_wheel(installed: Path, backend: str, db_url: str, tmp_path: Path) -> None:
    url = tutorial_url(backend, db_url)
    output = run_tutorial(installed, tmp_path / "tutorial", url)
    assert "succeeded" in output
    check_tutorial(tmp_path / "tutorial", url)
