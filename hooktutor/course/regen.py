"""Executing the course notebooks and storing their outputs (``python course.py regen``).

Outputs are made the way nbval will check them: a fresh kernel of this environment, the
notebook's folder as working directory, cells top to bottom. Metadata that changes from
machine to machine (the Python patch version, execution timings) is dropped so a re-run
on another machine leaves the file unchanged when the outputs are the same. Absolute paths
in the outputs (a traceback's frames, the doctor's report) are stored relative to the
course checkout or the Python environment, so no stored output names the machine that ran
``regen``; ``tests/test_stored_outputs.py`` fails on any that remains.
"""

from __future__ import annotations

import re
import site
import sys
import sysconfig
from pathlib import Path

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


# An absolute path: POSIX (/a/b) or Windows (C:\\a\\b), not part of a relative path or a URL.
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/\\~<>-])(?:/[\w.+-]+(?:/[\w.+-]+)+|[A-Za-z]:\\[\w.+ -]+(?:\\[\w.+ -]+)*)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def machine_prefixes(root: Path) -> list[tuple[str, str]]:
    """``(absolute prefix, stored replacement)`` pairs, longest first: the checkout becomes a
    relative path, this Python environment ``<env>``, its site-packages ``<site-packages>``
    (when they lie outside the checkout), the home folder ``~``."""
    pairs = {str(root.resolve()) + "/": ""}
    for folder in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}:
        pairs.setdefault(str(Path(folder).resolve()) + "/", "<site-packages>/")
    pairs.setdefault(str(Path(sys.prefix).resolve()) + "/", "<env>/")
    pairs.setdefault(str(Path.home().resolve()) + "/", "~/")
    return sorted(pairs.items(), key=lambda pair: -len(pair[0]))


# The file IPython runs a cell from, named in warnings: /tmp/ipykernel_<pid>/<hash>.py
KERNEL_CELL_FILE = re.compile(r"(?:/[\w.-]+)*/ipykernel_\d+/\d+\.py")


def _relative(value, prefixes):
    if isinstance(value, str):
        for prefix, replacement in prefixes:
            value = value.replace(prefix, replacement)
        return KERNEL_CELL_FILE.sub("<ipython-cell>", value)
    if isinstance(value, list):
        return [_relative(v, prefixes) for v in value]
    return value


def absolute_paths(text: str) -> list[str]:
    """The absolute paths in ``text`` (colour codes of a traceback removed first)."""
    return ABSOLUTE_PATH.findall(ANSI.sub("", text))


def output_texts(out) -> list[str]:
    """Every text of one stored output: a stream, an error's message and traceback, text data."""
    if out.get("output_type") == "stream":
        return ["".join(out.get("text", ""))]
    if out.get("output_type") == "error":
        return [out.get("evalue", ""), *out.get("traceback", [])]
    return ["".join(v) if isinstance(v, list) else v
            for k, v in out.get("data", {}).items() if k.startswith("text/") and isinstance(v, (str, list))]


def normalise(nb, root: Path | None = None) -> None:
    """Stable metadata (one kernelspec name, no per-machine versions or timings), and paths
    of this machine in the outputs made relative to ``root`` (the checkout) or the environment."""
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    prefixes = machine_prefixes(root) if root is not None else []
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            out.get("metadata", {}).pop("execution", None)
            if out.get("output_type") == "stream":
                out["text"] = _relative(out["text"], prefixes)
            elif out.get("output_type") == "error":
                out["evalue"] = _relative(out["evalue"], prefixes)
                out["traceback"] = _relative(out["traceback"], prefixes)
            else:
                for key in [k for k in out.get("data", {}) if k.startswith("text/")]:
                    out["data"][key] = _relative(out["data"][key], prefixes)


def execute(path: str | Path, *, timeout: int = 300, root: Path | None = None) -> None:
    """Execute the notebook at ``path`` top to bottom and store its outputs in place. ``root``:
    the checkout its stored paths are relative to (default: the folder above the notebook's,
    as for ``notebooks/NN.ipynb``; an edition in ``notebooks/<lang>/`` passes the checkout)."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    # "immediate": a graceful kernel shutdown waits seconds for torch and matplotlib to unload
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    normalise(nb, root=root or path.parent.parent)   # notebooks/NN.ipynb -> the checkout
    nbformat.write(nb, path)
