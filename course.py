#!/usr/bin/env python3
"""Set up the hooktutor course environment and run it. Needs only Python 3.10+.

    python3 course.py lab       # create .venv if missing, install pinned versions, open JupyterLab
                                # on your workbook (workbook/: the lessons with exercises blank)
    python3 course.py lab --lang zh_CN   # the Chinese edition, on workbook/zh_CN/ (中文版)
    python3 course.py lab --instructor   # on course/: a copy of notebooks/ (solutions, stored outputs)
                                         # and an nbgrader course (Formgrader, exchange)
    python3 course.py test      # the same set-up, then the whole test suite
    python3 course.py regen     # re-execute every notebook top to bottom, storing its outputs
    python3 course.py doctor    # check the environment and say what to fix
    python3 course.py student OUTDIR   # write the student edition (solutions removed)
    python3 course.py compat    # every lesson and the library tests on other torch and transformers releases
    python3 course.py translate # the Chinese edition (notebooks/zh_CN/) from the catalogues in locale/
    python3 course.py site      # the course's website, built offline from the stored outputs
                                # into build/site (open: python3 -m http.server -d build/site)
    python3 course.py setup     # only create/update .venv (what lab and test do first)

Extra arguments after the command go to jupyter lab / pytest / the tool. The environment
lives in .venv next to this file (set HOOKTUTOR_VENV to put it elsewhere). Exact versions
come from requirements/constraints.txt; it is reinstalled only when that file or
pyproject.toml changes. It is installed with uv when `uv` is on PATH (several times faster; it
gets pip's indexes and wheelhouse), else with pip; HOOKTUTOR_INSTALLER=pip or =uv chooses.

compat checks that the lessons hold on the torch a learner may have. For each release in
COMPAT_TORCH (the oldest that pyproject.toml admits, the one Colab ships, the newest tested and
releases between them where a claim's first release lies; override with `--torch 2.1.2,2.15.0`:
the releases of COMPAT_TORCH left out keep their columns from the report already there) it
creates .venv-torch-<version> (torch, NumPy 1.x below torch 2.3,
the package with its test tools; reinstalled only when pyproject.toml changes), runs the
library tests there (`-m "not course_env and not browser"`), executes every notebook in it
(stored outputs are not compared; each untagged cell must run clean and each cell tagged
raises-exception must raise the type and message pattern its metadata declares), and runs
the probes of hooktutor/course/claims.py. The notebooks are also executed in .venv (the pinned
torch). It then writes docs/torch-versions.md and exits non-zero if anything failed or a
probe contradicts the registry. `--no-tests` skips the library tests; other arguments go to
pytest.

For each release in COMPAT_TRANSFORMERS (the oldest transformers that pyproject.toml admits and the
last 4.x, which the snippets learners meet elsewhere were written for; override with
`--transformers 5.0.0,4.57.6`, and `--torch ""` leaves the torch environments out) it creates
.venv-transformers-<version> with the pinned torch and accelerate and that transformers, executes
the lessons that name a transformers floor (lesson 12), runs their library tests
(tests/test_huggingface.py and their exercises) and every probe. A release below pyproject's floor is
installed over the package's own requirement (pip warns about the conflict) and is there for the
probes: lesson 12 reports it "not admitted" and its tests skip.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"
NOTEBOOKS = ROOT / "notebooks"
WORKBOOK = ROOT / "workbook"  # the learner's copies of the lessons (hooktutor/course/workbook.py)
COURSE = ROOT / "course"  # the instructor's copies and nbgrader course (hooktutor/course/instructor.py)
EXTRAS = "lab,test,site,translate"  # site: Sphinx, MyST-NB, sphinx-book-theme (the website and its test);
# translate: translate-toolkit and polib (the Chinese edition's catalogues and their test)
MIN_PYTHON = (3, 10)


def say(msg: str) -> None:
    print(f"[course] {msg}", flush=True)


# The torch releases `compat` tests besides the pinned one: the oldest that pyproject.toml
# admits and the newest that pip installs (update it when torch releases).
# 2.11.0: what Google Colab ships (the pip-freeze of googlecolab/backend-info, August 2026), where the
# Colab links open the course; update it when Colab moves.
# 2.6.0, 2.7.1, 2.9.1, 2.12.1, 2.14.1: between those, so that the first release of a claim in
# hooktutor/course/claims.py is measured, not bracketed (2.6.0: the claims between 2.2 and 2.11;
# 2.7.1: compile-skips-late-global-hook's first release and lesson 13's oldest torch; 2.9.1: where
# lessons 02 and 11 failed while that claim was dated 2.11, a release many environments still pin;
# 2.12.1 and 2.14.1: those first seen on 2.13.0 and 2.15.0). The probes alone ran on 2.8.0 and
# 2.10.0 too (the claims' evidence says so).
COMPAT_TORCH = ["2.1.2", "2.6.0", "2.7.1", "2.9.1", "2.11.0", "2.12.1", "2.14.1", "2.15.0"]
VERSIONS_DOC = ROOT / "docs" / "torch-versions.md"  # written by compat
# The transformers releases `compat` tests besides the pinned one, with the pinned torch: the oldest
# that pyproject.toml admits and the last 4.x (what older snippets were written for).
COMPAT_TRANSFORMERS = ["5.0.0", "4.57.6"]


def pinned(package: str) -> str:
    """The release of ``package`` that requirements/constraints.txt pins for this Python (the
    doctor's reading of the file: hooktutor/course/doctor.py)."""
    return _doctor.pinned_versions(CONSTRAINTS).get(package.lower().replace("_", "-"), "pinned")


def pinned_torch() -> str:
    """The torch of requirements/constraints.txt, which the stored outputs are made with."""
    return pinned("torch")


def admitted_floor(package: str) -> str:
    """The lowest release of ``package`` that pyproject.toml admits (``transformers>=5.0`` -> ``5.0``)."""
    import re

    found = re.search(rf'"{re.escape(package)}>=([\d.]+)', (ROOT / "pyproject.toml").read_text())
    return found.group(1) if found else "0"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("+")[0].split(".")[:3] if p.isdigit())


