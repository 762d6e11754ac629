"""Every pin in requirements/constraints.txt installs on every Python it applies to.

A pin applies to the Pythons its marker admits (an unmarked one to all of them: the test-linux
matrix of .github/workflows/ci.yml, 3.10 to 3.13). A release's Requires-Python is read offline,
from the metadata of the distributions installed here: a pin is checked where this environment
has exactly the pinned version, which in the course environment (Python 3.11) covers every
unmarked and every 3.11+ pin, so an unmarked pin moved to a release that dropped Python 3.10
(ipykernel 7.4.0 did) fails here, not on a learner's 3.10. A `python_version < "3.11"` pin names
a release that is not installed on 3.11+, so it is checked only where the tests run on 3.10
(CI's 3.10 jobs, after installing it); nothing here holds its metadata on 3.11+.
"""

from __future__ import annotations

import importlib.metadata as md
import re
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def supported_pythons() -> list[str]:
    """The Pythons CI tests (and the pins must serve): the test-linux matrix of ci.yml."""
    ci = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8"))
    return [str(v) for v in ci["jobs"]["test-linux"]["strategy"]["matrix"]["python"]]


def constraints(path: Path = CONSTRAINTS) -> list[Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def applies(pin: Requirement, python: str) -> bool:
    return pin.marker is None or pin.marker.evaluate({"python_version": python, "python_full_version": f"{python}.0"})


def admits(requires_python: str | None, python: str) -> bool:
    """Whether a Requires-Python admits some release of ``python`` (3.10 -> 3.10.0 ... 3.10.29)."""
    spec = SpecifierSet(requires_python or "")
    return any(spec.contains(f"{python}.{patch}") for patch in range(30))


def installed() -> dict[str, tuple[str, str | None]]:
    """name -> (version, Requires-Python) of every distribution in this environment."""
    return {_name(d.metadata["Name"]): (d.version, d.metadata["Requires-Python"]) for d in md.distributions()}


def uninstallable(pins: list[Requirement], have: dict[str, tuple[str, str | None]],
                  pythons: list[str]) -> tuple[list[str], int]:
    """The pins whose installed release's Requires-Python excludes a Python they apply to, and how
    many pins could be checked (installed here at the pinned version)."""
    bad, checked = [], 0
    for pin in pins:
        (version,) = (s.version for s in pin.specifier)
        got = have.get(_name(pin.name))
        if got is None or got[0].split("+")[0] != version:
            continue
        checked += 1
        for python in pythons:
            if applies(pin, python) and not admits(got[1], python):
                bad.append(f"{pin} applies to Python {python}, but {pin.name} {version} requires Python "
                           f"{got[1]} (its installed metadata)")
    return bad, checked


def test_the_pins_are_exact_and_one_per_python():
    pins, pythons = constraints(), supported_pythons()
    assert pythons[0] == "3.10", "the workflow's test matrix starts at 3.10 (requires-python >= 3.10)"
    for pin in pins:
        assert len(pin.specifier) == 1 and next(iter(pin.specifier)).operator == "==", (
            f"{pin}: requirements/constraints.txt pins exact versions (name==X.Y.Z) only")
    for python in pythons:
        names = [_name(p.name) for p in pins if applies(p, python)]
        twice = sorted({n for n in names if names.count(n) > 1})
        assert not twice, f"{twice} pinned twice for Python {python}: give each line a python_version marker"


def test_every_pin_admits_the_pythons_it_applies_to():
    bad, checked = uninstallable(constraints(), installed(), supported_pythons())
    assert checked >= 20, f"only {checked} pins are installed at their version here: run python3 course.py test"
    assert not bad, (
        "requirements/constraints.txt pins releases that cannot install on a Python they apply to:\n  "
        + "\n  ".join(bad)
        + '\nKeep this pin for the Pythons it admits (; python_version >= "3.11") and pin, on a '
        '; python_version < "3.11" line, the newest release that admits the older Python '
        "(uv pip compile --python 3.10 -c requirements/constraints.txt pyproject.toml --all-extras "
        "finds it once this pin is left out).")


def test_the_check_catches_a_pin_that_dropped_python_3_10(tmp_path):
    """The check itself: ipykernel 7.4.0 unmarked (Requires-Python >=3.11) is reported for 3.10."""
    path = tmp_path / "constraints.txt"
    path.write_text('ipykernel==7.4.0\nipython==9.18.1; python_version >= "3.11"\n')
    have = {"ipykernel": ("7.4.0", ">=3.11"), "ipython": ("9.18.1", ">=3.11")}
    bad, checked = uninstallable(constraints(path), have, ["3.10", "3.11", "3.12"])
    assert checked == 2
    assert len(bad) == 1 and bad[0].startswith("ipykernel==7.4.0 applies to Python 3.10"), bad
