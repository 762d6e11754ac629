"""Strict nbval, two Run Alls in one kernel: the learner's edition first, then the lesson.

``python3 course.py test`` runs every lesson under nbval (the root ``conftest.py`` wires this
module in). Before the lesson's own cells, the same kernel runs the learner's edition of it, as
``course.py lab`` writes it (every exercise blank). So one kernel shows, cell by cell:

* **Run All with the exercises blank reaches the end.** Only a cell tagged ``raises-exception``
  may raise; every check cell says its exercise "is not written yet"; every cell that is not an
  exercise prints its stored output (nbval compares it strictly), since no cell may depend on a
  learner's answer. These items read ``notebooks/NN_x.ipynb::blank Cell 5``.
* **Run All again, solved, prints the stored outputs.** nbval's own items (``::Cell 5``), in the
  kernel the first Run All left behind: "run it again while debugging" must give the same
  result, so no hook accumulates and no state leaks from one run into the next.
* **An edition in another language** (``notebooks/zh_CN/``) runs once, solved, after the two, in
  the same kernel: its code is its source's (see :func:`is_edition`), so it is a third Run All
  that must print the edition's stored outputs. Its items read
  ``notebooks/NN_x.ipynb::zh_CN Cell 5`` (the edition run alone, ``pytest notebooks/zh_CN/NN_x.ipynb``,
  starts a kernel of its own).
* **No cell leaves a hook behind.** After every cell of both runs a probe lists the hooks left on
  every model, layer, tensor and optimizer the notebook's namespace holds, and the global hooks:
  there must be none. Hooks that PyTorch or a library such as transformers installed for a model
  are the model's own and do not count, nor do the hooks of a live widget. A cell whose point is
  a hook left attached is tagged ``hooks-left``.

The kernel computes as an AVX2 laptop would (``cpu_profiles.NBVAL_PROFILE``, where this CPU can):
with the stored outputs (this machine's own CPU, where ``regen`` wrote them) and the browser's
learner's hour (``default``), every stored output is checked as three CPUs compute it.

Taught nowhere: this is how the course keeps lesson 00's promise that every cell can be run
again. ``docs/authoring.md`` says how to write cells that pass.
"""

from __future__ import annotations

import ast
import copy
from collections import defaultdict
from contextlib import contextmanager

HOOKS_LEFT_TAG = "hooks-left"
NOT_WRITTEN = "is not written yet"

PROBE = """\
def _hooktutor_probe():
    import torch
    from hooktutor.inventory import global_hook_ids, hook_ids, list_hooks

    def hooks_on_tensor(t):   # a leaf's hooks fire again; an intermediate's graph is spent
        return len(hook_ids(t, "tensor")) + len(hook_ids(t, "post_accumulate")) if t.is_leaf else 0
    import sys
    widgets = sys.modules.get("hooktutor.widgets._base")
    live_ids = {getattr(h, "id", None) for w in (widgets._LIVE.values() if widgets else ())
                for _k, _w, h, _f in w.hooks._hooks.values()}
    seen, left = set(), []
    for name, value in list(globals().items()):
        if name.startswith("_"):
            continue
        items = (list(value.values()) if isinstance(value, dict)
                 else value if isinstance(value, (list, tuple)) else [value])
        for item in items:
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, (torch.nn.Module, torch.optim.Optimizer)):
                left += [f"{name}: a {r.kind} hook on {r.path} ({r.function})"
                         for r in list_hooks(item, include_global=False)
                         if r.owner == "user" and r.handle_id not in live_ids]   # a live widget's are shown
            elif isinstance(item, torch.Tensor) and hooks_on_tensor(item):
                left.append(f"{name}: {hooks_on_tensor(item)} tensor hook(s)")
    if global_hook_ids():
        left.append(f"{len(global_hook_ids())} global hook(s)")
    return left
"""


def _is_lesson_file(node) -> bool:
    """nbval's own collector of a notebook (not one collected again under a CPU profile)."""
    from nbval.plugin import IPyNbFile

    return type(node) is IPyNbFile


def _options(cell, compare: bool) -> defaultdict:
    """nbval's options for ``cell``, as its collector derives them."""
    from nbval.plugin import find_comment_markers, find_metadata_tags

    options = defaultdict(bool, find_metadata_tags(cell.metadata))
    options.update(dict(find_comment_markers(cell.source)))
    options.setdefault("check", compare)
    return options


