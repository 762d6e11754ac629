"""Executing the course notebooks and storing their outputs (``python course.py regen``).

Outputs are made the way nbval will check them: a fresh kernel of this environment, the
notebook's folder as working directory, cells top to bottom. Metadata that changes from
machine to machine (the Python patch version, execution timings) is dropped so a re-run
on another machine leaves the file unchanged when the outputs are the same.
"""

from __future__ import annotations

from pathlib import Path

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def normalise(nb) -> None:
    """Stable metadata: one kernelspec name, no per-machine versions or timings."""
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                out.get("metadata", {}).pop("execution", None)


def execute(path: str | Path, *, timeout: int = 300) -> None:
    """Execute the notebook at ``path`` top to bottom and store its outputs in place."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    # "immediate": a graceful kernel shutdown waits seconds for torch and matplotlib to unload
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    normalise(nb)
    nbformat.write(nb, path)
