"""Run the notebooks as another CPU would: the environment variables that pick torch's CPU kernels.

A stored notebook output must be the same on every machine that runs the pinned torch, but a
CPU computes a float sum in the order its widest vector instructions allow: an AVX-512 server,
an AVX2 laptop and an ARM Mac round differently in the last bits, and a training run amplifies
that into other digits. Three libraries inside torch choose their instructions at start-up,
each from its own environment variable:

* ATen, torch's own kernels (reductions, element-wise ops): ``ATEN_CPU_CAPABILITY``;
* oneDNN, the convolutions: ``ONEDNN_MAX_CPU_ISA``;
* MKL, the matrix products: ``MKL_ENABLE_INSTRUCTIONS``.

Capping all three makes this machine compute like an older one. ``python3 course.py test`` holds
every notebook's stored outputs to what three CPUs print: this machine's own, where ``regen``
stored them; ``avx2`` under strict nbval (``hooktutor/course/nbval_twice.py``: a Run All with
every exercise blank, whose cells that are not exercises must print their stored outputs, then
the solved lesson in the same kernel, every cell compared); and ``default`` in the browser's Run
All of each lesson with the solutions pasted in (``tests/browser/test_learner_hour.py``; its
JupyterLab's kernels run under it). nbval can add profiles of its own
(``--cpu-profiles=default``; the root ``conftest.py``). A number that
only holds on the CPU that stored it fails here instead of on a learner's laptop. ``ATEN_CPU_CAPABILITY`` alone is
not enough: on an AVX-512 machine it left the convolutions on AVX-512 and passed a notebook
that fails on a real AVX2 CPU.

Taught nowhere: this is how the course keeps the promise of lesson 00 that every stored
output is what the learner will see. ``docs/authoring.md`` says how to write cells that pass.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

CPU_PROFILES: dict[str, dict[str, str]] = {
    # a typical laptop or desktop of the last decade (Intel Haswell+, AMD Zen 1-3)
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    # no vector extensions beyond SSE4: torch's generic kernels, the closest to an ARM machine here
    "default": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
}
# The test command runs every notebook three times, and each run holds the outputs to the stored
# ones as another CPU computes them: nbval's two Run Alls in one kernel (exercises blank, then
# solved; hooktutor/course/nbval_twice.py) under NBVAL_PROFILE, and the learner's hour in the
# browser (tests/browser/test_learner_hour.py, solutions pasted in) under BROWSER_PROFILE.
DEFAULT_PROFILES: tuple[str, ...] = ()   # extra strict-nbval runs (--cpu-profiles adds them)
NBVAL_PROFILE = "avx2"                   # the kernel of each lesson under nbval
BROWSER_PROFILE = "default"              # the kernels of the browser tests' JupyterLab


def runs_here(name: str) -> bool:
    """Whether this CPU can compute as profile ``name`` does: ``default`` everywhere, ``avx2``
    on an x86 CPU with AVX2 (on another CPU torch would ignore the cap, with a warning)."""
    if name == "default":
        return True
    try:
        import torch

        return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    except (ImportError, AttributeError):
        return False


def nbval_profile() -> str:
    """The profile of the lessons' nbval kernels here: ``NBVAL_PROFILE``, or ``""`` (this CPU's
    own) where this CPU cannot compute as it does."""
    return NBVAL_PROFILE if runs_here(NBVAL_PROFILE) else ""


def parse(spec: str) -> list[str]:
    """``"avx2,default"`` -> ``["avx2", "default"]``; ``"none"`` or ``""`` -> ``[]``."""
    names = [s.strip() for s in spec.split(",") if s.strip() and s.strip() != "none"]
    unknown = [n for n in names if n not in CPU_PROFILES]
    if unknown:
        raise ValueError(f"unknown CPU profile {unknown[0]!r}; choose from {', '.join(CPU_PROFILES)} "
                         "(comma-separated), or 'none'")
    return names


@contextmanager
def profile_environment(name: str) -> Iterator[dict[str, str]]:
    """Set the profile's variables in ``os.environ`` for the block (a kernel started inside
    inherits them), then restore what was there."""
    env = CPU_PROFILES[name]
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
