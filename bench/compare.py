"""A/B of two versions of tether: a given commit (A) against the working tree (B).

Called by ``bash bench/run --compare REV [options] [SCENARIO ...]``:

    bash bench/run --compare 2d194b0 enqueue                 # single enqueue, 2,000 jobs after 100, 6 rounds
    bash bench/run --compare HEAD~3 --rounds 8 enqueue startup
    bash bench/run --compare main throughput --args 'throughput=--config 1x10 --n 20000'

A is installed from ``git archive REV`` into a virtualenv of its own
(``bench/.venvs/rev-<sha>``, non-editable, with the ``nats`` and ``server``
extras, its dependencies resolved from its own pyproject; kept for the next
comparison of the same commit). B is the working tree, through the bench's
``tether`` venv (an editable install). The caller's own venv is never touched.
The harness (bench/common.py, bench/apps/) is the working tree's for both, so
only tether differs.

Each round runs every chosen scenario on both sides, one after the other,
A then B in even rounds and B then A in odd ones (ABBA...), so a drift of the
shared host's speed weighs on both alike. Each side's run is one repetition of
the scenario as ``bench/scenarios/<name>.py`` would run it (``--reps 1``, tether
only). For every figure the scenario reports, the table shows A's and B's
medians with their range, and B/A: the median of the rounds' paired ratios and
their range (each round's A and B ran minutes apart at most). Lower is better
for times and CPU, higher for rates. The JSON of every run and the table go to
``--out`` (default: a directory under bench/results/raw-tmp/, gitignored).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "scenarios"))
import common as C

#: what each scenario runs by default in a comparison (``--args NAME=...`` replaces it)
DEFAULT_ARGS: dict[str, list[str]] = {
    "enqueue": ["--system", "tether", "--mode", "sync", "--n-single", "2000", "--warmup", "100"],
    "throughput": ["--system", "tether", "--config", "1x10", "--n", "20000"],
    "latency": ["--system", "tether", "--samples", "200"],
    "startup": ["--samples", "5"],
}
#: keys of a scenario's summary that are not figures
NOT_FIGURES = {"n", "reps", "ok_reps", "rep", "samples", "n_bulk", "n_single", "batch", "backlog"}


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(C.REPO), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def install_rev(sha: str) -> Path:
    """A virtualenv with tether as of commit ``sha`` (built once, then reused)."""
    venv = C.VENVS / f"rev-{sha[:12]}"
    stamp = venv / ".bench-stamp"
    if stamp.exists() and stamp.read_text().strip() == sha:
        return venv
    C.log(f"compare: installing {sha[:12]} into {venv}")
    shutil.rmtree(venv, ignore_errors=True)
    src = Path(tempfile.mkdtemp(prefix=f"tether-{sha[:12]}-"))
    try:
        archive = subprocess.run(["git", "-C", str(C.REPO), "archive", sha], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        python = C.VENVS / "tether" / "bin" / "python"  # the same interpreter as B's venv
        base = subprocess.run([str(python), "-c", "import sys; print(sys._base_executable)"], check=True,
                              capture_output=True, text=True).stdout.strip()
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
        p = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"{src}[nats,server]"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            sys.exit(f"compare: installing {sha[:12]} failed:\n{p.stderr[-3000:]}")
    finally:
        shutil.rmtree(src, ignore_errors=True)
    stamp.write_text(sha + "\n")
    return venv


def figures(result: dict[str, Any]) -> dict[str, float]:
    """The numeric leaves of a scenario's summary: ``systems.tether`` when it
    has one (side-by-side scenarios), else its ``figures`` or the whole answer."""
    root: Any = result.get("systems", {}).get("tether") or result.get("figures") or result
    out: dict[str, float] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k not in NOT_FIGURES and k != "runs":
                    walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            out[path] = float(node)

    walk(root, "")
    return out


def spread(xs: list[float]) -> str:
    return f"{C.median(xs):.4g} [{min(xs):.4g}-{max(xs):.4g}]" if xs else "-"


def table(name: str, a_label: str, b_label: str, rounds: list[dict[str, dict[str, float]]]) -> str:
    keys = [k for k in rounds[0]["A"] if all(k in r["A"] and k in r["B"] for r in rounds)]
    lines = [f"### {name}: A = {a_label}, B = {b_label}; {len(rounds)} rounds (ABBA...), median [min-max]", "",
             "| figure | A | B | B/A (paired) |", "|---|---|---|---|"]
    for k in keys:
        a = [r["A"][k] for r in rounds]
        b = [r["B"][k] for r in rounds]
        ratios = [y / x for x, y in zip(a, b, strict=True) if x]
        lines.append(f"| {k} | {spread(a)} | {spread(b)} | {spread(ratios)} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("rev", help="the commit to compare the working tree with (A)")
    p.add_argument("scenarios", nargs="*", default=["enqueue"], help="scenarios (default: enqueue)")
    p.add_argument("--rounds", type=int, default=6, help="rounds of A and B (default 6)")
    p.add_argument("--args", action="append", default=[], metavar="NAME=ARGS",
                   help="a scenario's options instead of its defaults, e.g. 'enqueue=--mode sync --n-single 5000'")
    p.add_argument("--out", default=None)
    args = p.parse_intermixed_args()
    overrides = {k: shlex.split(v) for k, v in (a.split("=", 1) for a in args.args)}
    sha = git("rev-parse", "--verify", args.rev + "^{commit}")
    dirty = " (uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    a_label = f"{args.rev} ({sha[:9]})"
    b_label = f"working tree ({git('rev-parse', '--short=9', 'HEAD')}{dirty})"
    venvs = {"A": install_rev(sha), "B": C.VENVS / "tether"}
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or C.BENCH / "results" / "raw-tmp" / f"compare-{stamp}-{sha[:9]}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    tether_systems = [s for s in C.SYSTEMS.values() if s.venv == "tether"]
    results: dict[str, list[dict[str, dict[str, float]]]] = {s: [] for s in args.scenarios}
    raw: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for name in args.scenarios:
            argv = [*overrides.get(name, DEFAULT_ARGS.get(name, [])), "--reps", "1"]
            pair: dict[str, dict[str, float]] = {}
            for side in ("A", "B") if rnd % 2 == 0 else ("B", "A"):
                for s in tether_systems:
                    s.venv = str(venvs[side])  # an absolute path: VENVS / it is itself
                C.log(f"compare: round {rnd + 1}/{args.rounds} {name} {side}")
                res = importlib.import_module(name).main([*argv, "--out", str(out / f"r{rnd}-{side}")])
                pair[side] = figures(res)
                raw.append({"round": rnd, "scenario": name, "side": side, "figures": pair[side]})
            results[name].append(pair)
    for s in tether_systems:
        s.venv = "tether"
    report = "\n\n".join(table(n, a_label, b_label, r) for n, r in results.items())
    header = (f"bench/run --compare {args.rev} {' '.join(args.scenarios)} --rounds {args.rounds}; "
              f"{_dt.datetime.now().isoformat(timespec='minutes')}, load {os.getloadavg()[0]:.1f} at the end\n\n")
    (out / "compare.md").write_text(header + report + "\n")
    (out / "compare.json").write_text(json.dumps({"a": a_label, "b": b_label, "runs": raw}, indent=1) + "\n")
    print(header + report)
    C.log(f"compare: wrote {out}/compare.md")


if __name__ == "__main__":
    main()
