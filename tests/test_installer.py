"""Which tool ``python3 course.py`` installs .venv with (hooktutor/course/installer.py): uv when it
is found, pip otherwise, and uv is given pip's indexes. No network, no uv needed: every command
line is built and compared, none is run."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

from hooktutor.course import installer

ROOT = Path(__file__).resolve().parents[1]
UV = "/opt/uv/bin/uv"

# `pip config list` as pip prints it (section.key=repr(value)) on a machine with a wheelhouse,
# two extra local indexes, a Windows-style path and a PIP_* variable overriding [global].
PIP_CONFIG_LIST = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels'
download.dest='C:\\\\wheels'
global.cert='/old/bundle.pem'
global.extra-index-url='file:///opt/pypi/simple\\nfile:///opt/pypi-more/simple'
global.find-links='/not/this/one'
install.trusted-host='mirror.lan'
"""


def uv_found(config: str = PIP_CONFIG_LIST, environ=None, version=(0, 13, 8)) -> installer.Installer:
    return installer.choose(environ or {}, uv=UV, pip_config=lambda: installer.parse_pip_config_list(config),
                            version=lambda exe: version)


def test_pip_config_list_is_merged_as_pip_install_reads_it():
    settings = installer.parse_pip_config_list(PIP_CONFIG_LIST)
    assert settings["find-links"] == "/opt/wheels"  # PIP_FIND_LINKS over [global]
    assert settings["cert"] == "/etc/ssl/certs/ca-certificates.crt"
    assert settings["extra-index-url"].split() == ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"]
    assert settings["trusted-host"] == "mirror.lan"  # [install] applies to pip install
    assert "dest" not in settings  # [download] does not
    assert installer.parse_pip_config_list("global.find-links='C:\\\\wheels'") == {"find-links": "C:\\wheels"}
    assert installer.pip_env_settings({"PIP_FIND_LINKS": "/w", "PIP_NO_INDEX": "1", "HOME": "/h"}) == {
        "find-links": "/w", "no-index": "1"}


def test_without_uv_pip_installs_as_before():
    chosen = installer.choose({}, uv=None, pip_config=lambda: pytest.fail("pip's configuration is not needed"))
    assert chosen.name == "pip" and "uv not found" in chosen.why
    assert installer.venv_command(chosen, "/v") is None  # the standard library's venv, with pip
    assert installer.install_command(chosen, "/v/bin/python", ["-c", "c.txt", "-e", ".[lab,test]"]) == [
        "/v/bin/python", "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off",
        "-c", "c.txt", "-e", ".[lab,test]"]
    assert installer.install_env(chosen, {"A": "1"}) == {"A": "1"}


def test_uv_gets_pips_indexes_wheelhouse_certificate_and_timeout():
    chosen = uv_found()
    assert chosen.name == "uv" and chosen.why == f"uv 0.13.8 at {UV}"
    indexes = ["--index-strategy", "unsafe-best-match", "--index", "file:///opt/pypi/simple",
               "--index", "file:///opt/pypi-more/simple", "--find-links", "/opt/wheels",
               "--allow-insecure-host", "mirror.lan"]
    assert installer.venv_command(chosen, "/v", python="/usr/bin/python3") == [
        UV, "venv", "-q", "--allow-existing", "--no-project", "--python", "/usr/bin/python3", "/v"]
    assert installer.install_command(chosen, "/v/bin/python", ["-c", "c.txt", "-e", ".[lab,test]"]) == [
        UV, "pip", "install", "--python", "/v/bin/python", "-q", *indexes, "pip", "-c", "c.txt", "-e",
        ".[lab,test]"]
    env = installer.install_env(chosen, {"UV_HTTP_TIMEOUT": "5"})
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "5"}  # the user's wins


def test_a_wheelhouse_without_index_and_another_default_index_are_passed_on():
    options = uv_found(PIP_CONFIG_LIST + ":env:.no-index='1'\n:env:.find-links='/media/usb/wheelhouse'\n").uv_options
    assert options[2:] == ["--no-index", "--find-links", "/media/usb/wheelhouse", "--allow-insecure-host", "mirror.lan"]
    options = uv_found("global.index-url='https://mirror.lan/simple'\n").uv_options
    assert options[2:] == ["--default-index", "https://mirror.lan/simple"]