def transformers_install(version: str) -> list[list[str]]:
    """The pip steps of a compat environment for transformers ``version``: the pinned torch and
    accelerate, the package with its test tools. A release below pyproject's floor cannot be
    installed with the package: it comes in a second step, over the package's requirement."""
    base = [f"torch=={pinned_torch()}", f"accelerate=={pinned('accelerate')}", "ipykernel"]
    if _release(version) >= _release(admitted_floor("transformers")):
        return [[*base, f"transformers=={version}", "-e", ".[test]"]]
    return [[*base, "-e", ".[test]"], [f"torch=={pinned_torch()}", f"transformers=={version}"]]


def compat_install(torch: str) -> list[str]:
    """What a compat environment for ``torch`` gets (torch < 2.3 was built against NumPy 1.x)."""
    numpy = ["numpy<2"] if tuple(int(p) for p in torch.split(".")[:2]) < (2, 3) else []
    return [f"torch=={torch}", *numpy, "ipykernel", "-e", ".[test]"]


def venv_dir(torch: str | None = None, transformers: str | None = None) -> Path:
    if transformers:
        return (ROOT / f".venv-transformers-{transformers}").resolve()
    if torch:
        return (ROOT / f".venv-torch-{torch}").resolve()
    return Path(os.environ.get("HOOKTUTOR_VENV", ROOT / ".venv")).resolve()


def venv_bin(name: str, torch: str | None = None, transformers: str | None = None) -> Path:
    folder = "Scripts" if os.name == "nt" else "bin"
    exe = ".exe" if os.name == "nt" else ""
    return venv_dir(torch, transformers) / folder / f"{name}{exe}"


def run(cmd: list[str | os.PathLike], **kw) -> int:
    return subprocess.call([str(c) for c in cmd], cwd=kw.pop("cwd", ROOT), **kw)


def run_install(cmd: list[str], env: dict[str, str]) -> int:
    """An install step, saying each package as pip collects it (a first set-up is never silent)."""
    return _installer.run_with_progress(cmd, say, env=env, cwd=ROOT)


def _stamp(install: list[str]) -> str:
    h = hashlib.sha256()
    for f in (CONSTRAINTS, ROOT / "pyproject.toml"):
        h.update(f.read_bytes())
    h.update(" ".join(install).encode())
    return h.hexdigest()


