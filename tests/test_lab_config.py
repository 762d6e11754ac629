"""What ``python3 course.py lab`` passes to JupyterLab and writes for it: learner mode (the
default) switches off nbgrader's lab and server extensions and Lab's news prompt;
``--instructor`` keeps nbgrader. Nothing is written outside the course environment.
(The browser test of both modes is tests/browser/test_lab_modes.py.)"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def course(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("hooktutor_course_script", ROOT / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("HOOKTUTOR_VENV", str(tmp_path / "venv"))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "")
    return module


def read(folder: Path) -> dict[str, object]:
    return {str(p.relative_to(folder)).replace(os.sep, "/"): json.loads(p.read_text())
            for p in sorted(folder.rglob("*.json"))}


NEWS_OFF = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}
NBGRADER_SERVER = {"nbgrader.server_extensions.assignment_list", "nbgrader.server_extensions.course_list",
                   "nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.validate_assignment"}


def test_learner_mode_turns_off_nbgrader_and_the_news_prompt(course, tmp_path):
    files = read(course.write_lab_config(tmp_path / "cfg", instructor=False))
    assert set(files) == {"jupyter_server_config.json", "labconfig/page_config.json",
                          "labconfig/default_setting_overrides.json"}
    assert files["labconfig/page_config.json"] == {"disabledExtensions": {"@jupyterlab/lsp-extension": True,
                                                                          "@jupyter/nbgrader": True}}
    assert files["labconfig/default_setting_overrides.json"] == NEWS_OFF
    server = files["jupyter_server_config.json"]
    assert server["ServerApp"]["jpserver_extensions"] == {"jupyter_lsp": False,
                                                          **dict.fromkeys(NBGRADER_SERVER, False)}
    assert server["LabApp"]["news_url"] is None
    assert server["LabApp"]["check_for_updates_class"].endswith("NeverCheckForUpdate")


def test_kernels_get_encryption_keys_so_the_terminal_is_not_filled_with_tcp_warnings(course, tmp_path):
    """Without CurveZMQ keys every kernel prints 'Kernel is running over TCP without encryption'.
    The browser tests run Lab on this configuration (tests/browser/test_lab_modes.py), and the
    learner-mode one checks that the server's log has no such line."""
    for instructor in (False, True):
        server = read(course.write_lab_config(tmp_path / f"cfg{instructor}", instructor))["jupyter_server_config.json"]
        assert server["KernelManager"] == {"transport_encryption": "auto"}


def test_instructor_mode_keeps_nbgrader_and_still_asks_nothing_about_news(course, tmp_path):
    files = read(course.write_lab_config(tmp_path / "cfg", instructor=True))
    assert files["labconfig/page_config.json"] == {"disabledExtensions": {"@jupyterlab/lsp-extension": True}}
    # the language-server extension is off in both modes (it only printed "Skipped ..." lines)
    assert files["jupyter_server_config.json"]["ServerApp"] == {"jpserver_extensions": {"jupyter_lsp": False}}
    assert files["labconfig/default_setting_overrides.json"] == NEWS_OFF


def test_switching_modes_in_one_folder_leaves_nothing_of_the_other(course, tmp_path):
    folder = tmp_path / "cfg"
    course.write_lab_config(folder, instructor=False)
    course.write_lab_config(folder, instructor=True)
    assert read(folder) == read(course.write_lab_config(tmp_path / "fresh", instructor=True))


def test_the_config_folder_lives_in_the_course_environment_one_per_mode(course, tmp_path):
    venv = (tmp_path / "venv").resolve()
    learner, instructor = course.lab_config_dir(False), course.lab_config_dir(True)
    assert learner != instructor
    assert learner.is_relative_to(venv) and instructor.is_relative_to(venv)


def test_the_folder_goes_first_on_jupyter_config_path_and_nowhere_else(course, tmp_path):
    env = course.lab_environment(tmp_path / "cfg", {"JUPYTER_CONFIG_PATH": "/other", "HOME": "/home/x"})
    assert env["JUPYTER_CONFIG_PATH"] == os.pathsep.join([str(tmp_path / "cfg"), "/other"])
    assert env["HOME"] == "/home/x" and "JUPYTER_CONFIG_DIR" not in env  # the user's own config untouched
    assert course.lab_environment(tmp_path / "cfg", {})["JUPYTER_CONFIG_PATH"] == str(tmp_path / "cfg")


@pytest.mark.parametrize("args, instructor, rest", [
    ([], False, []),
    (["--instructor"], True, []),
    (["--port=9999", "--instructor"], True, ["--port=9999"]),
    (["student"], False, ["student"]),
])
def test_lab_arguments(course, args, instructor, rest):
    assert course.lab_arguments(args) == (instructor, rest)


