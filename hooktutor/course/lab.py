"""The JupyterLab of the course: its settings and its command line, in learner or instructor mode.

Used by ``python3 course.py lab`` (which loads this file by path, before the course environment
exists: standard library only, nothing imported from the package) and by the ``hooktutor lab``
console script of an installed wheel, so the two start the same Lab.

A learner's Lab shows no instructor tooling and asks nothing about news. nbgrader (installed for
the instructors' tests and grading) brings lab extensions (an "Nbgrader" menu, a "Validate"
button, a "Create Assignment" panel) and server extensions; learner mode switches them off. The
settings are files of a configuration folder, written on every start and put first on
JUPYTER_CONFIG_PATH for that one server only: nothing is written to the user's home
configuration.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

INSTRUCTOR_FLAG = "--instructor"
FIRST_LESSON = "00_start_here.ipynb"
NBGRADER_LAB_EXTENSION = "@jupyter/nbgrader"
NBGRADER_SERVER_EXTENSIONS = ("nbgrader.server_extensions.assignment_list",
                              "nbgrader.server_extensions.course_list",
                              "nbgrader.server_extensions.formgrader",
                              "nbgrader.server_extensions.validate_assignment")
# JupyterLab's own supported switches: no news fetched, no update checks, and (so no prompt
# appears) the question "get notified about official Jupyter news?" already answered no.
LSP_LAB_EXTENSION = "@jupyterlab/lsp-extension"
LAB_SETTING_DEFAULTS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                                         "checkForUpdates": False}}


def lab_config(instructor: bool = False) -> dict[str, object]:
    """The files of the Lab configuration folder (relative path -> JSON content).

    Kernels get CurveZMQ keys from the server (jupyter_client's transport_encryption, for the
    kernels whose kernelspec declares it, as ipykernel's does): without them every kernel that
    starts prints "Kernel is running over TCP without encryption", and the learner's terminal
    fills with it."""
    server: dict[str, object] = {
        "LabApp": {"news_url": None,
                   "check_for_updates_class": "jupyterlab.handlers.announcements.NeverCheckForUpdate"}}
    server["KernelManager"] = {"transport_encryption": "auto"}
    # ... and its Lab side, which would ask the server for /lsp/status on every page load (a 404)
    page: dict[str, object] = {"disabledExtensions": {LSP_LAB_EXTENSION: True}}
    # jupyter-lsp comes with JupyterLab and looks for language servers the course never installs,
    # printing a long "Skipped non-installed server(s)" line at every start: off in both modes
    server["ServerApp"] = {"jpserver_extensions": {"jupyter_lsp": False}}
    if not instructor:
        server["ServerApp"]["jpserver_extensions"].update(dict.fromkeys(NBGRADER_SERVER_EXTENSIONS, False))
        page["disabledExtensions"] = {LSP_LAB_EXTENSION: True, NBGRADER_LAB_EXTENSION: True}
    return {"jupyter_server_config.json": server,
            "labconfig/page_config.json": page,
            "labconfig/default_setting_overrides.json": LAB_SETTING_DEFAULTS}


def write_lab_config(folder: Path, instructor: bool = False) -> Path:
    """Write the configuration folder of the mode into ``folder`` (replacing what was there)."""
    folder = Path(folder)
    for name, content in lab_config(instructor).items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")
    return folder


def lab_environment(folder: Path, environ: dict[str, str] | None = None, *,
                    bin_dir: Path | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) with ``folder`` first on JUPYTER_CONFIG_PATH and
    ``bin_dir`` (the course environment's scripts) first on PATH: nbgrader's Formgrader runs the
    `alembic` and `nbgrader` commands it finds there (without them its pages answer 500)."""
    env = dict(os.environ if environ is None else environ)
    rest = env.get("JUPYTER_CONFIG_PATH", "")
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(folder), rest]))
    if bin_dir is not None:
        env["PATH"] = os.pathsep.join(filter(None, [str(bin_dir), env.get("PATH", "")]))
    return env


def lab_arguments(args: list[str]) -> tuple[bool, list[str]]:
    """Split `lab`'s arguments into the instructor switch and the rest (for jupyter lab)."""
    return INSTRUCTOR_FLAG in args, [a for a in args if a != INSTRUCTOR_FLAG]


LANG_FLAG = "--lang"


def lab_language(args: list[str]) -> tuple[str | None, list[str]]:
    """Split `lab`'s arguments into the edition asked for (``--lang zh_CN`` or ``--lang=zh_CN``;
    None: the English one) and the rest. Raises ``ValueError`` for ``--lang`` without a value."""
    rest, lang = [], None
    it = iter(args)
    for arg in it:
        if arg == LANG_FLAG:
            lang = next(it, None)
            if not lang or lang.startswith("-"):
                raise ValueError(f"{LANG_FLAG} needs a language, e.g. {LANG_FLAG} zh_CN")
        elif arg.startswith(LANG_FLAG + "="):
            lang = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return (None if lang in (None, "en") else lang), rest


