"""The wheel carries the lessons: notebooks/*.ipynb become the package data hooktutor/lessons/.

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
        target = Path(self.build_lib) / "hooktutor" / "lessons"
        target.mkdir(parents=True, exist_ok=True)
        for lesson in sorted((ROOT / "notebooks").glob("*.ipynb")):
            self.copy_file(str(lesson), str(target / lesson.name))

    def get_outputs(self, include_bytecode=True):
        lessons = [str(Path(self.build_lib) / "hooktutor" / "lessons" / p.name)
                   for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]
        return [*super().get_outputs(include_bytecode), *lessons]


setup(cmdclass={"build_py": BuildWithLessons})
