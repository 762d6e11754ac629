"""JupyterLab in headless Chromium, for the browser tests of the widgets.

One Lab server per test session (on 127.0.0.1, a free port, a random token, a temporary
root folder holding copies of the notebooks under test, every Jupyter/IPython/matplotlib
folder pointed into that temporary tree, Lab's news and update checks off), one Chromium
(Debian's ``/usr/bin/chromium`` driven by the ``playwright`` package, never a downloaded
browser) and a fresh browser page per test (test_learner_hour.py: one page with Lab loaded
for all its lessons). A failing test leaves a screenshot in ``test-artifacts/``. Server and
browser are shut down by finalizers, also after a failure.

Without Chromium or playwright the tests are skipped with a hint, except when the
environment variable ``CI`` is set (and not ``false``/``0``): then they fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
ENABLE_HINT = ("to run the browser tests install Debian's Chromium (`sudo apt-get install chromium`) and the "
               "Python package playwright (`pip install playwright`; never `playwright install`)")

# Lab settings for a quiet, predictable page: no news or update checks (no network), no dialog
# asking which kernel to start. Cells are windowed as a learner's Lab windows them (its default,
# "contentVisibility": every cell in the page, the browser skips drawing those out of view; so
# the tests read an output's text with textContent, which does not depend on drawing).
SETTINGS_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False,
                                                    "doNotDisturbMode": True},
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
}


UNUSED_SERVER_EXTENSIONS = ("nbgrader.server_extensions.assignment_list", "nbgrader.server_extensions.course_list",
                            "nbgrader.server_extensions.formgrader",
                            "nbgrader.server_extensions.validate_assignment", "jupyter_lsp")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "false", "0")


def unavailable(reason: str) -> None:
    """Skip (on a learner's machine) or fail (in CI) because the browser tooling is missing."""
    message = f"{reason}; {ENABLE_HINT}"
    if in_ci():
        pytest.fail(f"CI is set, so the browser tests must run: {message}", pytrace=False)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the Lab server -----------------------------------------------------------------------

@dataclass
class Lab:
    base: str  # http://127.0.0.1:PORT
    token: str
    root: Path  # the server's root_dir (copies of the notebooks live here)
    log: Path

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base}{path}{sep}token={self.token}"

    def api(self, method: str, path: str, body: object = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url(path), data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        # only a hang gets near the limit: on a busy laptop the formgrader's first answer (nbgrader
        # importing, its database made) took more than 10 s
        with urllib.request.urlopen(req, timeout=120) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def delete_sessions(self, path: str | None = None) -> None:
        """Shut down every kernel session (with ``path``: that notebook's), so the next
        notebook opened starts a fresh kernel."""
        for session in self.api("GET", "/api/sessions") or []:
            if path is None or session["path"] == path:
                with contextlib.suppress(urllib.error.HTTPError):
                    self.api("DELETE", f"/api/sessions/{session['id']}")

    def start_kernel(self, path: str) -> None:
        """Start the kernel session of the notebook ``path`` now, before a page opens it: Lab
        connects the notebook to the session of its path instead of starting one, so the
        kernel boots while the test does other things. The server's own kernel, with its
        environment (its CPU profile), as when Lab starts it."""
        self.api("POST", "/api/sessions", {"path": path, "name": Path(path).name, "type": "notebook",
                                           "kernel": {"name": "python3"}})

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def _environment(tmp: Path, *, test_config: bool = True) -> dict[str, str]:
    """Every Jupyter/IPython/matplotlib folder inside ``tmp``; with ``test_config`` also the
    tests' own quiet Lab configuration (without it: none, for a test that brings its own)."""
    dirs = {name: tmp / sub for name, sub in [
        ("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"), ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
        ("IPYTHONDIR", "ipython"), ("MPLCONFIGDIR", "matplotlib")]}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **{k: str(v) for k, v in dirs.items()}}
    env.pop("MPLBACKEND", None)  # the kernel's own default (inline), not the tests' Agg
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])))
    env.pop("JUPYTER_PATH", None)
    env.pop("JUPYTER_CONFIG_PATH", None)
    if not test_config:
        return env
    labconfig = dirs["JUPYTER_CONFIG_DIR"] / "labconfig"
    labconfig.mkdir()
    (labconfig / "default_setting_overrides.json").write_text(json.dumps(SETTINGS_OVERRIDES))
    (labconfig / "page_config.json").write_text(json.dumps({"disabledExtensions": {"@jupyter/nbgrader": True}}))
    (dirs["JUPYTER_CONFIG_DIR"] / "jupyter_server_config.json").write_text(json.dumps({
        "LabApp": {"news_url": None,
                   "check_for_updates_class": "jupyterlab.handlers.announcements.NeverCheckForUpdate"},
        # only what the tests need: no nbgrader or language-server extensions
        "ServerApp": {"jpserver_extensions": dict.fromkeys(UNUSED_SERVER_EXTENSIONS, False)},
    }))
    return env


