"""How long each lesson notebook takes to execute, and how long the whole test suite takes.

A notebook is executed the way ``python -m hooktutor regen`` does it (a fresh process, a
fresh ``python3`` kernel, the notebook's folder as working directory, cells top to bottom),
but in memory: the notebook file is read and never written. The time reported is the wall
time of that whole process, so kernel start is included, as a learner waiting for "Run
all" experiences it. The test suite is timed as ``python3 course.py test`` runs it
(``pytest -n auto --dist loadfile --no-loadscope-reorder``).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from pathlib import Path

try:
    from ._common import ROOT, run_timed
except ImportError:  # run as a script from benchmarks/
    from _common import ROOT, run_timed

NOTEBOOKS = ROOT / "notebooks"


def notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))


def is_capstone(path: Path) -> bool:
    return "capstone" in path.stem


def execute_in_memory(path: Path, timeout: int = 300) -> dict:
    """Execute the notebook at ``path`` without writing it; seconds to start and to run."""
    import nbformat
    from nbclient import NotebookClient

    t0 = time.perf_counter()
    nb = nbformat.read(path, as_version=4)
    started: list[float] = []
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(path.parent)}},
                            on_notebook_start=lambda **kw: started.append(time.perf_counter()))
    client.execute()
    t1 = time.perf_counter()
    start = started[0] if started else t0
    return {"kernel_start_s": start - t0, "cells_s": t1 - start}


def measure(*, repeats: int = 1, python: str = sys.executable, only: list[Path] | None = None,
            progress=lambda s: None) -> dict:
    """``{notebook name: {"seconds": median wall time, "cells_s", "limit_s"}}``.

    With ``repeats > 1`` the notebooks run round-robin, ``repeats`` times each.
    """
    paths = only if only is not None else notebooks()
    runs: dict[str, list[tuple[float, dict]]] = {p.name: [] for p in paths}
    for r in range(repeats):
        for path in paths:
            progress(f"notebook {path.name} ({r + 1}/{repeats})")
            wall, _, proc = run_timed([python, __file__, "--execute", str(path)], cwd=ROOT)
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout)[-1500:]
                raise RuntimeError(f"executing {path.name} failed:\n{tail}")
            runs[path.name].append((wall, json.loads(proc.stdout.strip().splitlines()[-1])))
    result = {}
    for path in paths:
        walls = [w for w, _ in runs[path.name]]
        result[path.name] = {
            "seconds": statistics.median(walls),
            "cells_s": statistics.median(d["cells_s"] for _, d in runs[path.name]),
            "limit_s": 30.0 if is_capstone(path) else 10.0,
            "repeats": repeats,
        }
    return result


# what `python3 course.py test` runs: one pytest worker per core, a file per worker
SUITE_ARGS = ["-m", "pytest", "-q", "-n", "auto", "--dist", "loadfile", "--no-loadscope-reorder"]


def measure_suite(*, python: str = sys.executable, timeout: float = 3600) -> dict:
    """Wall time of the test suite as ``python3 course.py test`` runs it, and its summary line."""
    wall, cpu, proc = run_timed([python, *SUITE_ARGS], cwd=ROOT, timeout=timeout)
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
    summary = next((ln.strip("= ").strip() for ln in reversed(lines)
                    if re.search(r"\b(passed|failed|error)", ln)), lines[-1] if lines else "")
    failed = [ln.split(" - ")[0].removeprefix("FAILED ").removeprefix("ERROR ").strip()
              for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    return {"seconds": wall, "cpu_s": cpu, "returncode": proc.returncode, "summary": summary,
            "failed": failed}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--execute":
        print(json.dumps(execute_in_memory(Path(sys.argv[2]))))
    else:
        picked = [Path(a).resolve() for a in sys.argv[1:]] or None
        print(json.dumps(measure(only=picked, progress=print), indent=1))