@pytest.mark.parametrize("instructor", [False, True])
def test_cmd_lab_writes_the_mode_and_starts_lab_with_it(course, monkeypatch, tmp_path, instructor):
    calls = []
    monkeypatch.setattr(course, "ensure_env", lambda torch=None: Path(sys.executable))
    monkeypatch.setattr(course, "WORKBOOK", tmp_path / "workbook")
    monkeypatch.setattr(course, "COURSE", tmp_path / "course")
    monkeypatch.setattr(course, "run", lambda cmd, **kw: calls.append((cmd, kw)) or 0)
    assert course.cmd_lab(["--instructor", "--port=9"] if instructor else ["--port=9"]) == 0
    if instructor:  # the course folder (a copy of the lessons, nbgrader), brought up to date first
        (sync, _), (cmd, kw) = calls
        assert sync == [Path(sys.executable), "-m", "hooktutor", "instructor", tmp_path / "course"]
        assert f"--ServerApp.root_dir={tmp_path / 'course'}" in cmd
        assert "--LabApp.default_url=/lab/tree/lessons/00_start_here.ipynb" in cmd
        assert kw["cwd"] == tmp_path / "course"   # where nbgrader looks for nbgrader_config.py
        assert not any(str(course.NOTEBOOKS) in str(word) for word in cmd)
    else:  # the learner's workbook, brought up to date first
        (sync, _), (cmd, kw) = calls
        assert sync == [Path(sys.executable), "-m", "hooktutor", "workbook", tmp_path / "workbook"]
        assert f"--ServerApp.root_dir={tmp_path / 'workbook'}" in cmd
    assert cmd[1:4] == ["lab", "--no-browser", "--ip=127.0.0.1"] and cmd[-1] == "--port=9"
    assert "--instructor" not in cmd
    folder = course.lab_config_dir(instructor)
    assert kw["env"]["JUPYTER_CONFIG_PATH"] == str(folder)
    # the environment's scripts first on PATH: the Formgrader runs alembic and nbgrader from there
    assert kw["env"]["PATH"].split(os.pathsep)[0] == str(course.venv_bin("jupyter").parent)
    page = json.loads((folder / "labconfig" / "page_config.json").read_text())
    assert page["disabledExtensions"] == ({"@jupyterlab/lsp-extension": True} if instructor else
                                          {"@jupyterlab/lsp-extension": True, "@jupyter/nbgrader": True})


def test_learner_lab_opens_a_workbook_without_solutions(course, monkeypatch, tmp_path):
    """The real workbook step (a learner studying alone must not see the answers), then Lab on it."""
    started = []

    def run(cmd, **kw):
        if cmd[1:4] == ["-m", "hooktutor", "workbook"]:
            return subprocess.run([str(c) for c in cmd], check=False).returncode
        started.append(cmd)
        return 0

    monkeypatch.setattr(course, "ensure_env", lambda torch=None: Path(sys.executable))
    monkeypatch.setattr(course, "WORKBOOK", tmp_path / "workbook")
    monkeypatch.setattr(course, "run", run)
    assert course.cmd_lab([]) == 0 and len(started) == 1
    lessons = sorted(p.name for p in (tmp_path / "workbook").glob("*.ipynb"))
    assert lessons == sorted(p.name for p in course.NOTEBOOKS.glob("*.ipynb"))
    text = (tmp_path / "workbook" / "01_tensor_hooks.ipynb").read_text()
    assert "BEGIN SOLUTION" not in text and "NotImplementedError" in text


def test_learner_lab_does_not_start_when_the_workbook_cannot_be_written(course, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(course, "ensure_env", lambda torch=None: Path(sys.executable))
    monkeypatch.setattr(course, "WORKBOOK", tmp_path / "workbook")
    monkeypatch.setattr(course, "run", lambda cmd, **kw: calls.append(cmd) or 1)
    assert course.cmd_lab([]) == 1 and len(calls) == 1  # the workbook step failed: no Lab


def test_the_help_names_the_instructor_mode(course):
    assert "lab --instructor" in course.__doc__


@pytest.mark.parametrize("command", ["compat", "regen", "setup"])
def test_a_help_request_prints_the_help_and_starts_nothing(course, monkeypatch, capsys, command):
    # compat installs torch releases of several GB, regen rewrites every notebook
    monkeypatch.setattr(course, "ensure_env", lambda *a, **k: pytest.fail("a help request set up an environment"))
    monkeypatch.setattr(course, "run", lambda *a, **k: pytest.fail("a help request ran a command"))
    assert course.main([command, "--help"]) == 0
    assert "python3 course.py compat" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["mutants", "regen", "answers", "student", "translate"])
def test_the_package_tools_answer_a_help_request_with_their_usage(monkeypatch, capsys, command):
    import hooktutor.__main__ as cli
    import hooktutor.course.mutation as mutation

    monkeypatch.setattr(mutation, "main", lambda *a: pytest.fail("a help request ran the mutants"))
    assert cli.main([command, "-h"]) == 0
    assert "usage: hooktutor" in capsys.readouterr().out
