"""One place names the course's public home, [project.urls] in pyproject.toml, and every badge,
link and install command comes from it (hooktutor/course/links.py, `python -m hooktutor links`)."""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from pathlib import Path

import nbformat
import pytest

from hooktutor.course import lab, links

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
HOME = links.home(ROOT)
REAL_FIND_SPEC = importlib.util.find_spec
# the project's text that may carry a link (the generator and this test hold templates, not links)
SCANNED = sorted({*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *NOTEBOOKS, *ROOT.glob("binder/*"),
                  *ROOT.glob(".github/workflows/*"), ROOT / "pyproject.toml", ROOT / "course.py",
                  *(p for p in ROOT.glob("hooktutor/**/*.py") if p.name != "links.py")})


def test_every_generated_link_agrees_with_project_urls():
    stale = links.stale(ROOT)
    names = sorted(p.relative_to(ROOT).as_posix() for p in stale)
    assert not stale, f"these disagree with [project.urls] ({HOME}): {names}; run python -m hooktutor links --write"


def test_no_other_link_to_a_binder_a_colab_or_a_repository():
    """A hand-written link the generator does not produce (another slug, branch or folder) fails."""
    lessons = [p.name for p in NOTEBOOKS]
    langs = [None, *lab.editions(ROOT / "notebooks")]   # each edition in its own folder (zh_CN/)
    binder = {links.binder_url(HOME, name, lang) for name in lessons for lang in langs}
    colab = {links.colab_url(HOME, name, lang) for name in lessons for lang in langs}
    bad = []
    for path in SCANNED:
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT).as_posix()
        for url in re.findall(r"https://mybinder\.org/v2/[^\s)\"'\\]+", text):
            if url not in binder:
                bad.append((rel, url))
        for url in re.findall(r"https://colab\.research\.google\.com/github/[^\s)\"'\\]+", text):
            if url not in colab:
                bad.append((rel, url))
        for url in re.findall(r"git\+https://[^\s)\"'\\]+", text):
            if f"hooktutor @ {url}" != links.pip_requirement(HOME):
                bad.append((rel, url))
        for owner_repo in re.findall(r"github\.com/([\w.-]+/[\w-]+(?:\.(?!git\b)[\w-]+)*)", text):
            if owner_repo not in {links.slug(HOME), *links.OTHER_REPOSITORIES}:
                bad.append((rel, owner_repo))
    assert not bad, f"links not generated from [project.urls] ({HOME}): {bad}"


def test_the_home_is_a_github_repository_and_named_once():
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", HOME)
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert pyproject.count(links.slug(HOME)) == 1, "the home is named once, as [project.urls] Homepage"


def setup_cell(path: Path):
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if links.SETUP_TAG in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{path.name}: one cell tagged {links.SETUP_TAG}"
    assert cells[0] is next(c for c in nb.cells if c.cell_type == "code"), f"{path.name}: the first code cell"
    return cells[0]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_lesson_starts_with_the_generated_setup_cell(path):
    assert setup_cell(path).source == links.setup_cell_source(HOME)


def test_a_new_lesson_gets_the_setup_cell_from_the_command():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 11 · New"),
                                         nbformat.v4.new_code_cell("import torch")])
    out = nbformat.reads(links.rewrite_notebook(nbformat.writes(nb), HOME), as_version=4)
    assert [c.cell_type for c in out.cells] == ["markdown", "code", "code"]
    assert out.cells[1].source == links.setup_cell_source(HOME) and links.SETUP_TAG in out.cells[1].metadata.tags
    assert out.cells[1].metadata.jupyter.source_hidden is True


def run_setup_cell(monkeypatch, colab: bool, installed: bool) -> tuple[list[list[str]], list[str]]:
    """Execute the set-up cell with subprocess.run caught; (pip calls, Colab calls)."""
    import subprocess

    pip_calls, colab_calls = [], []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: pip_calls.append(list(cmd)))
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (REAL_FIND_SPEC(name, *a) if installed or name != "hooktutor" else None))
    monkeypatch.setattr("hooktutor.course.errors.show_errors_short", lambda: None)
    if colab:
        google = types.ModuleType("google")
        colab_module = types.ModuleType("google.colab")
        colab_module.output = types.SimpleNamespace(enable_custom_widget_manager=lambda: colab_calls.append("widgets"))
        google.colab = colab_module
        monkeypatch.setitem(sys.modules, "google", google)
        monkeypatch.setitem(sys.modules, "google.colab", colab_module)
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(compile(links.setup_cell_source(HOME), "setup-cell", "exec"), {})
    return pip_calls, colab_calls


