"""``python -m hooktutor doctor``: is this environment ready for the course?

Run in ``00_start_here.ipynb`` as the environment check. Each check says what it found and,
when something is wrong, what to do about it in plain words.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import re
import sys
from dataclasses import dataclass
from pathlib import Path

try:
    from ..i18n import N_, fmt, tr
except ImportError:   # loaded by path by course.py, before the package is installed: English
    def N_(text: str) -> str:  # noqa: N802
        return text

    def tr(text: str) -> str:
        return text

    def fmt(template: str, **fields: object) -> str:
        return template.format(**fields)

MIN_PYTHON = (3, 10)
MIN_TORCH = (2, 1)


@dataclass
class Finding:
    name: str
    ok: bool
    found: str
    fix: str = ""
    warn_only: bool = False

    @property
    def mark(self) -> str:
        return "ok  " if self.ok else ("warn" if self.warn_only else "FAIL")


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


def constraints_file() -> Path | None:
    """requirements/constraints.txt of the course checkout this package was installed from."""
    candidate = Path(__file__).resolve().parents[2] / "requirements" / "constraints.txt"
    return candidate if candidate.exists() else None


def pinned_versions(path: Path, python: tuple[int, int] | None = None) -> dict[str, str]:
    """``name -> version`` of the pins that apply to this Python (or to ``python``, e.g. ``(3, 11)``)."""
    pins: dict[str, str] = {}
    py = python or sys.version_info[:2]
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or "==" not in line:
            continue
        spec, _, marker = line.partition(";")
        m = re.search(r'python_version\s*([<>=]+)\s*"(\d+)\.(\d+)"', marker)
        if m:
            op, want = m.group(1), (int(m.group(2)), int(m.group(3)))
            applies = {"<": py < want, ">=": py >= want, "==": py == want, ">": py > want,
                       "<=": py <= want}.get(op, True)
            if not applies:
                continue
        name, version = (s.strip() for s in spec.split("==", 1))
        pins[name.lower().replace("_", "-")] = version
    return pins


def in_checkout() -> bool:
    """Whether this package runs from a course checkout (``python3 course.py ...`` exists), not
    from an installed wheel (``pip install``, Colab, Binder): the doctor's advice names the
    commands of the route the learner is on."""
    return constraints_file() is not None and (constraints_file().parents[1] / "course.py").exists()


def _fix(checkout: str, installed: str) -> str:
    """The advice for a checkout, or for an installed package (no course.py there)."""
    return checkout if in_checkout() else installed


def check_python() -> Finding:
    v = sys.version_info
    ok = v[:2] >= MIN_PYTHON
    return Finding("Python", ok, f"{v.major}.{v.minor}.{v.micro} at {sys.executable}",
                   "" if ok else _fix("install Python 3.10 or newer and run `python3 course.py lab` with it",
                                      "install Python 3.10 or newer and install hooktutor into it"))


def check_torch() -> Finding:
    try:
        import torch
    except ImportError:
        return Finding("torch", False, "not installed",
                       _fix("run `python3 course.py lab`, which installs torch 2.13.0 into .venv",
                            "`pip install torch` in this environment (the course is tested on 2.13.0)"))
    ok = _version_tuple(torch.__version__) >= MIN_TORCH
    device = "CUDA available" if torch.cuda.is_available() else "CPU only (all the course needs)"
    return Finding("torch", ok, f"{torch.__version__}, {device}",
                   "" if ok else _fix("hooktutor needs torch 2.1 or newer; run `python3 course.py lab`",
                                      "hooktutor needs torch 2.1 or newer: `pip install -U torch`"))


def check_pins() -> list[Finding]:
    path = constraints_file()
    if path is None:
        return [Finding("pinned versions", True, "not checked: this is not a course checkout", warn_only=True)]
    wrong = []
    pins = pinned_versions(path)
    for name in ("torch", "numpy", "matplotlib", "ipywidgets", "ipykernel", "jupyterlab", "nbval"):
        want = pins.get(name)
        if want is None:
            continue
        try:
            have = md.version(name)
        except md.PackageNotFoundError:
            have = "missing"
        if have.split("+")[0] != want:
            wrong.append(f"{name} {have} (pinned {want})")
    if wrong:
        return [Finding("pinned versions", False, "; ".join(wrong),
                        "stored outputs were made with the pinned versions, so a notebook test may "
                        "differ; run `python3 course.py lab` (or `test`) to install them into .venv",
                        warn_only=True)]
    return [Finding("pinned versions", True, f"match {path.name}")]


def check_widgets() -> Finding:
    try:
        ipywidgets = importlib.import_module("ipywidgets")
    except ImportError:
        return Finding("widgets", False, "ipywidgets not installed",
                       _fix("run `python3 course.py lab`; or `pip install 'ipywidgets>=8'`",
                            "`pip install 'ipywidgets>=8'` in this environment"))
    ok = _version_tuple(ipywidgets.__version__) >= (8,)
    try:
        front = md.version("jupyterlab_widgets")
    except md.PackageNotFoundError:
        front = None
    if not ok:
        return Finding("widgets", False, f"ipywidgets {ipywidgets.__version__}",
                       "the lessons need ipywidgets 8: `pip install 'ipywidgets>=8'`")
    if front is None:
        return Finding("widgets", False, f"ipywidgets {ipywidgets.__version__} but no jupyterlab_widgets",
                       "JupyterLab would show 'Error displaying widget'; `pip install jupyterlab_widgets`")
    return Finding("widgets", True, f"ipywidgets {ipywidgets.__version__}, jupyterlab_widgets {front}")


def check_kernel() -> Finding:
    try:
        importlib.import_module("ipykernel")
        from jupyter_client.kernelspec import KernelSpecManager
    except ImportError:
        return Finding("Jupyter kernel", False, "ipykernel is not installed in this environment",
                       _fix("run `python3 course.py lab`; or `pip install ipykernel` here",
                            "`pip install ipykernel` in this environment"))
    try:
        spec = KernelSpecManager().get_kernel_spec("python3")
    except Exception:  # no such kernel
        return Finding("Jupyter kernel", False, "no 'python3' kernel found",
                       f"run `{sys.executable} -m ipykernel install --sys-prefix`")
    exe = spec.argv[0]
    same = exe in {"python", "python3", sys.executable} or Path(exe).resolve() == Path(sys.executable).resolve()
    return Finding("Jupyter kernel", same, f"python3 -> {exe}",
                   "" if same else _fix("the 'python3' kernel belongs to another Python; start Lab with "
                                        "`python3 course.py lab` so the course's kernel is used",
                                        "the 'python3' kernel belongs to another Python; start Lab with "
                                        "`hooktutor lab` from this environment so its kernel is used"))


def run_checks() -> list[Finding]:
    findings = [check_python(), check_torch()]
    findings += check_pins()
    findings += [check_widgets(), check_kernel()]
    return findings


class Report:
    """The doctor's findings; prints as a short table (shown in ``00_start_here.ipynb``)."""

    def __init__(self, findings: list[Finding]):
        self.findings = findings

    @property
    def ok(self) -> bool:
        return all(f.ok or f.warn_only for f in self.findings)

    def __repr__(self) -> str:
        verdict = N_("ready for the course") if self.ok else N_("something needs fixing")
        lines = [fmt("hooktutor doctor: {verdict}", verdict=tr(verdict))]
        for f in self.findings:
            name = tr(f.name) if " " in f.name else f.name   # a one-word name is a package's: torch, widgets
            lines.append(f"  [{f.mark}] {name}: {tr(f.found)}")
            if not f.ok and f.fix:
                lines.append("         " + fmt("fix: {fix}", fix=tr(f.fix)))
        return "\n".join(lines)


def check(*, verbose_versions: bool = True) -> Report:
    """Run every check; returns a :class:`Report` (``.ok`` says whether the course will work)."""
    return Report(run_checks())


def main(argv: list[str] | None = None) -> int:
    report = check()
    print(report)
    return 0 if report.ok else 1
