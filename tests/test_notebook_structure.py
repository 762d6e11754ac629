"""Every lesson follows the template, and is stored the way strict nbval needs it."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# the taught lessons: all but the start (00) and the open-ended hook lab (06)
LESSONS = [p for p in NOTEBOOKS if p.name[:2] not in {"00", "06"}]
COLAB_MARKER = "google.colab"


def load(path: Path):
    return nbformat.read(path, as_version=4)


def headings(nb) -> list[str]:
    return [line.lstrip("#").strip().lower() for c in nb.cells if c.cell_type == "markdown"
            for line in c.source.splitlines() if line.startswith("#")]


def tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def test_the_course_is_all_there():
    names = [p.stem for p in NOTEBOOKS]
    for stem in ("00_start_here", "01_tensor_hooks", "02_forward_hooks", "03_changing_outputs",
                 "04_backward_hooks", "05_inplace_relu_pitfall", "06_hook_lab", "07_capstone"):
        assert stem in names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_stored_for_strict_nbval(path):
    nb = load(path)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code if c.source.strip()]
    assert None not in counts, "every code cell is executed and stored (python3 course.py regen)"
    assert counts == sorted(counts), "executed top to bottom"
    for c in code:
        src = c.source.rstrip()
        last = src.splitlines()[-1] if src else ""
        assert not (src.endswith(";") and not last.lstrip().startswith("#")), f"cell ends in ';': {src[-80:]}"
        assert "with_out" not in src
        errors = [o for o in c.outputs if o.output_type == "error"]
        if "raises-exception" in tags(c):
            assert errors, f"a cell tagged raises-exception must store its error:\n{src[:200]}"
        else:
            assert not errors, f"an untagged cell stored an error:\n{src[:200]}"
        assert not re.search(r"pretrained\s*=\s*True|load_state_dict_from_url|urlopen|requests\.get", src)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_first_cell_is_a_title_with_level_and_time(path):
    first = load(path).cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert re.search(r"Level: [☆★]{3}", first.source) or "Level: any" in first.source
    assert re.search(r"\d+ minutes|open-ended", first.source)


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_template_sections(path):
    found = headings(load(path))
    required = ["what you will be able to do", "the idea", "exercises", "recap"]
    if not path.stem.startswith("07"):
        required += ["try it live", "claims you will meet elsewhere"]
    for section in required:
        assert any(h.startswith(section) or section in h for h in found), f"{path.name}: no '{section}' section"


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_exercises_have_answer_and_check_cells(path):
    nb = load(path)
    solutions = [c for c in nb.cells if "solution" in tags(c)]
    checks = [c for c in nb.cells if "check" in tags(c)]
    assert len(solutions) >= 3 and len(checks) >= 3
    for c in solutions:
        assert "### BEGIN SOLUTION" in c.source and "### END SOLUTION" in c.source
    for c in checks:
        assert ".check(" in c.source
        shown = "".join(o.get("data", {}).get("text/plain", "") for o in c.outputs)
        assert shown.startswith("✔"), f"{path.name}: a stored check does not pass: {shown[:200]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_ignored_outputs_are_rare(path):
    """nbval-ignore-output is for timings, the learner's machine and numbers that training produced."""
    nb = load(path)
    ignored = [c for c in nb.cells if "nbval-ignore-output" in tags(c)]
    assert len(ignored) <= 4, f"{path.name} ignores {len(ignored)} outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_intended_errors_declare_their_type_and_stable_message(path):
    """An error a cell shows on purpose is checked by its type and the stable part of its meaning, so that
    `python3 course.py compat` can tell it from a real failure on a torch that words it differently."""
    from hooktutor.course.other_torches import error_problem, expected_error

    for c in load(path).cells:
        if c.cell_type != "code":
            continue
        spec = expected_error(c)
        if "raises-exception" not in tags(c):
            assert spec is None, f"{path.name}: expect_error without the raises-exception tag:\n{c.source[:200]}"
            continue
        errors = [o for o in c.outputs if o.output_type == "error"]
        problem = error_problem(spec, errors[0].ename if errors else None, errors[0].evalue if errors else None)
        assert problem is None, f"{path.name}: {problem}\n{c.source[:200]}"
        assert set(spec) == {"type", "match"} and re.compile(spec["match"]), spec


