"""python -m hooktutor doctor: finds what is wrong and says what to do."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hooktutor.course import doctor


@pytest.mark.course_env
def test_doctor_passes_in_the_course_environment():
    result = subprocess.run([sys.executable, "-m", "hooktutor", "doctor"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[0] == "hooktutor doctor: ready for the course"
    for name in ("Python", "torch", "pinned versions", "widgets", "Jupyter kernel"):
        assert f"] {name}: " in result.stdout


def test_failures_are_reported_with_a_fix():
    report = doctor.Report([doctor.Finding("torch", False, "not installed", "run `python3 course.py lab`")])
    assert not report.ok
    assert repr(report).splitlines() == [
        "hooktutor doctor: something needs fixing",
        "  [FAIL] torch: not installed",
        "         fix: run `python3 course.py lab`",
    ]


def test_pins_are_read_for_this_python(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text('a==1.0\nb==2.0; python_version >= "3.11"\nb==1.5; python_version < "3.11"\n# c==3\n')
    pins = doctor.pinned_versions(f)
    assert pins["a"] == "1.0"
    assert pins["b"] == ("2.0" if sys.version_info >= (3, 11) else "1.5")
    assert "c" not in pins


def test_unknown_command_shows_usage():
    result = subprocess.run([sys.executable, "-m", "hooktutor", "nonsense"], capture_output=True, text=True)
    assert result.returncode == 2 and "usage: hooktutor " in result.stderr


def test_the_advice_names_the_commands_of_the_learners_route(monkeypatch):
    """In a checkout the doctor says `python3 course.py lab`; from an installed wheel (no course.py,
    as on Colab or after pip install) it never names a command that is not there."""
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch":
            raise ImportError("no torch here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    assert doctor.in_checkout()
    assert "python3 course.py lab" in doctor.check_torch().fix
    monkeypatch.setattr(doctor, "constraints_file", lambda: None)   # as in an installed wheel
    for finding in (doctor.check_torch(), doctor.check_python()):
        assert "course.py" not in finding.fix
    assert "pip install torch" in doctor.check_torch().fix