def is_edition(nb) -> bool:
    """Whether ``nb`` is an edition in another language (``notebooks/zh_CN/``, written by
    ``hooktutor.course.translate``). Its code cells are its source's, character for character
    but their comments (tests/test_translations.py), so the run of its learner's edition would
    repeat the source's: nbval runs the edition once, solved, against its own stored outputs."""
    return "edition" in nb.metadata.get("hooktutor", {})


def blank_cells(lesson, name: str) -> list:
    """The code cells of the learner's edition of ``lesson`` (the notebook nbval read; ``name``:
    its file's stem), each carrying the stored outputs of the lesson's cell where it is not an
    exercise. Exercise cells carry none (nbval then only runs them)."""
    from hooktutor.course import student

    stored_cells = [c for c in lesson.cells if c.cell_type == "code"]
    edition, _ = student.convert(copy.deepcopy(lesson), name, keep_solutions=False)
    blank = [c for c in edition.cells if c.cell_type == "code"]
    if len(blank) != len(stored_cells):
        raise ValueError(f"{name}: the learner's edition has {len(blank)} code cells, the lesson "
                         f"{len(stored_cells)}; student.convert must keep every code cell")
    cells = []
    for cell, stored in zip(blank, stored_cells, strict=True):   # the edition is a copy already
        if not cell.metadata.get("nbgrader"):
            cell.outputs = copy.deepcopy(stored.outputs)
            cell.execution_count = stored.execution_count
        else:
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    return cells


def insert_blank_runs(items: list) -> None:
    """Before each lesson's first nbval item, an item per code cell of its learner's edition,
    run in the same kernel (``pytest_collection_modifyitems``)."""
    import pytest
    from nbval.plugin import IPyNbCell

    from hooktutor.course import student

    class BlankCell(IPyNbCell):
        """A cell of the learner's edition, run before the lesson's own cells."""

        def reportinfo(self):
            return self.fspath, 0, f"{self.fspath.relto(self.config.rootdir)}::blank Cell {self.cell_num}"

    class NoEdition(pytest.Item):
        """Stands for the learner's edition of a lesson that ``student.convert`` refused."""

        def __init__(self, *, why: str, **kwargs):
            super().__init__(**kwargs)
            self.why = why

        def runtest(self):
            raise AssertionError(f"the learner's edition of this lesson cannot be written: {self.why}")

        def repr_failure(self, excinfo):
            return str(excinfo.value)

        def reportinfo(self):
            return self.path, 0, self.name

    firsts: dict = {}
    for index, item in enumerate(items):
        if isinstance(item, IPyNbCell) and _is_lesson_file(item.parent) and not is_edition(item.parent.nb):
            firsts.setdefault(item.parent, index)
    for parent, index in sorted(firsts.items(), key=lambda kv: -kv[1]):
        compare = parent.compare_outputs
        try:
            cells = blank_cells(parent.nb, parent.path.stem)
        except (ValueError, student.MarkingError) as exc:   # an author's mistake: one failing item says it
            items.insert(index, NoEdition.from_parent(parent, name="blank edition", why=str(exc)))
            continue
        new = [BlankCell.from_parent(parent, name=f"blank Cell {n}", cell_num=n, cell=cell,
                                     options=_options(cell, compare))
               for n, cell in enumerate(cells)]
        for cell_item in new:
            cell_item.blank = True
        items[index:index] = new


