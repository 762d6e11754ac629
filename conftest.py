"""Root pytest configuration, loaded for the library tests and the notebooks alike.

The notebook kernels that nbval and the tests start inherit this process's environment. A
MPLBACKEND set in the shell (or by a library) would make them draw nowhere instead of
inline, and every stored figure would go missing, so it is removed here.

Every lesson runs twice under nbval, in one kernel: its learner's edition (every exercise blank),
then the lesson itself, with a probe for hooks left behind after every cell
(``hooktutor/course/nbval_twice.py``); the kernel computes as an AVX2 laptop would.

With ``--cpu-profiles=default`` (or ``avx2``, or both) every notebook is also collected once per
CPU profile (see ``hooktutor/course/cpu_profiles.py``): the same strict nbval comparison, in a
kernel started with that profile's environment, so the stored outputs are checked against the
numbers an older CPU computes. Their test ids read ``notebooks/NN_x.ipynb[cpu=default]::Cell 5``.
The test command adds none: nbval's own kernel and the browser's learner's hour run every
notebook anyway, under ``avx2`` and ``default``, and hold it to its stored outputs.
"""

from __future__ import annotations

import functools
import os
import sys

import pytest

os.environ.pop("MPLBACKEND", None)

# Python 3.13.0 only: torch.compile warns "Guards may run slower on Python 3.13.0" on stderr at a
# kernel's first compile (a CPython bug fixed in 3.13.1; it says nothing about hooks), which strict
# nbval reads as a changed output of lessons 02 and 11. The kernels, lab servers and processes the
# suite starts inherit this filter; a learner on 3.13.0 sees the warning (docs/python-versions.md
# says so, and to use 3.13.1 or newer).
if sys.version_info[:3] == (3, 13, 0):
    _GUARDS = "ignore:Guards may run slower on Python 3.13.0:RuntimeWarning"
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), _GUARDS]))


def pytest_addoption(parser):
    from hooktutor.course.cpu_profiles import DEFAULT_PROFILES

    parser.addoption(
        "--cpu-profiles", default=",".join(DEFAULT_PROFILES) or "none", metavar="NAMES",
        help="with --nbval, also run every notebook as these CPUs would (comma-separated: "
             "avx2, default; 'none' for only this machine's own). Default: %(default)s")


def pytest_collect_file(file_path, parent):
    option = parent.config.option
    if file_path.suffix != ".ipynb" or not getattr(option, "nbval", False):
        return None
    from hooktutor.course.cpu_profiles import parse

    try:
        names = parse(option.cpu_profiles)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if not names:
        return None
    return _classes()[0].from_parent(parent, path=file_path, name=f"{file_path.name}[cpu profiles]",
                                     nodeid=f"{_relative(parent, file_path)}[cpu profiles]",
                                     profiles=names)


def pytest_collection_modifyitems(config, items):
    """Where a lesson's stored outputs show another release of a library it teaches than the one
    installed (hooktutor.course.other_torches.outputs_not_comparable: lesson 12 on Python 3.10,
    whose last transformers is 5.20.2), its cells still run and must pass their assertions, but
    their outputs are not compared; a warning in the summary says which lesson and why."""
    if not any(item.path.suffix == ".ipynb" for item in items):
        return
    from hooktutor.course.nbval_twice import insert_blank_runs, insert_edition_runs

    insert_blank_runs(items)
    insert_edition_runs(items)
    cells = [item for item in items if item.path.suffix == ".ipynb" and hasattr(item, "options")]
    import warnings

    from hooktutor.course.other_torches import outputs_not_comparable

    why = {path: outputs_not_comparable(path) for path in {item.path for item in cells}}
    for path, reason in sorted(why.items()):
        if reason:
            warnings.warn(pytest.PytestWarning(f"{path.name}: outputs not compared here: {reason}"), stacklevel=1)
    for item in cells:
        if why[item.path]:
            item.options["check"] = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """A lesson's nbval kernel starts under the profile of ``nbval_twice``."""
    if item.path.suffix != ".ipynb":
        return (yield)
    from hooktutor.course.nbval_twice import kernel_profile

    with kernel_profile(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """After a lesson's cell: a blank check says "not written yet"; no hook is left behind."""
    result = yield
    if item.path.suffix == ".ipynb":
        from hooktutor.course.nbval_twice import after_cell

        after_cell(item)
    return result


def _relative(node, path):
    return path.relative_to(node.config.rootpath).as_posix()


@functools.cache
def _classes():
    """The collectors, built on first use so that nbval is imported only when notebooks are."""
    from nbval.plugin import IPyNbFile

    from hooktutor.course.cpu_profiles import profile_environment

    class ProfiledNotebook(IPyNbFile):
        """nbval's notebook collector, with its kernel started under one CPU profile."""

        cpu_profile = ""

        def setup(self):
            with profile_environment(self.cpu_profile):
                super().setup()

    class NotebookUnderProfiles(pytest.File):
        """One notebook, collected once more per CPU profile."""

        def __init__(self, *args, profiles=(), **kwargs):
            super().__init__(*args, **kwargs)
            self.profiles = list(profiles)

        def collect(self):
            relative = _relative(self, self.path)
            for name in self.profiles:
                node = ProfiledNotebook.from_parent(self, path=self.path, name=f"{self.path.name}[cpu={name}]",
                                                    nodeid=f"{relative}[cpu={name}]")
                node.cpu_profile = name
                yield node

    return NotebookUnderProfiles, ProfiledNotebook