def _stop(proc: subprocess.Popen, lab: Lab | None) -> None:
    """Shut the server down cleanly (it stops its kernels), then make sure it is gone."""
    if proc.poll() is None and lab is not None:
        with contextlib.suppress(Exception):
            lab.delete_sessions()
        with contextlib.suppress(Exception):
            lab.api("POST", "/api/shutdown")
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    if proc.poll() is None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own process group: any kernel it left behind
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@contextlib.contextmanager
def serve_lab(root: Path, env: dict[str, str], log: Path, extra_args: tuple[str, ...] = ()):
    """Run a JupyterLab server on ``root`` with ``env`` until the block ends; yield its :class:`Lab`."""
    port, token = free_port(), secrets.token_hex(16)
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--ServerApp.port_retries=0", "--allow-root", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={root}", *extra_args]
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    server = Lab(f"http://127.0.0.1:{port}", token, root, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with code {proc.returncode}:\n{server.log_tail()}", pytrace=False)
            try:
                server.api("GET", "/api/status")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer within 60 s:\n{server.log_tail()}", pytrace=False)
                time.sleep(0.2)
        yield server
    finally:
        _stop(proc, server)


def require_jupyterlab() -> None:
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        unavailable("jupyterlab is not installed")


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """A JupyterLab server for the whole session; notebooks are copied into ``lab.root``."""
    require_jupyterlab()
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "root"
    root.mkdir()
    from hooktutor.course.cpu_profiles import BROWSER_PROFILE, CPU_PROFILES

    # its kernels compute as that CPU would: the learner's hour holds their outputs to the stored ones
    env = {**_environment(tmp), **CPU_PROFILES[BROWSER_PROFILE]}
    # window.jupyterapp: a test can open a notebook in a Lab page already loaded (open_in_lab).
    # A kernel a test is done with gets 0.5 s to exit when its session is deleted, then it is
    # stopped by a signal: its clean exit (torch loaded) takes 1-2.5 s, waited out by every test.
    args = ("--LabApp.expose_app_in_browser=True", "--KernelManager.shutdown_wait_time=0.5")
    with serve_lab(root, env, tmp / "lab.log", args) as server:
        yield server


# -- the browser ----------------------------------------------------------------------------

WAIT_MS = 90_000   # the longest any wait in the browser tests waits: only a hang reaches it

@pytest.fixture(scope="session")
def browser():
    """Headless Chromium (Debian's), driven by playwright's sync API."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the Python package playwright is not installed")
    if not (os.path.exists(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        unavailable(f"{CHROMIUM} is missing")
    from playwright.sync_api import expect

    # waits end when the page is ready; their limits are only for a hang (a busy laptop, load 6 on
    # 2 cores, took more than playwright's 5 s for a redraw): never a measure of speed
    expect.set_options(timeout=WAIT_MS)
    pw = sync_playwright().start()
    try:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        pw.stop()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def page(browser, lab, request):
    """A fresh page (own context) on a server with no kernel running; a screenshot on failure.
    (The next test's page, or the server's shutdown, stops this test's kernel.)"""
    yield from fresh_page(browser, lab, request, {"width": 1400, "height": 1000})


def fresh_page(browser, lab, request, viewport, prefix=""):
    """The body of a page fixture: the server's kernels stopped, a new browser context of
    ``viewport``, the page; on failure a full-page screenshot in test-artifacts/."""
    lab.delete_sessions()
    context = browser.new_context(viewport=viewport)
    context.set_default_timeout(WAIT_MS)
    pg = context.new_page()
    try:
        yield pg
    finally:
        screenshot_if_failed(pg, request, prefix)
        with contextlib.suppress(Exception):
            context.close()


def screenshot_if_failed(pg, request, prefix="") -> None:
    """A full-page screenshot of ``pg`` in test-artifacts/ if the test of ``request`` failed."""
    report = getattr(request.node, "rep_call", None)
    if report is None or report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        name = prefix + re.sub(r"[^\w.-]+", "_", request.node.name)
        with contextlib.suppress(Exception):
            pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
            print(f"screenshot: {ARTIFACTS / f'{name}.png'}")


# -- driving a notebook ------------------------------------------------------------------------

def write_notebook(lab: Lab, name: str, cells: list[str]) -> str:
    """Write a notebook of code ``cells`` (no outputs) into the server's root; return its name."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(code) for code in cells]
    nbformat.write(nb, lab.root / name)
    return name


def copy_notebook(lab: Lab, source: Path, *, extra_cells: list[str] = (), upto: str | None = None) -> str:
    """Copy ``source`` into the server's root without its outputs (Run All makes them), with
    ``extra_cells`` appended; return its name. ``upto``: keep only the cells up to the first code
    cell that contains it."""
    import nbformat

    nb = nbformat.read(source, as_version=4)
    if upto is not None:
        last = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and upto in c.source)
        nb.cells = nb.cells[:last + 1]
    for code in extra_cells:
        nb.cells.append(nbformat.v4.new_code_cell(code))
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, lab.root / source.name)
    return source.name


CURRENT = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook tab on show (Lab or Notebook 7)


def open_notebook(page, lab: Lab, name: str, *, app: str = "lab") -> None:
    """Open ``name`` in JupyterLab (``app="lab"``) or in Notebook 7 (``app="notebook"``, the
    same server's ``/notebooks/`` page) and wait until its kernel is connected and idle. The
    kernel is started first (:meth:`Lab.start_kernel`), so it boots while the page loads."""
    if not any(session["path"] == name for session in lab.api("GET", "/api/sessions") or []):
        lab.start_kernel(name)
    if app == "lab":
        page.goto(lab.url(f"/lab/tree/{name}?reset"))  # ?reset: no tab of an earlier test comes back
    elif app == "notebook":
        page.goto(lab.url(f"/notebooks/{name}"))
    else:
        raise ValueError(f"app={app!r}: use 'lab' (JupyterLab) or 'notebook' (Notebook 7)")
    page.locator(CURRENT + " .jp-Notebook").wait_for(state="visible", timeout=60_000)
    wait_idle(page, timeout=60_000)


def load_lab(page, lab: Lab) -> None:
    """Load JupyterLab (no notebook open, the default layout) and wait until it is restored."""
    page.goto(lab.url("/lab?reset"))
    page.wait_for_function("() => !!window.jupyterapp", timeout=60_000)
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")


def open_in_lab(page, name: str) -> None:
    """Open ``name`` in the Lab page of :func:`load_lab` (no page load) and wait until its
    kernel is connected and idle; :func:`close_all` closes it again."""
    page.evaluate("(path) => window.jupyterapp.commands.execute('docmanager:open', {path, factory: 'Notebook'})"
                  ".then(() => true)", name)
    page.locator(CURRENT + " .jp-Notebook").wait_for(state="visible", timeout=60_000)
    wait_idle(page, timeout=60_000)


def close_all(page) -> None:
    """Close every tab of the Lab page of :func:`load_lab`, unsaved changes discarded (no dialog)."""
    page.evaluate("() => { for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) w.dispose(); }")
    page.locator(".jp-NotebookPanel").first.wait_for(state="detached")


# Notebook 7 has no status bar. Its kernel status label (top right) stays blank and unstyled
# until the kernel first reports a status; once it reported busy or idle the label is blank
# with only the fade class (while starting or connecting it reads "Kernel Starting", ...
# with the info class). The toolbar's execution indicator then says whether it is idle: on
# its own it reads idle before the kernel is connected.
NOTEBOOK7_IDLE = """() => {
    const label = document.querySelector('.jp-NotebookKernelStatus');
    const indicator = document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator');
    if (!label || !indicator) return false;
    const connected = label.classList.contains('jp-NotebookKernelStatus-fade')
        && !['info', 'warn', 'error'].some(c => label.classList.contains('jp-NotebookKernelStatus-' + c))
        && label.textContent.trim() === '';
    return connected && indicator.dataset.status === 'idle';
}"""


def wait_idle(page, timeout: float = 60_000) -> None:
    """The kernel is connected and not busy: Lab's status bar reads ``... | Idle``; on a
    Notebook 7 page (``/notebooks/...``) see ``NOTEBOOK7_IDLE``."""
    if "/notebooks/" in page.url:
        page.wait_for_function(NOTEBOOK7_IDLE, timeout=timeout)
        return
    page.get_by_text(re.compile(r"\|\s*Idle\s*$")).first.wait_for(state="visible", timeout=timeout)


def run_all(page, timeout: float = 90_000) -> None:
    """Run > Run All Cells (Lab and Notebook 7 share the menu), then wait until every code
    cell has its execution count."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*Run\s*$")).click()
    page.locator(".lm-Menu-item:visible", has_text=re.compile(r"^\s*Run All Cells\s*$")).click()
    page.wait_for_function(
        """() => {
            // a cell whose input is hidden (jupyter.source_hidden) shows a placeholder with an
            // empty prompt instead; Run All stops at a cell that raised (assert_no_errors says which)
            const panel = '.jp-NotebookPanel:not(.lm-mod-hidden) ';
            const prompts = [...document.querySelectorAll(panel + '.jp-CodeCell .jp-InputPrompt')]
                .filter(p => !p.closest('.jp-InputPlaceholder'));
            const failed = document.querySelector(
                panel + '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]');
            if (failed && !prompts.some(p => p.textContent.includes('*'))) return true;
            return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
        }""",
        timeout=timeout,
    )
    wait_idle(page, timeout=timeout)


def assert_no_errors(page) -> None:
    """No cell printed an error or anything to stderr (Lab shows both with this mime type)."""
    errors = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    texts = errors.all_inner_texts()
    assert not texts, "the notebook printed errors:\n" + "\n---\n".join(t[:800] for t in texts)


def run_cell(page, containing: str) -> None:
    """Select the code cell whose source contains ``containing`` and run it (Shift+Enter)."""
    cell = page.locator(CURRENT + " .jp-CodeCell", has=page.locator(".jp-InputArea-editor",
                                                                      has_text=containing)).first
    cell.locator(".jp-InputPrompt").click()
    page.keyboard.press("Shift+Enter")


# The probe cell appended to each notebook under test: a button that prints
# hooktutor.list_hooks(<model>) on the page (with a click counter), so a test can compare what
# a widget shows with what the kernel really has attached.
PROBE = """\
import ipywidgets as _probe_widgets

import hooktutor as _probe_ht

_probe_out = _probe_widgets.Output()
_probe_out.add_class("test-probe-out")
_probe_button = _probe_widgets.Button(description="probe hooks")
_probe_button.add_class("test-probe")
_probe_clicks = []


def _probe(_):
    _probe_clicks.append(1)
    text = f"probe {{len(_probe_clicks)}}\\n{{_probe_ht.list_hooks({model})!r}}"
    _probe_out.outputs = ({{"output_type": "stream", "name": "stdout", "text": text}},)


_probe_button.on_click(_probe)
_probe_widgets.VBox([_probe_button, _probe_out])"""


class Probe:
    """Clicks the probe button and reads back ``list_hooks`` as (module, kind, function) rows."""

    def __init__(self, page):
        self.page, self.clicks = page, 0

    def __call__(self) -> list[tuple[str, ...]]:
        from playwright.sync_api import expect

        out = self.page.locator(".test-probe-out")
        self.page.locator(".test-probe").click()
        self.clicks += 1
        expect(out).to_contain_text(f"probe {self.clicks}", timeout=WAIT_MS)
        lines = out.inner_text().strip().splitlines()
        assert "attached to" in lines[1], lines
        return [tuple(line.split()[:3]) for line in lines[3:]]  # after the counter, title and header


def assert_toggle_round_trip(page, hook: tuple[str, str, str]) -> None:
    """Click the page's hook_toggle on, then off, through the real checkbox.

    Each click must change the picture and the status (how fast: benchmarks/widget_latency.py), and the kernel
    (asked through the probe button) must hold exactly the hooks the page reports: ``[hook]``,
    then none, with the first picture back.
    """
    from playwright.sync_api import expect

    probe = Probe(page)
    widget = page.locator(".hooktutor-hook-toggle")
    checkbox = widget.locator(".hooktutor-toggle input[type=checkbox]")
    status = widget.locator(".hooktutor-status")
    picture = widget.locator(".hooktutor-view img")
    expect(status).to_contain_text("hook off · loss ")
    expect(status).to_contain_text("(0 hooks on features.0)")
    expect(checkbox).not_to_be_checked()
    src_off, text_off = picture.get_attribute("src"), status.text_content()
    assert src_off.startswith("data:image/png")
    assert probe() == []

    checkbox.click()  # the real checkbox on the page
    expect(picture).not_to_have_attribute("src", src_off, timeout=WAIT_MS)
    expect(status).to_contain_text("(1 hook on features.0)", timeout=WAIT_MS)
    expect(status).to_contain_text("hook on · loss ")
    expect(checkbox).to_be_checked()
    assert status.text_content() != text_off
    assert probe() == [hook], "the kernel has exactly the hook the page says"

    checkbox.click()
    expect(status).to_contain_text("(0 hooks on features.0)", timeout=WAIT_MS)
    expect(picture).to_have_attribute("src", src_off, timeout=WAIT_MS)  # the same picture as before
    expect(status).to_have_text(text_off)
    expect(checkbox).not_to_be_checked()
    assert probe() == []