def test_a_pip_setting_uv_cannot_be_given_means_pip():
    chosen = uv_found("global.proxy='http://proxy.lan:3128'\nglobal.only-binary=':all:'\n")
    assert chosen.name == "pip" and "sets only-binary, proxy" in chosen.why
    with pytest.raises(SystemExit, match="uv, but pip's configuration sets proxy"):
        uv_found("global.proxy='http://proxy.lan:3128'\n", environ={installer.SETTING: "uv"})


def test_the_setting_chooses_and_says_what_to_do():
    assert uv_found(environ={installer.SETTING: "pip"}).name == "pip"
    assert uv_found(environ={installer.SETTING: "UV"}).why.endswith("(HOOKTUTOR_INSTALLER=uv)")
    with pytest.raises(SystemExit, match="pip install --user uv"):
        installer.choose({installer.SETTING: "uv"}, uv=None)
    with pytest.raises(SystemExit, match="not one of auto, uv, pip"):
        installer.choose({installer.SETTING: "conda"}, uv=UV)
    old = uv_found(version=(0, 4, 30))
    assert old.name == "pip" and "0.4.30, older than 0.5" in old.why


def test_uv_is_found_on_path_or_as_the_uv_package(monkeypatch):
    assert installer.find_uv(which=lambda name: f"/bin/{name}") == "/bin/uv"
    monkeypatch.setitem(sys.modules, "uv", types.SimpleNamespace(find_uv_bin=lambda: "/site/uv/bin/uv"))
    assert installer.find_uv(which=lambda name: None) == "/site/uv/bin/uv"
    monkeypatch.setitem(sys.modules, "uv", None)  # not importable
    assert installer.find_uv(which=lambda name: None) is None


def test_course_py_creates_and_installs_with_the_chosen_tool(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("hooktutor_course_script", ROOT / "course.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)
    monkeypatch.setenv("HOOKTUTOR_VENV", str(tmp_path / "venv"))
    ran = []

    def run(cmd, **kw):
        ran.append([str(c) for c in cmd])
        course.venv_bin("python").parent.mkdir(parents=True, exist_ok=True)
        course.venv_bin("python").touch()
        return 0

    monkeypatch.setattr(course, "run", run)
    monkeypatch.setattr(course, "run_install", lambda cmd, env: run(cmd))
    monkeypatch.setattr(course._installer, "choose", lambda: uv_found())
    python = course.ensure_env()
    assert [cmd[:2] for cmd in ran] == [[UV, "venv"], [UV, "pip"]]
    assert ran[1][-4:] == ["-c", str(course.CONSTRAINTS), "-e", f".[{course.EXTRAS}]"]
    assert course.ensure_env() == python and len(ran) == 2  # the stamp: nothing to do the second time


def test_course_py_doctor_says_which_installer(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("hooktutor_course_script", ROOT / "course.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)
    monkeypatch.setattr(course, "ensure_env", lambda torch=None: Path(sys.executable))
    monkeypatch.setattr(course, "run", lambda cmd, **kw: 0)
    monkeypatch.setattr(course._installer, "choose", lambda: installer.choose({}, uv=None))
    assert course.cmd_tool("doctor", []) == 0
    assert "[course] installs with pip (uv not found on PATH nor as the uv package" in capsys.readouterr().out


def test_a_first_set_up_says_what_it_installs_as_it_goes(capsys):
    """pip's "Collecting" lines become ours as they come (a first set-up takes minutes: never
    silent); its other lines are shown only when it fails."""
    said = []
    fake_pip = ("import sys; print('Collecting torch==2.13.0'); print('  Using cached torch.whl');"
                "print('Collecting numpy'); print('Processing /opt/wheels/six-1.17.0-py2.py3-none-any.whl');"
                "print('Installing collected packages: numpy, torch');"
                "print('Successfully installed numpy torch'); sys.exit(int(sys.argv[1]))")
    assert installer.run_with_progress([sys.executable, "-c", fake_pip, "0"], said.append) == 0
    assert said == ["    1  torch==2.13.0", "    2  numpy", "    3  six",
                    "installing 2 packages (a minute or two, quietly)", "installed"]
    assert capsys.readouterr().out == ""
    assert installer.run_with_progress([sys.executable, "-c", fake_pip, "3"], said.append) == 3
    assert "Using cached torch.whl" in capsys.readouterr().out
