"""The GitHub Actions workflow (.github/workflows/ci.yml) cannot run here, so the test command
checks it: against GitHub's workflow schema (check-jsonschema, pinned in the test extra, carries
the schema: no download), with actionlint too where it is installed (it checks expressions and
the run: scripts; its PyPI package builds only by downloading its binary, so the course does not
pin it), and its jobs are held to what the course promises: the test command on Linux, macOS and
Windows for every supported Python, the wheel built, published to PyPI by trusted publishing on a
tag, the site deployed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ImportError:  # Python 3.10: tomli (pytest's own dependency there), never pip's copy, whose
    # import makes a later `import setuptools` fail (nbgrader's: the distutils shim stands aside for pip)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
NEWEST_PYTHON = (3, 13)  # the newest Python the workflow tests; raise it with the pins


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def steps(job: dict) -> str:
    return "\n".join(str(s.get("run", "")) + " " + str(s.get("uses", "")) for s in job["steps"])


def test_the_workflow_matches_github_s_schema():
    checker = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    assert checker, "check-jsonschema is missing: python3 course.py test installs it (the test extra)"
    result = subprocess.run([checker, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_is_clean_where_it_is_installed():
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed (https://github.com/rhysd/actionlint); the schema check ran")
    result = subprocess.run([actionlint, "-no-color", str(WORKFLOW.relative_to(ROOT))], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def supported_pythons() -> list[str]:
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    low = tuple(int(p) for p in re.fullmatch(r">=\s*(\d+)\.(\d+)", requires).groups())
    return [f"3.{minor}" for minor in range(low[1], NEWEST_PYTHON[1] + 1)]


def test_the_test_command_runs_on_three_systems_for_every_supported_python():
    jobs = workflow()["jobs"]
    linux, other = jobs["test-linux"], jobs["test-other"]
    assert linux["strategy"]["matrix"]["python"] == supported_pythons()
    assert other["strategy"]["matrix"]["python"] == supported_pythons()
    assert set(other["strategy"]["matrix"]["os"]) == {"macos-latest", "windows-latest"}
    assert linux["runs-on"].startswith("ubuntu") and ".ci/run" in steps(linux)
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert "python3 course.py test" in ci_run  # the README's test command
    assert "python course.py test" in steps(other)


def test_the_pythons_doc_names_every_supported_python_and_the_workflow_runs_them():
    """docs/python-versions.md says which Pythons the lessons and the library tests were run on; each
    supported Python has its row, and no other (the workflow's matrix is checked above)."""
    doc = (ROOT / "docs" / "python-versions.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (3\.\d+)\.\d+ \|", doc, flags=re.M)
    assert rows == supported_pythons(), "one row per supported Python, oldest first"
    assert "docs/python-versions.md" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_wheel_is_built_and_published_by_trusted_publishing_on_a_tag():
    wf = workflow()
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads the key `on` as True
    assert "v*" in on["push"]["tags"]
    jobs = wf["jobs"]
    assert "python -m build" in steps(jobs["build"])
    publish = jobs["publish"]
    assert "refs/tags/v" in publish["if"] and {"test-linux", "test-other", "build"} <= set(publish["needs"])
    assert publish["permissions"] == {"id-token": "write"}, "trusted publishing: an OIDC token, no API token"
    assert "pypa/gh-action-pypi-publish" in steps(publish)
    assert "password" not in WORKFLOW.read_text() and "PYPI_API_TOKEN" not in WORKFLOW.read_text()


def test_the_pages_job_runs_the_site_command_and_waits_for_it():
    """`python3 course.py site` (issue 27 item 1) builds the site; the job deploys it from main."""
    jobs = workflow()["jobs"]
    assert "python3 course.py site" in steps(jobs["pages"])
    assert "vars.SITE" not in jobs["pages"]["if"], "the site command exists: the pages job is on"
    assert "refs/heads/main" in jobs["pages"]["if"]
    assert "actions/deploy-pages" in steps(jobs["deploy-pages"])
    assert jobs["deploy-pages"]["permissions"] == {"pages": "write", "id-token": "write"}
    assert "issue 27 item 1" in WORKFLOW.read_text()
