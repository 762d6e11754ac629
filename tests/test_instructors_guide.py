"""docs/instructors.md stays true to the repository: lessons, exercises, paths and commands."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from hooktutor.course import student
from hooktutor.exercises import LESSON_MODULES, load_all, load_predictions

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "instructors.md"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# Names at the top of the repository that a path in the guide can start with. Generated folders
# (student/, a course folder) are not in it: they need not exist in a checkout.
REPO_TOP = {"README.md", "Makefile", "course.py", "environment.yml", "pyproject.toml", "binder", "benchmarks",
            "docs", "hooktutor", "notebooks", "requirements", "tests"}


def guide() -> str:
    return GUIDE.read_text(encoding="utf-8")


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M)


def inline_code(text: str) -> list[str]:
    prose = re.sub(r"^```[a-z]*\n.*?^```", "", text, flags=re.S | re.M)
    return re.findall(r"`([^`\n]+)`", prose)


def section(text: str, heading: str) -> str:
    """The text under the level-2 heading that starts with ``heading``, up to the next one."""
    match = re.search(rf"^## {re.escape(heading)}.*?$(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    assert match, f"the guide has no '## {heading}' section"
    return match.group(1)


def level_and_time(path: Path) -> tuple[str, str]:
    """The level and time a notebook's first cell states, as the guide's table writes them."""
    first = nbformat.read(path, as_version=4).cells[0].source
    line = next((ln for ln in first.splitlines() if ln.startswith("Level:")), None)
    assert line, f"{path.name}: no 'Level:' line in the first cell"
    level = line.removeprefix("Level:").split()[0]
    minutes = re.search(r"(\d+) minutes", line)
    time = f"{minutes.group(1)} min" if minutes else ("open-ended" if "open-ended" in line else "?")
    return level, time


def lesson_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in section(text, "The lessons at a glance").splitlines():
        match = re.match(r"\|\s*`(\d\d_\w+)`\s*\|", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in line.strip().strip("|").split("|")]
    return rows


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_lesson_is_in_the_table_with_its_own_level_time_and_exercise_count(path):
    rows = lesson_rows(guide())
    assert path.stem in rows, f"{path.stem} is not in the guide's lesson table"
    _, level, time, _, exercises = rows[path.stem]
    want_level, want_time = level_and_time(path)
    assert (level, time) == (want_level, want_time), (
        f"the guide says {path.stem} is {level} / {time}; its first cell says {want_level} / {want_time}")
    checks = sum(student.CHECK_TAG in c.get("metadata", {}).get("tags", [])
                 for c in nbformat.read(path, as_version=4).cells)
    assert exercises == (str(checks) if checks else "none"), (
        f"the guide counts {exercises} exercises in {path.stem}; the notebook has {checks} check cells")


def test_every_exercise_is_listed_under_its_own_lesson():
    mistakes = section(guide(), "Common learner mistakes")
    parts = re.split(r"^### ", mistakes, flags=re.M)[1:]
    by_lesson = {}
    for part in parts:
        match = re.search(r"\(`(\d\d_\w+)`\)", part.splitlines()[0])
        assert match, f"a lesson heading in the mistakes section names no notebook: {part.splitlines()[0]!r}"
        by_lesson[match.group(1)] = part
    module_to_lesson = {module: lesson for lesson, module in LESSON_MODULES.items()}
    exercises = {**load_all(), **load_predictions()}
    assert exercises
    for key, exercise in exercises.items():
        lesson = module_to_lesson[key.split(".")[0]]
        assert lesson in by_lesson, f"the mistakes section has no heading for {lesson}"
        assert f"**{exercise.title}**" in by_lesson[lesson], (
            f"exercise {exercise.title!r} ({key}) is not listed in bold under {lesson} in the mistakes section")


def _path_candidates(text: str) -> set[str]:
    found = {token for span in inline_code(text) for token in span.split()}
    for block in code_blocks(text):
        found.update(token.strip("\"'(),;:") for token in block.split())
    return found


def test_every_repository_path_the_guide_names_exists():
    missing = []
    for candidate in _path_candidates(guide()):
        first = candidate.split("/")[0]
        if first not in REPO_TOP or "<" in candidate:
            continue
        matches = list(ROOT.glob(candidate)) if "*" in candidate else [ROOT / candidate]
        if not matches or not all(m.exists() for m in matches):
            missing.append(candidate)
    assert not missing, f"the guide names paths that are not in the repository: {sorted(missing)}"


def _commands_in(function_name: str, source: Path) -> set[str]:
    """The string constants that ``function_name`` compares ``command`` with."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function_name)
    names = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "command":
            for comparator in node.comparators:
                for const in ast.walk(comparator):
                    if isinstance(const, ast.Constant) and isinstance(const.value, str):
                        names.add(const.value)
    assert names, f"found no commands in {source.name}:{function_name}"
    return names


def test_every_course_py_and_hooktutor_command_is_real():
    text = guide()
    course = _commands_in("main", ROOT / "course.py")
    used = set(re.findall(r"(?:python3?|py)\s+course\.py\s+([a-z][\w-]*)", text))
    assert used, "the guide uses no course.py command"
    assert used <= course, f"not course.py commands: {sorted(used - course)} (course.py knows {sorted(course)})"
    module = _commands_in("main", ROOT / "hooktutor" / "__main__.py")
    used = set(re.findall(r"-m hooktutor\s+([a-z][\w-]*)", text))
    assert used <= module, f"not `python -m hooktutor` commands: {sorted(used - module)}"


def test_every_make_target_is_in_the_makefile():
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), flags=re.M)
    targets = set(phony.group(1).split())
    code = "\n".join(inline_code(guide()) + code_blocks(guide()))
    used = set(re.findall(r"(?:^|\s)make\s+([a-z]\w*)", code, flags=re.M))
    assert used <= targets, f"not Makefile targets: {sorted(used - targets)}"


def test_the_student_edition_is_described_as_generated():
    text = section(guide(), "The student edition")
    assert student.STUB in text, "the guide must quote the stub the student edition writes"
    assert ".grade(" in text and ".check(" in text
    marking = section(guide(), "How solutions are marked")
    for marker in (student.BEGIN, student.END, f"`{student.SOLUTION_TAG}`", f"`{student.CHECK_TAG}`"):
        assert marker in marking, f"the marking summary does not mention {marker}"


def test_every_nbgrader_command_is_a_real_subcommand():
    nbgrader_app = pytest.importorskip("nbgrader.apps.nbgraderapp")
    known = set(nbgrader_app.NbGraderApp.subcommands)
    code = "\n".join(inline_code(guide()) + code_blocks(guide()))
    # a command, not a word in a sentence or a package name in a pip line: nbgrader first on the
    # line, or after `do`, `then`, `or:` or a shell separator
    used = set(re.findall(r"(?:^|\bdo|\bthen|\bor:|[;&|(])[ \t]*nbgrader[ \t]+([a-z_]+)", code, flags=re.M))
    assert {"generate_assignment", "autograde", "generate_feedback", "export"} <= used
    assert used <= known, f"not nbgrader subcommands: {sorted(used - known)}"


def test_the_table_of_contents_links_to_real_headings():
    text = guide()
    slugs = set()
    for heading in re.findall(r"^#{2,3} (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        slugs.add(slug)
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert links
    assert set(links) <= slugs, f"links to missing headings: {sorted(set(links) - slugs)}"
