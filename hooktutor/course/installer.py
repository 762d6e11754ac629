"""Which tool installs the course environment: uv when it is there, pip otherwise.

Used by ``python3 course.py`` (loaded by path before the course environment exists: standard
library only, nothing imported from the package). uv installs the same pinned versions as pip,
several times faster on a first install (README, "measured"), but it is a separate program that a
learner may not have, so it is only used when found: ``uv`` on PATH, or the ``uv`` package
importable in the Python that runs course.py. ``HOOKTUTOR_INSTALLER=pip`` (or ``=uv``) overrides
the choice.

uv does not read pip's configuration (pip.conf / pip.ini, ``PIP_*`` variables). A machine whose
pip is pointed at a mirror, a wheelhouse or PyTorch's CPU index would get something else from
uv, e.g. a CUDA torch of several GB from the default index. So pip's configuration is read (with
``pip config list``, as pip itself merges it) and translated into uv's options; when it sets
anything this module cannot translate, pip installs instead, saying why.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SETTING = "HOOKTUTOR_INSTALLER"  # "uv", "pip", or unset/"auto": uv when found
CHOICES = ("auto", "uv", "pip")

# pip settings that only change pip's own messages or cache: nothing that uv installs.
HARMLESS = {"disable-pip-version-check", "no-color", "progress-bar", "quiet", "verbose", "cache-dir",
            "no-cache-dir", "root-user-action", "require-virtualenv", "no-input", "report", "log",
            "no-python-version-warning", "retries", "exists-action"}
# pip settings that uv is given as options or variables (translate_pip_config).
TRANSLATED = {"index-url", "extra-index-url", "find-links", "no-index", "trusted-host", "cert",
              "timeout", "default-timeout"}
TRUE = {"1", "true", "yes", "on", "y"}
# The oldest uv with every option used here (--index/--default-index, --allow-existing); the
# course was measured with uv 0.13.8. An older uv is passed over for pip.
MIN_UV = (0, 5)


@dataclass
class Installer:
    """The tool chosen, and why (printed by ``course.py setup``/``doctor``)."""

    name: str  # "uv" or "pip"
    why: str
    uv: str | None = None  # uv's executable when name == "uv"
    uv_options: list[str] = field(default_factory=list)  # pip's index settings, as uv options
    uv_env: dict[str, str] = field(default_factory=dict)  # ... and as variables


def find_uv(which=shutil.which) -> str | None:
    """uv's executable: ``uv`` on PATH, else the one of the ``uv`` package in this Python."""
    found = which("uv")
    if found:
        return found
    try:
        import uv  # the PyPI package `uv` ships the executable and says where it is
    except ImportError:
        return None
    try:
        return os.fsdecode(uv.find_uv_bin())
    except (FileNotFoundError, AttributeError):
        return None


def uv_version(exe: str) -> tuple[int, ...] | None:
    """``uv --version`` as numbers (``uv 0.13.8 (...)`` -> (0, 13, 8)); None if it does not run."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def parse_pip_config_list(text: str) -> dict[str, str]:
    """pip's effective settings from the output of ``pip config list`` (``section.key='value'``
    lines), as pip applies them to ``pip install``: [global], then [install], then the
    ``PIP_*`` variables (``:env:``), each overriding the one before."""
    sections: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        name, sep, raw = line.partition("=")
        section, dot, key = name.rpartition(".")
        if not sep or not dot:
            continue
        try:
            value = str(ast.literal_eval(raw.strip()))  # pip prints each value with repr()
        except (ValueError, SyntaxError):
            value = raw.strip()
        sections.setdefault(section, {})[key.strip()] = value
    merged: dict[str, str] = {}
    for section in ("global", "install", ":env:"):
        merged.update(sections.get(section, {}))
    return merged


def pip_env_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``PIP_*`` variables as pip reads them (``PIP_FIND_LINKS`` -> ``find-links``)."""
    return {k[4:].lower().replace("_", "-"): v for k, v in environ.items()
            if k.startswith("PIP_") and k not in {"PIP_CONFIG_FILE"}}


def read_pip_config(python: str = sys.executable, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """pip's settings for ``pip install``: pip's own ``config list`` when this Python has pip,
    else the ``PIP_*`` variables alone (without pip here, no pip.conf is read by anyone)."""
    try:
        out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             timeout=60, env=dict(environ))
    except (OSError, subprocess.SubprocessError):
        out = None
    if out is not None and out.returncode == 0:
        return parse_pip_config_list(out.stdout)
    return pip_env_settings(environ)


def translate_pip_config(settings: Mapping[str, str]) -> tuple[list[str], dict[str, str], list[str]]:
    """pip's settings as uv options and variables: ``(options, variables, untranslated keys)``.

    ``--index-strategy unsafe-best-match`` makes uv choose as pip does: the best version across
    every index (uv's default takes a package from the first index that has it)."""
    options = ["--index-strategy", "unsafe-best-match"]
    variables: dict[str, str] = {}
    if settings.get("no-index", "").lower() in TRUE:  # pip then ignores every index too
        options.append("--no-index")
    else:
        if settings.get("index-url"):
            options += ["--default-index", settings["index-url"]]
        for url in settings.get("extra-index-url", "").split():
            options += ["--index", url]
    for place in settings.get("find-links", "").split():
        options += ["--find-links", place]
    for host in settings.get("trusted-host", "").split():
        options += ["--allow-insecure-host", host]
    if settings.get("cert"):
        variables["SSL_CERT_FILE"] = settings["cert"]
    timeout = settings.get("timeout") or settings.get("default-timeout")
    if timeout:
        variables["UV_HTTP_TIMEOUT"] = timeout
    left = sorted(k for k in settings if k not in TRANSLATED | HARMLESS)
    return options, variables, left


