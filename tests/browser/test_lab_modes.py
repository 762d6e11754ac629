"""The JupyterLab of ``python3 course.py lab``: learner mode shows no nbgrader tooling and no
news prompt; ``--instructor`` brings the "Nbgrader" menu and the "Validate" button back, on the
instructor's course folder (a copy of the lessons and an nbgrader course: Run All and Save there
leave the tracked notebooks as they were, and the Formgrader lists the course's assignments).

Each server runs with the configuration folder ``course.py`` writes for its mode (on
JUPYTER_CONFIG_PATH, as ``course.py lab`` starts it) and nothing else: no test settings.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, WAIT_MS, _environment, open_notebook, require_jupyterlab, serve_lab, write_notebook

pytestmark = pytest.mark.browser

NEWS_PROMPT = re.compile(r"notified about official Jupyter news", re.I)


def load_course():
    spec = importlib.util.spec_from_file_location("hooktutor_course_script", ROOT / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=["learner", "instructor"])
def course_lab(request, tmp_path_factory):
    require_jupyterlab()
    course = load_course()
    instructor = request.param == "instructor"
    tmp = tmp_path_factory.mktemp(f"lab-{request.param}")
    root = tmp / "root"
    if instructor:   # the course folder, as course.py lab --instructor writes and serves it
        from hooktutor.course.instructor import prepare

        prepare(root, ROOT / "notebooks")
    else:
        root.mkdir()
    folder = course.write_lab_config(tmp / "course-config", instructor)
    env = course.lab_environment(folder, _environment(tmp, test_config=False), bin_dir=Path(sys.executable).parent)
    with serve_lab(root, env, tmp / "lab.log") as server:
        yield request.param, server


def test_learner_lab_has_no_nbgrader_or_news_prompt_and_instructor_lab_has_nbgrader(course_lab, browser):
    from playwright.sync_api import expect

    mode, lab = course_lab
    settings = lab.api("GET", "/lab/api/settings/@jupyterlab/apputils-extension:notification")
    defaults = {k: v.get("default") for k, v in settings["schema"]["properties"].items()}
    assert (defaults["fetchNews"], defaults["checkForUpdates"]) == ("false", False), defaults
    assert "fetchNews" not in settings["settings"]  # nothing of a user's is involved
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        open_notebook(page, lab, write_notebook(lab, "mode.ipynb", ["1 + 1"]))
        config = json.loads(page.locator("#jupyter-config-data").text_content())
        menu = page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*Nbgrader\s*$"))
        validate = page.locator(".jp-NotebookPanel-toolbar", has_text=re.compile(r"Validate"))
        expect(page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*Help\s*$"))).to_be_visible()
        if mode == "learner":
            assert config["disabledExtensions"] == ["@jupyter/nbgrader"] or "@jupyter/nbgrader" in \
                config["disabledExtensions"]
            expect(menu).to_have_count(0)
            expect(validate).to_have_count(0)
            extensions = lab.api("GET", "/api/status")  # the server answers; nbgrader's handlers do not
            assert extensions is not None
            assert _status(lab, "/formgrader") == 404
        else:
            expect(menu).to_have_count(1)
            expect(validate).to_have_count(1)
            menu.click()
            expect(page.locator(".lm-Menu-item:visible", has_text=re.compile("Formgrader"))).to_have_count(1)
            page.keyboard.press("Escape")
            assert _status(lab, "/formgrader") == 200
        page.wait_for_timeout(500)  # the prompt, if any, comes with the settings, long before this
        expect(page.get_by_text(NEWS_PROMPT)).to_have_count(0)
        # the kernel ran (its status went Idle) with CurveZMQ keys: no warning in the server's log
        log = lab.log.read_text(errors="replace")
        assert "TCP without encryption" not in log, lab.log_tail()
        assert "Skipped non-installed server" not in log, lab.log_tail()  # jupyter-lsp is off
        assert "/lsp/status" not in log, lab.log_tail()  # and so is Lab's side of it
        page.screenshot(path=str(_artifact(f"lab-{mode}-mode.png")))
    finally:
        context.close()


@pytest.mark.parametrize("course_lab", ["instructor"], indirect=True)
def test_instructor_mode_saves_into_its_copy_and_its_formgrader_lists_the_assignments(course_lab, browser):
    import hashlib
    import time

    from .conftest import run_all, wait_idle

    _, lab = course_lab
    courses = lab.api("GET", "/formgraders")
    assert courses["success"] and [c["course_id"] for c in courses["value"]] == ["hooktutor"], courses
    names = {a["name"] for a in lab.api("GET", "/formgrader/api/assignments")}
    assert {"00_start_here", "01_tensor_hooks", "13_hooks_at_work"} <= names, names
    tracked = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (ROOT / "notebooks").glob("*.ipynb")}
    copy = lab.root / "lessons" / "00_start_here.ipynb"
    before = copy.stat().st_mtime_ns
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        open_notebook(page, lab, "lessons/00_start_here.ipynb")
        run_all(page)
        page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").press("Control+s")
        deadline = time.monotonic() + 60
        while copy.stat().st_mtime_ns == before or page.locator(".jp-mod-dirty").count():
            assert time.monotonic() < deadline, "the lesson was not saved"
            page.wait_for_timeout(100)
        wait_idle(page)
    finally:
        context.close()
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert after == tracked, "Run All and Save in instructor mode changed the tracked notebooks"


def _status(lab, path: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(lab.url(path), timeout=120) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _artifact(name: str):
    from .conftest import ARTIFACTS

    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name