def ensure_env(torch: str | None = None, transformers: str | None = None) -> Path:
    """Create the virtual environment if missing and install the pinned versions into it, with
    uv when it is found, else pip (hooktutor/course/installer.py; HOOKTUTOR_INSTALLER=pip|uv).

    With ``torch="2.1.2"``: a separate environment, .venv-torch-2.1.2, with that torch instead;
    with ``transformers="5.0.0"``: .venv-transformers-5.0.0, the pinned torch and that transformers
    (always with pip: a release below the course's floor goes in a second step that pip allows
    with a warning, and uv refuses).
    """
    if sys.version_info < MIN_PYTHON:
        sys.exit(f"hooktutor needs Python {'.'.join(map(str, MIN_PYTHON))} or newer; this is "
                 f"{sys.version.split()[0]}. Run course.py with a newer python3.")
    where = venv_dir(torch, transformers)
    python = venv_bin("python", torch, transformers)
    kind = f"transformers {transformers}" if transformers else f"torch {torch}" if torch else "course"
    steps = None
    if transformers:
        steps = transformers_install(transformers)
        install = [a for step in steps for a in step]
        what = f"transformers {transformers} with torch {pinned_torch()} and the test tools"
    elif torch:
        install = compat_install(torch)
        what = f"torch {torch} and the test tools"
    else:
        install = ["-c", str(CONSTRAINTS), "-e", f".[{EXTRAS}]"]
        what = "the pinned versions (torch 2.13.0 and the Jupyter stack)"
    stamp_file = where / ".hooktutor-stamp"
    stamp = _stamp(install)
    if python.exists() and stamp_file.exists() and stamp_file.read_text().strip() == stamp:
        return python
    installer = (_installer.Installer("pip", "a transformers environment takes two pip steps")
                 if steps else _installer.choose())
    env = _installer.install_env(installer)
    if not python.exists():
        say(f"creating the {kind} environment in {where}")
        create = _installer.venv_command(installer, where)
        if create is None:
            venv.EnvBuilder(with_pip=True, clear=False).create(where)
        elif run(create, env=env) != 0:
            sys.exit(f"[course] uv could not create {where}; see its message above. "
                     f"HOOKTUTOR_INSTALLER=pip python3 course.py {' '.join(sys.argv[1:])} uses pip instead.")
    say(f"installing {what} with {installer.name} ({installer.why}); the first time this takes a few minutes")
    for step in steps or [install]:
        if run_install(_installer.install_command(installer, python, step), env=env) != 0:
            sys.exit(f"[course] installing failed; see {installer.name}'s message above. `python3 course.py "
                     "doctor` explains the usual causes (an old Python, no network to the package index).")
    stamp_file.write_text(stamp + "\n")
    return python


def notebooks() -> list[Path]:
    return sorted(p for p in NOTEBOOKS.glob("*.ipynb"))