def test_the_setup_cell_does_nothing_on_a_prepared_machine(monkeypatch):
    assert run_setup_cell(monkeypatch, colab=False, installed=True) == ([], [])
    assert run_setup_cell(monkeypatch, colab=False, installed=False) == ([], [])  # not Colab: never pip


def test_on_colab_the_setup_cell_installs_the_package_once_and_keeps_colabs_torch(monkeypatch):
    (pip,), widgets = run_setup_cell(monkeypatch, colab=True, installed=False)
    assert pip[1:5] == ["-m", "pip", "install", "-q"] and pip[5:] == [links.pip_requirement(HOME)]
    assert not any("torch" in word for word in pip[1:]), "torch is never named: Colab's own is kept"
    assert not any(w in pip for w in ("-U", "--upgrade", "--force-reinstall")), "nothing already there is replaced"
    assert widgets == ["widgets"]
    assert run_setup_cell(monkeypatch, colab=True, installed=True) == ([], ["widgets"])  # run again: no pip


def test_binder_opens_the_workbook_that_postbuild_writes_with_the_learner_lab_settings():
    post = (ROOT / "binder" / "postBuild").read_text(encoding="utf-8")
    start = (ROOT / "binder" / "start").read_text(encoding="utf-8")
    assert f"python -m hooktutor workbook {links.BINDER_WORKBOOK}\n" in post
    assert links.binder_url(HOME).endswith(f"urlpath=lab/tree/{links.BINDER_WORKBOOK}/{links.FIRST_LESSON}")
    assert f"python -m hooktutor lab-config {links.BINDER_LAB_CONFIG}\n" in post
    assert f'JUPYTER_CONFIG_PATH="$HOME/{links.BINDER_LAB_CONFIG}' in start and 'exec "$@"' in start


def test_colab_opens_the_learners_edition_that_the_workflow_publishes():
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    assert "hooktutor workbook" in workflow and f"HEAD:refs/heads/{links.LEARNER_BRANCH}" in workflow
    for path in NOTEBOOKS:
        assert links.colab_url(HOME, path.name).endswith(f"/blob/{links.LEARNER_BRANCH}/{path.name}")


def test_the_command_reports_and_writes(tmp_path, monkeypatch, capsys):
    for name in ("pyproject.toml", "README.md", "docs/instructors.md", "binder/postBuild", "binder/start",
                 "notebooks/00_start_here.ipynb"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(HOME, "https://github.com/someone/hooks-course"))
    monkeypatch.setattr(links, "ROOT", tmp_path)
    assert links.main([]) == 1
    assert "disagree with [project.urls]" in capsys.readouterr().out
    assert links.main(["--write"]) == 0 and links.main([]) == 0
    readme = (tmp_path / "README.md").read_text()
    assert "github/someone/hooks-course/blob/learner/00_start_here.ipynb" in readme
    assert "mybinder.org/v2/gh/someone/hooks-course/main" in readme and "hooktutor/hooktutor" not in readme
    cell = setup_cell(tmp_path / "notebooks" / "00_start_here.ipynb").source
    assert "git+https://github.com/someone/hooks-course@main" in cell
    assert "git clone https://github.com/someone/hooks-course.git" in (tmp_path / "docs/instructors.md").read_text()


def test_each_edition_goes_every_route_in_a_folder_named_for_its_language():
    """Binder writes each edition's workbook (workbook/zh_CN), the learner branch carries it
    (zh_CN/, what README.zh-CN.md's Colab column opens), each row of that table opens its lesson."""
    langs = lab.editions(ROOT / "notebooks")
    assert langs, "no edition in notebooks/"
    post = (ROOT / "binder" / "postBuild").read_text(encoding="utf-8")
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    assert 'hooktutor workbook "$lang" --source "$edition"' in workflow
    for lang in langs:
        assert f"python -m hooktutor workbook workbook/{lang} --source notebooks/{lang}" in post
        readme = ROOT / f"README.{lang.replace('_', '-')}.md"
        rows = re.findall(r"^\| `(\d\d_\w+)` \|.*\]\((\S+)\) \|$", readme.read_text(encoding="utf-8"), re.M)
        assert dict(rows) == {p.stem: links.colab_url(HOME, p.name, lang) for p in NOTEBOOKS}
    assert links.binder_url(HOME, "01_tensor_hooks.ipynb", "zh_CN").endswith(
        "urlpath=lab/tree/workbook/zh_CN/01_tensor_hooks.ipynb")
