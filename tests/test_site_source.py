"""The website's copies of the lessons (hooktutor/course/site_source.py): what they fold, hide
and drop, and that every stored output is kept byte for byte (nothing re-executed).
The site itself, in a browser: tests/browser/test_site.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hooktutor.course.site_source import (
    BEGIN_SOLUTION,
    END_SOLUTION,
    WIDGET_VIEW,
    figure_cells,
    lesson_table,
    prepare_lesson,
    write_source,
)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def test_the_readme_table_lists_every_lesson():
    stems = [lesson.stem for lesson in lesson_table((ROOT / "README.md").read_text(encoding="utf-8"))]
    assert stems == [p.stem for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_lesson_s_site_copy(path):
    stored = json.loads(path.read_text(encoding="utf-8"))
    site = prepare_lesson(stored, {i: f"pictures of cell {i}" for i, c in enumerate(stored["cells"])
                                   if any(WIDGET_VIEW in o.get("data", {}) for o in c.get("outputs", []))},
                          stem=path.stem, home="https://github.com/hooktutor/hooktutor")
    assert "widgets" not in site["metadata"], "no widget state: a static page has no kernel"
    originals = [c for c in site["cells"] if "id" in c and not c["id"].startswith("site-")]
    assert len(originals) == len(stored["cells"]), "every cell of the lesson is on its page"
    for before, after in zip(stored["cells"], originals):
        source = "".join(before["source"]) if isinstance(before["source"], list) else before["source"]
        if "solution" in tags(before):   # the markers go, as ex.<name>.solution() drops them
            assert BEGIN_SOLUTION in source and BEGIN_SOLUTION not in after["source"]
            assert END_SOLUTION not in after["source"]
            assert after["source"] == "\n".join(line for line in source.splitlines()
                                                if line.strip() not in (BEGIN_SOLUTION, END_SOLUTION))
        else:
            assert after["source"] == before["source"]
        if before["cell_type"] != "code":
            continue
        if any("image/png" in o.get("data", {}) for o in before["outputs"]):
            alt = before["metadata"].get("hooktutor", {}).get("alt", "")
            assert len(alt.split()) >= 8, f"a figure needs metadata.hooktutor.alt that says what it shows: {alt!r}"
            assert after["metadata"]["mystnb"]["image"]["alt"] == alt
        kept = [o for o in before["outputs"] if WIDGET_VIEW not in o.get("data", {})]
        # byte for byte: what strict nbval compared is what the page shows
        assert json.dumps(after["outputs"], sort_keys=True) == json.dumps(kept, sort_keys=True)
        if "colab-setup" in tags(before):
            assert "remove-cell" in tags(after)
        elif "solution" in tags(before):
            assert "hide-input" in tags(after)
            assert after["metadata"]["mystnb"]["code_prompt_show"] == "Show the solution"
        else:
            assert not {"hide-input", "remove-cell", "hide-output", "remove-output"} & set(tags(after)), \
                "only the set-up cell is hidden and only solutions are folded: verdicts and checks stay visible"
    for index, cell in enumerate(site["cells"]):
        if "hooktutor-hints" in tags(cell):
            assert "<details" in cell["source"] and "Hint 1" in cell["source"]
            assert "solution" in tags(site["cells"][index + 1]), "the hints come right before the answer cell"
    launch = [c for c in site["cells"] if "hooktutor-launch" in tags(c)]
    assert len(launch) == 1 and site["cells"].index(launch[0]) == 1, "the launch buttons follow the title"
    for label in ("Open in Colab", "Open in Binder", "Download the notebook", "View the source"):
        assert label in launch[0]["source"]
    assert f"_static/notebooks/{path.name}" in launch[0]["source"]
    solutions = sum("solution" in tags(c) for c in stored["cells"])
    hints = sum("hooktutor-hints" in tags(c) for c in site["cells"])
    assert hints == sum("check" in tags(c) for c in stored["cells"]) and (solutions == 0) == (hints == 0)


def test_every_figure_of_the_course_is_found_and_the_downloads_are_the_learners_edition(tmp_path):
    figures = sum(len(figure_cells(json.loads(p.read_text(encoding="utf-8")))) for p in NOTEBOOKS)
    assert figures >= 10   # so the alt-text check above has something to check
    write_source(ROOT, tmp_path)
    for path in NOTEBOOKS:
        download = json.loads((tmp_path / "_static" / "notebooks" / path.name).read_text(encoding="utf-8"))
        answers = [c for c in download["cells"] if "solution" in tags(c)]
        assert all("raise NotImplementedError" in "".join(c["source"]) for c in answers), path.name
        assert all(not c.get("outputs") for c in download["cells"] if c["cell_type"] == "code")
