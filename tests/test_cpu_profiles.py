"""The CPU profiles really make torch compute like an older CPU.

``python3 course.py test`` holds the stored outputs to what each profile prints
(nbval's kernel under ``avx2``, ``hooktutor/course/nbval_twice.py``, the browser's learner's hour under ``default``).
That run proves something only if the profile's variables reach the libraries inside torch:
each test here starts a fresh Python with a profile and asks torch which instructions it used.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hooktutor.course.cpu_profiles import (
    BROWSER_PROFILE,
    CPU_PROFILES,
    DEFAULT_PROFILES,
    NBVAL_PROFILE,
    parse,
    profile_environment,
)

ISA_RANK = {"default": 0, "sse41": 0, "avx2": 1, "avx512": 2}

PROBE = """
import torch
torch.set_num_threads(1)
print(torch.backends.cpu.get_cpu_capability())
torch.nn.Conv2d(3, 8, 3)(torch.ones(4, 3, 16, 16))   # large enough for oneDNN
"""


def run_under(profile: str) -> tuple[str, str]:
    env = {**os.environ, **CPU_PROFILES[profile], "ONEDNN_VERBOSE": "1"}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    conv = [line for line in lines if ",convolution," in line and ",exec," in line]
    return lines[0].strip().lower(), conv[0] if conv else ""


def rank(isa: str) -> int:
    for name, value in sorted(ISA_RANK.items(), key=lambda kv: -len(kv[0])):
        if name in isa:
            return value
    return ISA_RANK["default"] if "jit:uni" in isa or "ref" in isa or "gemm" in isa else 99


@pytest.mark.parametrize("profile", sorted(CPU_PROFILES))
def test_the_profile_caps_aten_and_onednn(profile):
    capability, conv = run_under(profile)
    want = CPU_PROFILES[profile]["ATEN_CPU_CAPABILITY"]
    capability = {"no avx": "default"}.get(capability, capability)   # torch 2.1 calls it "NO AVX"
    assert capability == want, f"ATEN_CPU_CAPABILITY={want} ignored: torch reports {capability}"
    if conv:   # oneDNN may not be used for this conv on every build; when it is, it obeys the cap
        isa = conv.split(",convolution,")[1].split(",")[0]
        assert rank(isa) <= ISA_RANK[profile], f"oneDNN ran the convolution with {isa} under {profile!r}"


def test_parse_accepts_names_and_none_and_rejects_typos():
    assert parse("avx2, default") == ["avx2", "default"]
    assert parse("none") == [] and parse("") == []
    with pytest.raises(ValueError, match="unknown CPU profile 'avx3'; choose from avx2, default"):
        parse("avx3")


def test_profile_environment_restores_what_was_there(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    with profile_environment("default") as env:
        assert os.environ["ATEN_CPU_CAPABILITY"] == "default" == env["ATEN_CPU_CAPABILITY"]
        assert os.environ["ONEDNN_MAX_CPU_ISA"] == "SSE41"
    assert os.environ["ATEN_CPU_CAPABILITY"] == "avx512"
    assert "ONEDNN_MAX_CPU_ISA" not in os.environ


def test_notebooks_are_collected_once_per_profile(pytester_notebook_ids):
    ids = pytester_notebook_ids
    assert "notebooks/00_start_here.ipynb::Cell 0" in ids
    for profile in CPU_PROFILES:   # asked for with --cpu-profiles
        assert f"notebooks/00_start_here.ipynb[cpu={profile}]::Cell 0" in ids


@pytest.fixture
def pytester_notebook_ids():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
                           f"--cpu-profiles={','.join(CPU_PROFILES)}", "notebooks/00_start_here.ipynb"],
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.strip() for line in done.stdout.splitlines()}


def test_every_profile_checks_the_stored_outputs_somewhere_and_once():
    checked = [*DEFAULT_PROFILES, NBVAL_PROFILE, BROWSER_PROFILE]
    assert sorted(checked) == sorted(CPU_PROFILES)
