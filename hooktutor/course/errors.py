"""Errors shown short in the lessons: the error's type and message and the lesson's line that
raised it, not thirty lines of torch's internals.

Each lesson's first code cell calls :func:`show_errors_short`. An error raised in a cell then
shows only the frames of notebook cells (the line you ran, and a hook of yours it called), with a
note of how many frames inside torch and other libraries were left out; its type and message are
unchanged, so the cells that show an error on purpose (tagged ``raises-exception``) still state it
exactly. ``show_errors_short(False)`` brings the full traceback back.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

_STATE = {"on": False}


def _is_cell(filename: str) -> bool:
    """A notebook cell's code: ipykernel names it ``.../ipykernel_<pid>/<hash>.py``, plain
    IPython ``<ipython-input-...>``."""
    return filename.startswith("<ipython-input-") or Path(filename).parent.name.startswith("ipykernel_")


def learner_frames(tb: TracebackType | None) -> tuple[TracebackType | None, int]:
    """The traceback reduced to the frames of notebook cells, and how many frames were left out.
    With no cell frame at all the whole traceback is kept."""
    kept: list[TracebackType] = []
    total = 0
    while tb is not None:
        total += 1
        if _is_cell(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    if not kept:
        return None, 0
    for first, second in zip(kept, kept[1:]):
        first.tb_next = second
    kept[-1].tb_next = None
    return kept[0], total - len(kept)


def _short_handler(shell: Any, etype: type, value: BaseException, tb: TracebackType | None,
                   tb_offset: int | None = None) -> list[str]:
    short, hidden = learner_frames(tb)
    # tb_offset counts IPython's own frames at the top of ``tb``; the short traceback has none
    # left (IPython 8, Python 3.10's, passes 1 here and would skip the cell's own frame)
    stb = shell.InteractiveTB.structured_traceback(etype, value, short or tb,
                                                   tb_offset=0 if short is not None else tb_offset)
    if hidden:
        note = (f"({hidden} frame{'s' if hidden != 1 else ''} of library code (torch, IPython, ...) left out; "
                "hooktutor.course.errors.show_errors_short(False) shows them)")
        stb = [*stb[:-1], note, stb[-1]] if stb else [note]
    # IPython calls a custom handler instead of showing the error: show it, as the kernel
    # shows any error (an error message with the type, the message and these lines)
    shell._showtraceback(etype, value, stb)
    return stb


def show_errors_short(on: bool = True) -> None:
    """Show errors short in this notebook (``on=False``: in full again); does nothing outside
    IPython. Every lesson's first cell turns it on (``00_start_here.ipynb`` says so)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    if on:
        shell.set_custom_exc((Exception,), _short_handler)
    else:
        shell.set_custom_exc((), None)
    _STATE["on"] = bool(on)