def editions(notebooks: Path) -> list[str]:
    """The languages of the editions in ``notebooks`` (its sub-folders ``xx_YY`` holding lessons)."""
    return sorted(p.name for p in notebooks.iterdir()
                  if p.is_dir() and len(p.name) == 5 and p.name[2] == "_" and any(p.glob("[0-9][0-9]_*.ipynb")))


def lab_command(jupyter: os.PathLike | str | Sequence[str], args: list[str], root: Path,
                first: str = FIRST_LESSON) -> list[str]:
    """The `jupyter lab` command line on folder ``root``, opening ``first`` (a path in ``root``).
    ``jupyter``: the `jupyter` executable, or the words that run it (``[sys.executable, "-m",
    "jupyter"]``); ``args``: what the user added, without --instructor."""
    launcher = [str(jupyter)] if isinstance(jupyter, (str, os.PathLike)) else [str(w) for w in jupyter]
    extra = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []  # containers, CI
    return [*launcher, "lab", "--no-browser", "--ip=127.0.0.1", f"--ServerApp.root_dir={root}",
            f"--LabApp.default_url=/lab/tree/{first}", *extra, *args]


DEFAULT_WORKBOOK = "hooktutor-workbook"  # `hooktutor lab` without a folder: this one, in the current folder
LAB_HELP = f"""usage: hooktutor lab [FOLDER] [--lang zh_CN] [JUPYTER LAB OPTIONS...]

Write the learner's workbook into FOLDER (default: ./{DEFAULT_WORKBOOK}): every lesson with the
exercises blank, never overwriting a lesson you worked in. Then start JupyterLab on it, in the
course's learner mode (as `python3 course.py lab` does in a checkout). Options after the folder
go to `jupyter lab` (e.g. --port=8899). `--lang zh_CN`: the Chinese edition (中文版), written
into FOLDER/zh_CN. Needs JupyterLab: pip install "hooktutor[lab]"."""


def main(argv: list[str]) -> int:
    """``hooktutor lab [FOLDER] [options]``: the workbook, then JupyterLab on it (learner mode)."""
    import importlib.util
    import subprocess
    import sys
    import tempfile

    from .workbook import course_lessons, sync

    if argv[:1] in (["-h"], ["--help"]):
        print(LAB_HELP)
        return 0
    folder = Path(argv[0]) if argv and not argv[0].startswith("-") else Path(DEFAULT_WORKBOOK)
    rest = argv[1:] if argv and not argv[0].startswith("-") else list(argv)
    if INSTRUCTOR_FLAG in rest:
        print("hooktutor lab opens the learner's workbook only; the instructor's edition, with "
              "nbgrader, comes with a checkout: python3 course.py lab --instructor", file=sys.stderr)
        return 2
    try:
        lang, rest = lab_language(rest)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    source = course_lessons()
    if lang is not None:   # the edition in that language: lessons/zh_CN/, into FOLDER/zh_CN/
        if lang not in editions(source):
            others = ", ".join(editions(source)) or "no other yet"
            print(f"there is no {lang!r} edition; the editions are: en (the default), {others}", file=sys.stderr)
            return 2
        source, folder = source / lang, folder / lang
    print(sync(folder, source), flush=True)  # never overwrites the learner's work
    if importlib.util.find_spec("jupyterlab") is None:
        print('JupyterLab is not installed here: pip install "hooktutor[lab]", then hooktutor lab again',
              file=sys.stderr)
        return 1
    root = folder.resolve()
    with tempfile.TemporaryDirectory(prefix="hooktutor-lab-") as config:
        write_lab_config(Path(config), instructor=False)
        print(f"starting JupyterLab on {root} (open the URL printed below; Ctrl-C stops it)", flush=True)
        command = lab_command([sys.executable, "-m", "jupyter"], rest, root)
        try:
            return subprocess.call(command, env=lab_environment(Path(config)))
        except KeyboardInterrupt:
            return 0


def write_config_main(argv: list[str]) -> int:
    """``hooktutor lab-config FOLDER [--instructor]``: the settings folder of a mode, for a server
    started elsewhere with FOLDER first on JUPYTER_CONFIG_PATH (Binder: binder/postBuild, binder/start)."""
    import argparse

    parser = argparse.ArgumentParser(prog="hooktutor lab-config", description=write_config_main.__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument(INSTRUCTOR_FLAG, action="store_true", help="keep nbgrader's menus and server extensions")
    args = parser.parse_args(argv)
    print(f"wrote the {'instructor' if args.instructor else 'learner'}-mode Lab settings to "
          f"{write_lab_config(args.folder, args.instructor)}")
    return 0
