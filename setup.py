"""The wheel carries the lessons: notebooks/*.ipynb become the package data hooktutor/lessons/,
and each edition in another language, notebooks/<lang>/*.ipynb, hooktutor/lessons/<lang>/.

Everything else about the package is in pyproject.toml. In a checkout (an editable install,
`python3 course.py`) the lessons are read from notebooks/ directly
(hooktutor.course.workbook.course_lessons); only a built wheel needs the copy made here.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithLessons(build_py):
    """build_py, plus the lessons copied into the built package (never into the source tree)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for lesson, target in _lessons(Path(self.build_lib)):
            target.parent.mkdir(parents=True, exist_ok=True)
            self.copy_file(str(lesson), str(target))

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), *(str(t) for _, t in _lessons(Path(self.build_lib)))]


def _lessons(build_lib: Path) -> list[tuple[Path, Path]]:
    """(lesson in the checkout, its place in the built package): notebooks/*.ipynb and notebooks/<lang>/*.ipynb."""
    target = build_lib / "hooktutor" / "lessons"
    found = [(p, target / p.name) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    return found + [(p, target / p.parent.name / p.name) for p in sorted((ROOT / "notebooks").glob("*_*/*.ipynb"))]


setup(cmdclass={"build_py": BuildWithLessons})