def choose(environ: Mapping[str, str] = os.environ, uv: str | None | bool = True,
           pip_config=read_pip_config, version=uv_version) -> Installer:
    """The installer for this machine. ``uv``: its executable, None when absent, True to look
    (find_uv). ``pip_config``: a function returning pip's settings (read_pip_config);
    ``version``: one returning uv's version (uv_version)."""
    setting = environ.get(SETTING, "auto").strip().lower() or "auto"
    if setting not in CHOICES:
        raise SystemExit(f"[course] {SETTING}={environ[SETTING]!r} is not one of {', '.join(CHOICES)}: "
                         f"unset it (uv when found, else pip) or set it to uv or pip")
    if setting == "pip":
        return Installer("pip", f"{SETTING}=pip")
    exe = find_uv() if uv is True else uv
    if not exe:
        if setting == "uv":
            raise SystemExit(f"[course] {SETTING}=uv but uv is neither on PATH nor importable in "
                             f"{sys.executable}: install it (`python3 -m pip install --user uv`) or "
                             f"unset {SETTING} to install with pip")
        return Installer("pip", "uv not found on PATH nor as the uv package; uv installs faster: README")
    have = version(exe)
    if not have or have < MIN_UV:
        why = (f"uv at {exe} is {'.'.join(map(str, have)) if have else 'not runnable'}, older than "
               f"{'.'.join(map(str, MIN_UV))}: `uv self update` or a newer uv")
        if setting == "uv":
            raise SystemExit(f"[course] {why}")
        return Installer("pip", why)
    options, variables, left = translate_pip_config(pip_config())
    if left:
        what = f"pip's configuration sets {', '.join(left)}, which course.py cannot pass to uv"
        if setting == "uv":
            raise SystemExit(f"[course] {SETTING}=uv, but {what} (`pip config list` shows where): "
                             f"remove it, or unset {SETTING} to install with pip")
        return Installer("pip", f"{what}; `pip config list` shows where")
    return Installer("uv", f"uv {'.'.join(map(str, have))} at {exe}" + (f" ({SETTING}=uv)" if setting == "uv" else ""),
                     exe, options, variables)


def venv_command(installer: Installer, where: Path | str, python: str = sys.executable) -> list[str] | None:
    """uv's command that creates the environment ``where`` for ``python`` (in 2 s where the
    standard library's venv takes 30, installing pip); None: the standard library's venv makes it."""
    if installer.name != "uv":
        return None
    return [installer.uv, "venv", "-q", "--allow-existing", "--no-project", "--python", python, str(where)]


def install_command(installer: Installer, python: Path | str, install: Sequence[str]) -> list[str]:
    """The command that installs ``install`` (pip's arguments: ``-c FILE``, ``-e .[extras]``,
    requirements) into the environment of ``python``. uv adds pip, which its environments lack
    (a learner's ``%pip install`` and tests/test_wheel.py use it)."""
    if installer.name == "uv":
        return [installer.uv, "pip", "install", "--python", str(python), "-q",
                *installer.uv_options, "pip", *install]
    return [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", *install]


def run_with_progress(cmd: Sequence[str], say: Callable[[str], None], **popen: Any) -> int:
    """Run an install command and say, as it goes, what it does: pip prints a line for each package
    it collects (or reads from disk), which becomes a short line of ours (``  12  numpy``), so a first set-up of a few
    minutes is never silent; its other lines are kept and printed only if the install fails."""
    kept: list[str] = []
    collected = 0
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", **popen)
    assert proc.stdout is not None
    for line in proc.stdout:
        words = line.split()
        if words[:1] in (["Collecting"], ["Processing"]) and len(words) > 1:
            collected += 1   # "Collecting numpy==2.3.4", or a wheel read from disk: "Processing /x/numpy-2.3.4-...whl"
            name = words[1].rsplit("/", 1)[-1]
            say(f"  {collected:3d}  {name.split('-')[0] if name.endswith('.whl') else name}")
        elif words[:3] == ["Installing", "collected", "packages:"]:
            count = line.count(",") + 1
            say(f"installing {count} package{'s' if count != 1 else ''} (a minute or two, quietly)")
        elif words[:2] == ["Successfully", "installed"]:
            say("installed")
        else:
            kept.append(line.rstrip("\n"))
            del kept[:-60]
    code = proc.wait()
    if code != 0:
        print("\n".join(kept), flush=True)
    return code


def install_env(installer: Installer, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment of that command: uv gets the variables translated from pip's settings
    (where the user has not set them)."""
    env = dict(environ)
    for key, value in installer.uv_env.items():
        env.setdefault(key, value)
    return env
