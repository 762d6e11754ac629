"""`pip install hooktutor` brings the course: the built wheel, installed (not editable) into a fresh
virtual environment, writes the learner's workbook with its `hooktutor` console script, and a
lesson of that workbook runs there.

Built as `python -m build` does it: a source distribution from a copy of the project's files,
then the wheel from that sdist, so a lesson missing from MANIFEST.in fails here too. Installing
torch and Jupyter into a fresh environment would take minutes: the fresh environment gets the
*dependencies* from this one (a .pth file naming this environment's site-packages, after its
own), while hooktutor itself must come from the wheel (checked in the lesson's kernel).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import nbformat
import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: tomli (pytest's own dependency there), never pip's copy, whose
    # import makes a later `import setuptools` fail (nbgrader's: the distutils shim stands aside for pip)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# what the sdist is built from: the files a checkout has that packaging reads
SOURCES = ["pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "hooktutor", "notebooks"]
LESSON = "00_start_here.ipynb"


def clean_env() -> dict[str, str]:
    """This environment without PYTHONPATH (which would put the checkout's hooktutor first)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def run(cmd: list, cwd: Path, **kw) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                            timeout=300, **kw)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def build_tools_missing() -> str | None:
    """Why this environment cannot build the package without build isolation, or None. A real
    `pip install` / `python -m build` fetches the setuptools that [build-system] asks for; this
    test builds offline with the environment's own (the course environment pins one)."""
    import re
    from importlib.metadata import version

    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    (least,) = [re.fullmatch(r"setuptools>=([\d.]+)", r).group(1) for r in requires]
    have = version("setuptools")
    if tuple(int(p) for p in have.split(".")[:2]) < tuple(int(p) for p in least.split(".")[:2]):
        return f"setuptools {have} here; the package's [build-system] needs setuptools>={least}"
    return None


def build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc",
                                                                                   ".ipynb_checkpoints"))
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    sdist_dir, wheel_dir = tmp / "sdist", tmp / "wheel"
    run([sys.executable, "-c", f"from setuptools import build_meta; print(build_meta.build_sdist({str(sdist_dir)!r}))"],
        cwd=src)
    (sdist,) = sdist_dir.glob("hooktutor-*.tar.gz")
    shutil.unpack_archive(sdist, tmp / "unpacked")
    (unpacked,) = (tmp / "unpacked").iterdir()
    # the build tools of this environment (no network): --no-build-isolation
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", wheel_dir, unpacked], cwd=tmp)
    (wheel,) = wheel_dir.glob("hooktutor-*-py3-none-any.whl")
    return wheel


def fresh_venv(where: Path, wheel: Path) -> tuple[Path, Path]:
    """A new environment with the wheel installed in it; (its python, its scripts folder)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", where], check=True, timeout=120)
    scripts = where / ("Scripts" if os.name == "nt" else "bin")
    python = scripts / ("python.exe" if os.name == "nt" else "python")
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel],
        cwd=where)
    purelib = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                       cwd=where).stdout.strip())
    # after its own site-packages on sys.path: the wheel's hooktutor wins over anything here
    (purelib / "zz-course-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    return python, scripts


def test_the_wheel_carries_the_lessons_and_its_console_script_writes_a_workbook_that_runs(tmp_path):
    if why := build_tools_missing():
        pytest.skip(why)
    wheel = build_wheel(tmp_path)
    python, scripts = fresh_venv(tmp_path / "fresh", wheel)
    home = tmp_path / "learner"
    home.mkdir()

    # the console script, from the fresh environment, in a folder far from any checkout
    hooktutor = scripts / ("hooktutor.exe" if os.name == "nt" else "hooktutor")
    out = run([hooktutor, "workbook", "my-workbook"], cwd=home).stdout
    lessons = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert f"wrote {len(lessons)} lesson(s)" in out, out
    workbook = home / "my-workbook"
    assert sorted(p.name for p in workbook.glob("*.ipynb")) == lessons
    first = nbformat.read(workbook / LESSON, as_version=4)
    answers = [c.source for c in first.cells if "solution" in c.metadata.get("tags", [])]
    assert answers and all("BEGIN SOLUTION" not in a and "NotImplementedError" in a for a in answers)
    # run again: nothing rewritten (the learner's work is never overwritten: tests/test_workbook.py)
    assert "is up to date" in run([hooktutor, "workbook", "my-workbook"], cwd=home).stdout
    # the editions in other languages come with it (hooktutor lab --lang zh_CN writes my-workbook/zh_CN)
    from hooktutor.course import lab as lab_module

    for lang in lab_module.editions(ROOT / "notebooks"):
        carried = run([python, "-c", "import hooktutor.course.workbook as w, sys; "
                       f"print(sorted(p.name for p in (w.course_lessons() / {lang!r}).glob('*.ipynb')))"],
                      cwd=home).stdout.strip().splitlines()[-1]
        assert carried == str(sorted(p.name for p in (ROOT / "notebooks" / lang).glob("*.ipynb"))), carried

    # lesson 00 of the workbook runs top to bottom in a kernel of the fresh environment, exercise
    # blank, on the hooktutor of the wheel
    runner = textwrap.dedent(f"""
        import nbformat, sys
        from nbclient import NotebookClient
        nb = nbformat.read({LESSON!r}, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(
            "import sys, hooktutor; print(sys.prefix); print(hooktutor.__file__)"))
        # immediate: the kernel is killed once the lesson ran (its clean exit, torch loaded, takes seconds)
        NotebookClient(nb, kernel_name="python3", timeout=120, shutdown_kernel="immediate").execute()
        print(nb.cells[-1].outputs[0]["text"])
    """)
    where = run([python, "-c", runner], cwd=workbook).stdout.strip().splitlines()[-2:]
    prefix, module = (Path(line) for line in where)
    fresh = (tmp_path / "fresh").resolve()
    assert prefix.resolve() == fresh, where
    assert module.resolve().is_relative_to(fresh), f"hooktutor came from {module}, not from the wheel"


def test_hooktutor_lab_writes_the_workbook_then_starts_lab_in_learner_mode(tmp_path, monkeypatch):
    """`hooktutor lab` (no server started here: the call is caught) uses the Lab settings of
    `python3 course.py lab` in learner mode (tests/test_lab_config.py holds those)."""
    import json

    from hooktutor.course import lab

    started = []

    def call(cmd, env):
        config = Path(env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0])
        page = json.loads((config / "labconfig" / "page_config.json").read_text())
        started.append((cmd, page))
        return 0

    monkeypatch.setattr(subprocess, "call", call)
    monkeypatch.chdir(tmp_path)
    assert lab.main(["--port=8899"]) == 0
    (cmd, page), = started
    assert cmd[:4] == [sys.executable, "-m", "jupyter", "lab"] and cmd[-1] == "--port=8899"
    assert f"--ServerApp.root_dir={(tmp_path / lab.DEFAULT_WORKBOOK).resolve()}" in cmd
    assert page == lab.lab_config(instructor=False)["labconfig/page_config.json"]
    assert (tmp_path / lab.DEFAULT_WORKBOOK / LESSON).is_file()
    assert lab.main(["mine", "--instructor"]) == 2 and len(started) == 1  # the learner's only
