"""The environment files agree: pyproject.toml, environment.yml, binder/, the pins."""

from __future__ import annotations

import re
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

ROOT = Path(__file__).resolve().parent.parent
CONDA_NAMES = {"torch": "pytorch", "matplotlib": "matplotlib-base"}


def _split(req: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", req)
    assert m, req
    return m.group(1).lower(), m.group(2).replace(" ", "")


def pyproject_requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in ("lab", "test"):
        reqs += project["optional-dependencies"][extra]
    return dict(_split(r) for r in reqs)


def environment_requirements(path: Path) -> tuple[dict[str, str], list[str]]:
    env = yaml.safe_load(path.read_text())
    assert env["channels"] == ["conda-forge"]
    conda, pip = {}, []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip = dep["pip"]
        else:
            name, bound = _split(dep)
            conda[name] = bound
    for item in pip:
        if not item.startswith("-e"):
            name, bound = _split(item)
            conda[name] = bound
    return conda, pip


def test_environment_yml_matches_pyproject():
    wanted = {CONDA_NAMES.get(name, name): bound for name, bound in pyproject_requirements().items()}
    conda, pip = environment_requirements(ROOT / "environment.yml")
    python = conda.pop("python")
    conda.pop("pip")
    assert conda == wanted, "environment.yml and pyproject.toml list different packages or bounds"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python == requires
    assert "-e ." in pip, "environment.yml installs the course package itself"


def test_binder_environment_is_the_same_minus_the_editable_install():
    root, _ = environment_requirements(ROOT / "environment.yml")
    binder, pip = environment_requirements(ROOT / "binder" / "environment.yml")
    assert binder == root
    assert not any(p.startswith("-e") for p in pip)
    post = (ROOT / "binder" / "postBuild").read_text()
    assert "pip install --no-deps -e ." in post


def test_no_upper_bounds_a_learner_would_trip_on():
    for name, bound in pyproject_requirements().items():
        assert "<" not in bound and "==" not in bound, f"{name}{bound}: lower bounds only in pyproject.toml"
    assert pyproject_requirements()["torch"] == ">=2.1"


def pins() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in (ROOT / "requirements" / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            spec = line.split(";", 1)[0].strip()
            name, _, version = spec.partition("==")
            assert version, f"constraints.txt pins exact versions only: {line!r}"
            out.setdefault(name.lower().replace("_", "-"), []).append(version)
    return out


def test_constraints_pin_torch_and_everything_that_shapes_outputs():
    p = pins()
    assert p["torch"] == ["2.13.0"]
    for name in ("numpy", "matplotlib", "ipywidgets", "ipykernel", "ipython", "nbval", "jupyterlab",
                 "nbclient", "nbformat", "pytest", "jupyterlab-widgets", "ruff", "transformers", "accelerate"):
        assert name in p, f"{name} is not pinned in requirements/constraints.txt"
    for name in pyproject_requirements():
        assert name in p, f"{name} (a dependency in pyproject.toml) is not pinned"


@pytest.mark.course_env
def test_installed_versions_match_the_pins():
    """The environment the tests run in is the pinned one (what the stored outputs assume)."""
    import importlib.metadata as md

    p = pins()
    for name in ("torch", "numpy", "matplotlib", "ipywidgets", "ipykernel", "nbval", "transformers", "accelerate"):
        have = md.version(name).split("+")[0]
        assert have in p[name], f"{name} {have} is installed but {p[name]} is pinned: run python3 course.py test"


def test_import_hooktutor_does_not_load_matplotlib_or_ipywidgets():
    # nor transformers or accelerate (seconds to import): list_hooks only looks at sys.modules
    code = ("import sys, hooktutor; bad = [m for m in ('matplotlib', 'ipywidgets', 'transformers', 'accelerate') "
            "if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