# -- the JupyterLab of the course -----------------------------------------------------------
# Its settings (learner mode: nbgrader's menus and Lab's news prompt off; --instructor keeps
# nbgrader) and its command line live in hooktutor/course/lab.py, shared with the `hooktutor lab`
# console script of the installed package. That file uses only the standard library, so it is
# loaded here by path, before the course environment (and the package) is installed.
def _load_course_module(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"hooktutor_course_{name}",
                                                  ROOT / "hooktutor" / "course" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


_lab = _load_course_module("lab")
# Which tool installs .venv (uv when found, else pip) and its command lines: standard library
# only too, in hooktutor/course/installer.py.
_installer = _load_course_module("installer")
_doctor = _load_course_module("doctor")   # standard library only, like the two above
INSTRUCTOR_FLAG = _lab.INSTRUCTOR_FLAG
lab_config = _lab.lab_config
write_lab_config = _lab.write_lab_config
lab_environment = _lab.lab_environment
lab_arguments = _lab.lab_arguments


def lab_config_dir(instructor: bool = False) -> Path:
    """Where `lab` keeps that folder: inside the course environment, one per mode."""
    return venv_dir() / "etc" / "hooktutor" / ("lab-instructor" if instructor else "lab-learner")


def lab_command(jupyter: os.PathLike | str, args: list[str], root: Path = NOTEBOOKS,
                first: str = _lab.FIRST_LESSON) -> list[str]:
    """The `jupyter lab` command line on folder ``root`` (``args``: what the user added, without
    --instructor)."""
    return _lab.lab_command(jupyter, args, root, first)


def cmd_lab(args: list[str]) -> int:
    instructor, args = lab_arguments(args)
    try:
        lang, args = _lab.lab_language(args)
    except ValueError as exc:
        say(str(exc))
        return 2
    if lang is not None and lang not in _lab.editions(ROOT / "notebooks"):
        others = ", ".join(_lab.editions(ROOT / "notebooks")) or "no other yet"
        say(f"there is no {lang!r} edition; the editions are: en (the default), {others} "
            "(python3 course.py translate writes them)")
        return 2
    if lang is not None and instructor:
        say(f"{INSTRUCTOR_FLAG} opens the English instructor's edition; the {lang} edition is a learner's "
            f"workbook so far: run `python3 course.py lab --lang {lang}`")
        return 2
    python = ensure_env()
    folder = write_lab_config(lab_config_dir(instructor), instructor)
    first = _lab.FIRST_LESSON
    if instructor:
        # a copy: Run All and Save in Lab never rewrite the tracked notebooks/ (hooktutor/course/instructor.py)
        say(f"instructor mode: {COURSE.name}/ (ignored by git): lessons/, a copy of notebooks/ with every "
            "solution, and the nbgrader course (source/, nbgrader_config.py, exchange/); nbgrader's menu, "
            "Formgrader, Validate button and Create Assignment panel are on")
        code = run([python, "-m", "hooktutor", "instructor", COURSE])  # never overwrites your changes
        if code != 0:
            return code
        root, first = COURSE, f"lessons/{first}"
    else:
        say(f"learner mode: your workbook, exercises blank (`python3 course.py lab {INSTRUCTOR_FLAG}` "
            "opens the instructor's edition, solutions included)")
        workbook = WORKBOOK / lang if lang else WORKBOOK   # workbook/zh_CN: the Chinese edition's
        source = ["--source", str(ROOT / "notebooks" / lang)] if lang else []
        code = run([python, "-m", "hooktutor", "workbook", workbook, *source])  # never overwrites your work
        if code != 0:
            return code
        root = workbook
    say(f"starting JupyterLab on {root} (open the URL printed below; Ctrl-C stops it)")
    # started in the folder it serves: nbgrader reads nbgrader_config.py from the current folder
    env = lab_environment(folder, bin_dir=venv_bin("jupyter").parent)
    return run(lab_command(venv_bin("jupyter"), args, root, first), env=env, cwd=root)


def cmd_test(args: list[str]) -> int:
    python = ensure_env()
    say("running the library tests, every notebook under strict nbval, and the browser tests")
    if not any(a == "-n" or a.startswith("-n") or a.startswith("--numprocesses") for a in args):
        # one worker per core; a notebook (all its cells) or a test file stays on one worker.
        # Files go out in collection order (the browser tests, then tests/, then the notebooks):
        # xdist's default reorder (most tests first) left the longest files, few tests each
        # (the learner's hour), for the end, where they made the run's tail.
        args = ["-n", "auto", "--dist", "loadfile", "--no-loadscope-reorder", *args]
    # The run starts a hundred Python processes (workers, kernels, subprocesses) that import the
    # course's modules: compiled to bytecode once here, each reads them from __pycache__, also
    # where PYTHONDONTWRITEBYTECODE is set (CI's images set it; each process would compile them
    # again, a quarter of a second for the whole package)
    run([python, "-m", "compileall", "-q", str(ROOT / "hooktutor")])
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


def failed_tests(junit: Path) -> list[str]:
    """The tests that failed or errored in a pytest --junitxml report, with the first line of why."""
    import xml.etree.ElementTree as ET

    if not junit.exists():
        return []
    found = []
    for case in ET.parse(junit).iter("testcase"):
        for bad in [*case.findall("failure"), *case.findall("error")]:
            why = (bad.get("message") or "").strip().splitlines()
            found.append(f"{case.get('classname')}::{case.get('name')}: {why[0][:200] if why else ''}")
    return found


def _versions(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def all_skipped(junit: Path) -> bool:
    """Whether every test of a pytest --junitxml report was skipped."""
    import xml.etree.ElementTree as ET

    if not junit.exists():
        return False
    suites = list(ET.parse(junit).iter("testsuite"))
    return bool(suites) and all(int(s.get("tests", 0)) == int(s.get("skipped", 0)) for s in suites)


def carried(versions: list[str], tf_versions: list[str]) -> list[str]:
    """The columns a compat run that tests torch ``versions`` and transformers ``tf_versions`` keeps
    from the report already there: each release of COMPAT_TORCH and COMPAT_TRANSFORMERS it leaves out
    (``--torch ""``: all of them; ``--torch 2.12.1``: the others), as ``kind:release``."""
    return [*(f"torch:{v}" for v in COMPAT_TORCH if v not in versions),
            *(f"transformers:{v}" for v in COMPAT_TRANSFORMERS if v not in tf_versions)]


def cmd_compat(args: list[str]) -> int:
    versions, tf_versions, run_tests, pytest_args = list(COMPAT_TORCH), list(COMPAT_TRANSFORMERS), True, []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("--torch", "--transformers") and rest:
            chosen = _versions(rest.pop(0))
        elif arg.startswith(("--torch=", "--transformers=")):
            arg, chosen = arg.split("=", 1)[0], _versions(arg.split("=", 1)[1])
        elif arg == "--no-tests":
            run_tests = False
            continue
        else:
            pytest_args.append(arg)
            continue
        if arg == "--torch":
            versions = chosen
        else:
            tf_versions = chosen
    results = ROOT / "build" / "compat"
    results.mkdir(parents=True, exist_ok=True)
    for old in results.glob("*.json"):
        old.unlink()
    files, failed, failing = [], False, []
    envs = [(None, None), *((t, None) for t in versions), *((None, t) for t in tf_versions)]
    for torch, transformers in envs:  # (None, None): the course environment with the pinned torch
        python = ensure_env(torch, transformers)
        if transformers:
            name, result = f"transformers {transformers}", results / f"transformers-{transformers}.json"
            say(f"{name} (torch {pinned_torch()}): executing the lessons that teach transformers and every probe")
            lessons_failed = run([python, "-m", "hooktutor.course.other_torches", "run", result,
                                  "--transformers-lessons"]) != 0
        else:
            name = f"torch {torch or f'{pinned_torch()} (pinned, .venv)'}"
            result = results / f"torch-{torch or 'pinned'}.json"
            say(f"{name}: executing every notebook and the probes of hooktutor/course/claims.py")
            lessons_failed = run([python, "-m", "hooktutor.course.other_torches", "run", result]) != 0
        failed |= lessons_failed
        code = 0
        if (torch or transformers) and run_tests:
            junit = results / f"tests-{torch or 'transformers-' + transformers}.xml"
            selection, scope = [], ""
            if transformers:
                scope = "tests/test_huggingface.py and lesson 12's exercises"
                selection = ["-k", "test_huggingface or hf_hooks"]
                say(f"{name}: the library tests of lesson 12 ({scope})")
            else:
                say(f"{name}: the library tests (course-environment and browser tests left out)")
            code = run([python, "-m", "pytest", "tests", "-q", "-m", "not course_env and not browser",
                        *selection, f"--junitxml={junit}", *pytest_args])
            data = json.loads(result.read_text())
            data["tests"], data["test_failures"] = code, failed_tests(junit)
            if scope:
                data["tests_scope"] = scope + ("; all skipped (lesson 12 not admitted)" if all_skipped(junit) else "")
            result.write_text(json.dumps(data, indent=1) + "\n")
        files.append(result)
        if lessons_failed or code != 0:
            failing.append(name)
    failed |= bool(failing)
    code = run([ensure_env(), "-m", "hooktutor.course.other_torches", "report", VERSIONS_DOC,
                f"--pinned={pinned_torch()}", f"--carry={','.join(carried(versions, tf_versions))}", *files])
    failed |= code != 0
    tested = [f"torch {', '.join([pinned_torch(), *versions])}"] + (
        [f"transformers {', '.join(tf_versions)}"] if tf_versions else [])
    if failing:
        say(f"FAILED on {', '.join(failing)} (of {' and '.join(tested)}); see {VERSIONS_DOC.relative_to(ROOT)}")
    else:
        say(f"{'FAILED: the report could not be written' if failed else 'all lessons hold'} on "
            f"{' and '.join(tested)}; see {VERSIONS_DOC.relative_to(ROOT)}")
    return 1 if failed else 0


def cmd_tool(sub: str, args: list[str]) -> int:
    python = ensure_env()
    if sub == "doctor":
        say(f"installs with {(chosen := _installer.choose()).name} ({chosen.why})")
    return run([python, "-m", "hooktutor", sub, *args])


def main(argv: list[str]) -> int:
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    if command in {"compat", "regen", "setup"} and {"-h", "--help"} & set(rest):
        print(__doc__)   # these commands install and run at once: a help request must not start them
        return 0
    if command == "lab":
        return cmd_lab(rest)
    if command == "test":
        return cmd_test(rest)
    if command == "regen":
        return cmd_regen(rest)
    if command in {"doctor", "student", "site", "translate"}:
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
