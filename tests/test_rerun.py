"""Every notebook gives the same outputs when it is run twice in one kernel.

This is the "re-run a cell while debugging" promise: no hook accumulates, no state leaks
from the first run into the second. Outputs are compared the way nbval compares them (text
only, after the sanitize file); cells tagged nbval-ignore-output are skipped.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.course_env

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TEXT_TYPES = ("text/plain", "text/html", "text/latex", "text/markdown")


def sanitizers() -> list[tuple[re.Pattern, str]]:
    text = (ROOT / "tests" / "sanitize.cfg").read_text()
    return [(re.compile(r), s) for r, s in re.findall(r"^regex: (.*)$\n^replace: (.*)$", text, flags=re.M)]


def comparable(outputs: list, subs: list[tuple[re.Pattern, str]]) -> list[str]:
    out = []
    last_stream = None  # the kernel may split one print into several chunks; join them as nbval does
    for o in outputs:
        if o["output_type"] == "stream" and last_stream == o["name"]:
            out[-1] += o["text"]
            continue
        last_stream = o["name"] if o["output_type"] == "stream" else None
        if o["output_type"] == "stream":
            out.append(f"{o['name']}: {o['text']}")
        elif o["output_type"] == "error":
            out.append(f"error: {o['ename']}: {o['evalue']}")
        else:
            for mime in TEXT_TYPES:
                if mime in o.get("data", {}):
                    out.append(f"{mime}: {o['data'][mime]}")
    text = "\n".join(out)
    for pattern, replacement in subs:
        text = pattern.sub(replacement, text)
    return text.splitlines()


def run_cells(client: NotebookClient, cells: list) -> list:
    done = []
    for index, cell in enumerate(cells):
        cell = copy.deepcopy(cell)
        if cell.cell_type == "code":
            client.execute_cell(cell, index)
        done.append(cell)
    return done


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_twice_in_one_kernel_gives_the_same_outputs(path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=120, kernel_name="python3", shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(path.parent)}})
    subs = sanitizers()
    with client.setup_kernel():
        first = run_cells(client, nb.cells)
        second = run_cells(client, nb.cells)
    for index, (a, b) in enumerate(zip(first, second)):
        if a.cell_type != "code" or "nbval-ignore-output" in a.metadata.get("tags", []):
            continue
        assert comparable(b.outputs, subs) == comparable(a.outputs, subs), (
            f"{path.name}, code cell at index {index} gave a different output the second time:\n"
            f"{a.source[:300]}")
