"""The README's promises: the two commands, launch links that point at real files, lesson times."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

try:
    import tomllib
except ImportError:  # Python 3.10: tomli (pytest's own dependency there), never pip's copy, whose
    # import makes a later `import setuptools` fail (nbgrader's: the distutils shim stands aside for pip)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def repo_slug() -> str:
    home = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Homepage"]
    return home.split("github.com/", 1)[1].strip("/")


def test_the_two_commands_come_first_and_ci_runs_the_test_command():
    first_block = re.search(r"```bash\n(.*?)```", README, flags=re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.strip()]
    assert commands == ["python3 course.py lab", "python3 course.py test"]
    assert README.index("```bash") < README.index("##"), "the commands come before any section"
    assert "python3 course.py test" in (ROOT / ".ci" / "run").read_text()


def test_binder_link_opens_lesson_00_of_this_repository():
    links = re.findall(r"https://mybinder\.org/v2/gh/([\w.-]+/[\w.-]+)/(\w+)\?urlpath=lab/tree/([\w./-]+)", README)
    assert links, "a Binder badge"
    for slug, branch, path in links:
        assert slug == repo_slug() and branch == "main"
        # binder/postBuild writes the learner's workbook (exercises blank) from notebooks/
        assert path.startswith("workbook/") and (ROOT / "notebooks" / path.removeprefix("workbook/")).is_file(), path
    assert any(p.endswith("00_start_here.ipynb") for _, _, p in links)
    assert "python -m hooktutor workbook workbook" in (ROOT / "binder" / "postBuild").read_text()


def test_colab_links_open_the_learners_edition_of_every_notebook():
    """Colab opens the branch the workflow writes the learner's edition to (hooktutor/course/links.py);
    tests/test_links.py holds every link and each lesson's set-up cell to [project.urls]."""
    from hooktutor.course import links

    found = re.findall(r"https://colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/blob/(\w+)/([\w./-]+\.ipynb)",
                       README)
    notebooks = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert sorted(path for _, _, path in found) == sorted(notebooks), "one Colab link per notebook"
    for slug, branch, path in found:
        assert slug == repo_slug() and branch == links.LEARNER_BRANCH
        nb = nbformat.read(ROOT / "notebooks" / path, as_version=4)
        setup = next(c for c in nb.cells if c.cell_type == "code")
        assert "google.colab" in setup.source and f"github.com/{repo_slug()}" in setup.source, path


def test_lesson_table_matches_each_notebooks_level_and_time():
    rows = re.findall(r"^\| `(\d\d_\w+)` \| ([☆★]{3}|any) \| (\d+ min|open-ended) \|", README, flags=re.M)
    assert len(rows) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    for stem, level, time in rows:
        first = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4).cells[0].source
        assert f"Level: {level}" in first, stem
        minutes = time.split()[0]
        assert (f"about {minutes} minutes" in first) if time != "open-ended" else ("open-ended" in first), stem