def insert_edition_runs(items: list) -> None:
    """Each edition's items (``notebooks/zh_CN/NN_x.ipynb``) moved after its source's last item,
    run in the source's kernel (``pytest_collection_modifyitems``), where the source is collected
    too. A third Run All in one kernel costs what the lesson's own cells cost; a kernel of its own
    would start torch and the course's modules again, and warm them, for each lesson."""
    from nbval.plugin import IPyNbCell

    class EditionCell(IPyNbCell):
        """A cell of an edition in another language, run after its source's cells."""

        def reportinfo(self):
            return self.fspath, 0, f"{self.edition_path}::Cell {self.cell_num} (in its source's kernel)"

    sources = {item.parent.path: item.parent for item in items
               if isinstance(item, IPyNbCell) and _is_lesson_file(item.parent) and not is_edition(item.parent.nb)}
    moved: dict = defaultdict(list)
    for item in items:
        if not (isinstance(item, IPyNbCell) and _is_lesson_file(item.parent) and is_edition(item.parent.nb)):
            continue
        edition = item.parent.nb.metadata["hooktutor"]["edition"]
        source = sources.get(item.config.rootpath / edition["source"])
        if source is None:
            continue
        new = EditionCell.from_parent(source, name=f"{edition['language']} Cell {item.cell_num}",
                                      cell_num=item.cell_num, cell=item.cell, options=item.options)
        new.edition = edition["language"]
        new.edition_path = item.nodeid.split("::")[0]
        moved[source].append((item, new))
    if not moved:
        return
    gone = {id(old) for pairs in moved.values() for old, _ in pairs}
    items[:] = [item for item in items if id(item) not in gone]
    for source, pairs in moved.items():
        last = max(i for i, item in enumerate(items) if getattr(item, "parent", None) is source)
        items[last + 1:last + 1] = [new for _, new in pairs]


@contextmanager
def kernel_profile(item):
    """Around an nbval item's set-up: a lesson's kernel starts under ``NBVAL_PROFILE``."""
    from nbval.plugin import IPyNbCell

    from hooktutor.course.cpu_profiles import nbval_profile, profile_environment

    name = nbval_profile()
    if name and isinstance(item, IPyNbCell) and _is_lesson_file(item.parent) and item.parent.kernel is None:
        with profile_environment(name):
            yield
    else:
        yield


def after_cell(item) -> None:
    """After an nbval item ran without failing: a blank check cell said "not written yet", and
    the probe finds no hook left (``pytest_runtest_call``)."""
    from nbval.plugin import IPyNbCell, NbCellError

    if not isinstance(item, IPyNbCell) or not _is_lesson_file(item.parent) or item.options["skip"]:
        return
    cell = item.cell
    where = ("the learner's edition (exercises blank)" if getattr(item, "blank", False)
             else f"the {item.edition} edition" if getattr(item, "edition", None) else "the lesson")
    if getattr(item, "blank", False) and cell.metadata.get("nbgrader", {}).get("grade"):
        shown = "".join(o.get("data", {}).get("text/plain", "") + o.get("text", "")
                        for o in item.test_outputs or [])
        if NOT_WRITTEN not in shown:
            raise NbCellError(item.cell_num, f"in {where}, this check cell should say its exercise "
                              f"{NOT_WRITTEN!r}; it showed {shown[:300]!r}", cell.source)
    if HOOKS_LEFT_TAG in cell.metadata.get("tags", []):
        return
    # a hook is reported once per Run All, by the cell that left it, not again by every later cell
    reported = vars(item.parent.kernel).setdefault("_hooktutor_reported", {}).setdefault(where, set())
    left = [hook for hook in hooks_left(item.parent.kernel) if hook not in reported]
    reported.update(left)
    if left:
        raise NbCellError(item.cell_num, f"in {where}, this cell leaves hooks attached: {left[:5]}; remove "
                          f"them in the cell (with / finally), or tag the cell {HOOKS_LEFT_TAG!r} if a "
                          "hook left attached is its point", cell.source)


def hooks_left(kernel, timeout: float = 60) -> list[str]:
    """What the probe finds in ``kernel`` (nbval's RunningKernel) right now. The probe runs as a
    silent request (no output, no execution count), its answer read from the reply's
    ``user_expressions``."""
    if not getattr(kernel, "_hooktutor_probe", False):
        _silent(kernel, PROBE, {}, timeout)
        kernel._hooktutor_probe = True
    answer = _silent(kernel, "", {"left": "_hooktutor_probe()"}, timeout)["left"]
    if answer.get("status") != "ok":
        return [f"the probe failed: {answer.get('ename')}: {answer.get('evalue')}"]
    return ast.literal_eval(answer["data"]["text/plain"])


def _silent(kernel, code: str, expressions: dict, timeout: float) -> dict:
    msg_id = kernel.kc.execute(code, silent=True, store_history=False, user_expressions=expressions,
                               allow_stdin=False, stop_on_error=False)
    while True:
        reply = kernel.kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    kernel.await_idle(msg_id, timeout)
    content = reply["content"]
    if content.get("status") != "ok":
        raise RuntimeError(f"the hooks probe could not run: {content.get('ename')}: {content.get('evalue')}")
    return content.get("user_expressions", {})