def test_version_dependent_claims_are_marked_and_checked_in_their_lessons():
    """Each behaviour in hooktutor/course/claims.py: its lessons say since which release of its library
    (torch, or transformers), and key a check on it."""
    from hooktutor.course import claims

    texts = {p.stem: load(p) for p in NOTEBOOKS}
    used = {m for nb in texts.values() for c in nb.cells if c.cell_type == "code"
            for m in re.findall(r"versions\.expected\(\"([\w-]+)\"\)", c.source)}
    assert used <= set(claims.CLAIMS), f"unregistered claims: {used - set(claims.CLAIMS)}"
    for claim in claims.CLAIMS.values():
        major_minor = ".".join(claim.since.split(".")[:2])
        for lesson in claim.lessons:
            assert lesson in texts, f"{claim.id}: no notebook {lesson}"
        if claim.kind != "behaviour":
            continue
        for lesson in claim.lessons:
            cells = texts[lesson].cells
            assert any(f'claims.expected("{claim.id}")' in c.source for c in cells if c.cell_type == "code"), \
                f"{lesson}: no cell checks {claim.id} through claims.expected"
            said = rf"(since|before) ({claim.library} )?{re.escape(major_minor)}\b"
            assert any(re.search(said, c.source) for c in cells), \
                f"{lesson}: does not say 'since {claim.library} {major_minor}' for {claim.id}"


VERDICT_BY_DECREE = re.compile(r"""else\s+["']\?["']|assert\s+\w*verdict\w*\s*==\s*["']""")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_verdicts_are_checked_on_behaviour_not_decreed(path):
    """A claim's verdict is proved by asserting what torch does: not a string the cell wrote itself
    and then asserted, nor one that falls back to '?' when the observation disagrees."""
    nb = load(path)
    bad = [(i, line.strip()) for i, c in enumerate(nb.cells) if c.cell_type == "code"
           for line in c.source.splitlines() if VERDICT_BY_DECREE.search(line)]
    assert not bad, f"{path.name}: verdicts asserted as strings instead of on the behaviour: {bad}"


CLAIM_OR_VERDICT = re.compile(r'^### "|\*\*Verdict', re.M)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_verdict_answers_a_claim_stated_before_it(path):
    """In "Claims you will meet elsewhere", each claim is stated (a `### "..."` heading) before its
    cell and its verdict: a verdict with no claim since the one before tells the learner nothing
    (lessons 11 and 12 lost two headings when their release history was folded)."""
    pending, orphans = False, []
    for index, cell in enumerate(load(path).cells):
        if cell.cell_type != "markdown":
            continue
        for match in CLAIM_OR_VERDICT.finditer(cell.source):
            if match.group(0).startswith("###"):
                pending = True
            else:
                orphans += [] if pending else [index]
                pending = False
    assert not orphans, f"{path.name}: a verdict with no claim stated before it in cells {orphans}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_lessons_end_with_further_reading_from_the_pytorch_docs(path):
    last = load(path).cells[-1]
    assert last.cell_type == "markdown" and last.source.startswith("## Further reading"), (
        f"{path.name} should end with a '## Further reading' cell")
    assert "https://docs.pytorch.org/docs/stable/" in last.source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_colab_setup_cell_is_collapsed_for_a_local_learner(path):
    """It only does something on Colab: locally it stays out of the way, folded away."""
    (cell,) = [c for c in load(path).cells if "colab-setup" in tags(c)]
    assert COLAB_MARKER in cell.source and cell.metadata.get("jupyter", {}).get("source_hidden") is True


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_lesson_has_a_predict_then_run_exercise(path):
    from hooktutor.exercises import LESSON_MODULES, load_predictions

    predictions = load_predictions()
    module = LESSON_MODULES.get(path.stem)
    assert module, f"{path.stem} has no exercise module in hooktutor.exercises.LESSON_MODULES"
    checked = {m.group(1) for c in load(path).cells if "check" in tags(c)
               for m in [re.search(r"ex\.(\w+)\.check\(", c.source)] if m}
    mine = {key.split(".", 1)[1] for key in predictions if key.startswith(module + ".")}
    assert checked & mine, f"{path.stem}: no check cell runs one of its predictions ({sorted(mine)})"


LAPTOP_SCREEN_LINES = 30   # code lines JupyterLab shows at once on a 1366x768 laptop, under the toolbars


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_teaching_cell_fits_on_a_laptop_screen(path):
    long = [(i, len(c.source.splitlines())) for i, c in enumerate(load(path).cells)
            if c.cell_type == "code" and not c.get("metadata", {}).get("jupyter", {}).get("source_hidden")
            and len(c.source.splitlines()) > LAPTOP_SCREEN_LINES]
    assert not long, (f"{path.stem}: code cells longer than {LAPTOP_SCREEN_LINES} lines (cell, lines): {long}; "
                      "split them, or move checks that teach nothing to tests/ or a collapsed cell")


LAPTOP_SCREEN_COLUMNS = 100   # characters a laptop shows in a code cell at 1366x768


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_code_lines_fit_a_laptop_width(path):
    cells = load(path).cells
    wide = [(i, len(line)) for i, c in enumerate(cells) if c.cell_type == "code"
            for line in c.source.splitlines() if len(line) > LAPTOP_SCREEN_COLUMNS]
    assert not wide, (f"{path.stem}: code lines wider than {LAPTOP_SCREEN_COLUMNS} characters (cell, width): "
                      f"{wide}; wrap them (an answer cell: in its exercise file, then "
                      "python -m hooktutor answers --write)")
