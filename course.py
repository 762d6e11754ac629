#!/usr/bin/env python3
"""Set up the hooktutor course environment and run it. Needs only Python 3.10+.

    python3 course.py lab       # create .venv if missing, install pinned versions, open JupyterLab
    python3 course.py test      # the same set-up, then the whole test suite
    python3 course.py regen     # re-execute every notebook top to bottom, storing its outputs
    python3 course.py doctor    # check the environment and say what to fix
    python3 course.py student OUTDIR   # write the student edition (solutions removed)
    python3 course.py compat    # the library tests on the oldest supported torch (own venv)
    python3 course.py setup     # only create/update .venv (what lab and test do first)

Extra arguments after the command go to jupyter lab / pytest / the tool. The environment
lives in .venv next to this file (set HOOKTUTOR_VENV to put it elsewhere). Exact versions
come from requirements/constraints.txt; it is reinstalled only when that file or
pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"
NOTEBOOKS = ROOT / "notebooks"
EXTRAS = "lab,test"
MIN_PYTHON = (3, 10)


def say(msg: str) -> None:
    print(f"[course] {msg}", flush=True)


# The oldest torch that pyproject.toml admits, and what it needs beside it (torch < 2.3 was
# built against NumPy 1.x).
OLDEST = ["torch==2.1.2", "numpy<2"]


def venv_dir(compat: bool = False) -> Path:
    if compat:
        return Path(os.environ.get("HOOKTUTOR_COMPAT_VENV", ROOT / ".venv-oldest")).resolve()
    return Path(os.environ.get("HOOKTUTOR_VENV", ROOT / ".venv")).resolve()


def venv_bin(name: str, compat: bool = False) -> Path:
    folder = "Scripts" if os.name == "nt" else "bin"
    exe = ".exe" if os.name == "nt" else ""
    return venv_dir(compat) / folder / f"{name}{exe}"


def run(cmd: list[str | os.PathLike], **kw) -> int:
    return subprocess.call([str(c) for c in cmd], cwd=kw.pop("cwd", ROOT), **kw)


def _stamp(install: list[str]) -> str:
    h = hashlib.sha256()
    for f in (CONSTRAINTS, ROOT / "pyproject.toml"):
        h.update(f.read_bytes())
    h.update(" ".join(install).encode())
    return h.hexdigest()


def ensure_env(compat: bool = False) -> Path:
    """Create the virtual environment if missing and install the pinned versions into it.

    With ``compat=True``: a separate environment with the oldest supported torch instead.
    """
    if sys.version_info < MIN_PYTHON:
        sys.exit(f"hooktutor needs Python {'.'.join(map(str, MIN_PYTHON))} or newer; this is "
                 f"{sys.version.split()[0]}. Run course.py with a newer python3.")
    where = venv_dir(compat)
    python = venv_bin("python", compat)
    if not python.exists():
        say(f"creating the {'compatibility' if compat else 'course'} environment in {where}")
        venv.EnvBuilder(with_pip=True, clear=False).create(where)
    if compat:
        install = [*OLDEST, "-e", ".[test]"]
        what = f"{OLDEST[0]} and the test tools"
    else:
        install = ["-c", str(CONSTRAINTS), "-e", f".[{EXTRAS}]"]
        what = "the pinned versions (torch 2.13.0 and the Jupyter stack)"
    stamp_file = where / ".hooktutor-stamp"
    stamp = _stamp(install)
    if stamp_file.exists() and stamp_file.read_text().strip() == stamp:
        return python
    say(f"installing {what}; the first time this takes a few minutes")
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *install]
    if run(cmd) != 0:
        sys.exit("[course] installing failed; see pip's message above. `python3 course.py doctor` "
                 "explains the usual causes (an old Python, no network to the package index).")
    stamp_file.write_text(stamp + "\n")
    return python


def notebooks() -> list[Path]:
    return sorted(p for p in NOTEBOOKS.glob("*.ipynb"))


def cmd_lab(args: list[str]) -> int:
    ensure_env()
    say("starting JupyterLab on notebooks/ (open the URL printed below; Ctrl-C stops it)")
    extra = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []  # containers, CI
    return run([venv_bin("jupyter"), "lab", "--no-browser", "--ip=127.0.0.1",
                f"--ServerApp.root_dir={NOTEBOOKS}",
                "--LabApp.default_url=/lab/tree/00_start_here.ipynb", *extra, *args])


def cmd_test(args: list[str]) -> int:
    python = ensure_env()
    say("running the library tests, every notebook under strict nbval, and the browser tests")
    if not any(a == "-n" or a.startswith("-n") or a.startswith("--numprocesses") for a in args):
        # one worker per core; a notebook (all its cells) or a test file stays on one worker
        args = ["-n", "auto", "--dist", "loadfile", *args]
    return run([python, "-m", "pytest", *args])


def cmd_regen(args: list[str]) -> int:
    python = ensure_env()
    targets = [Path(a).resolve() for a in args] or notebooks()
    for nb in targets:
        say(f"executing {nb.relative_to(ROOT)}")
        code = run([python, "-m", "hooktutor", "regen", nb])
        if code != 0:
            return code
    return 0


def cmd_compat(args: list[str]) -> int:
    python = ensure_env(compat=True)
    say(f"library tests on {OLDEST[0]} (notebook outputs are stored for the pinned torch, so "
        "notebooks and course-environment tests are left out)")
    return run([python, "-m", "pytest", "tests", "-m", "not course_env and not browser", *args])


def cmd_tool(sub: str, args: list[str]) -> int:
    python = ensure_env()
    return run([python, "-m", "hooktutor", sub, *args])


def main(argv: list[str]) -> int:
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "lab":
        return cmd_lab(rest)
    if command == "test":
        return cmd_test(rest)
    if command == "regen":
        return cmd_regen(rest)
    if command in {"doctor", "student"}:
        return cmd_tool(command, rest)
    if command == "compat":
        return cmd_compat(rest)
    if command == "setup":
        ensure_env()
        return 0
    print(f"unknown command {command!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
