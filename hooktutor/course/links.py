"""Every link to the course's public home, generated from its one source: ``[project.urls]``.

``Homepage`` in ``pyproject.toml`` names the repository (``https://github.com/OWNER/REPO``).
From it come the README's Binder badge and Colab column, each lesson's set-up cell (the
``pip install`` Colab runs), the ``git clone`` commands and the launch links of
``docs/instructors.md``, and ``binder/``. ``python -m hooktutor links`` says which disagree;
``--write`` rewrites them (and gives a new lesson its set-up cell). ``tests/test_links.py`` fails
when any of them disagrees, and on any other link to a Binder, a Colab or a GitHub repository
that is not the home.

What Binder and Colab open is the **learner's edition** (exercises blank), as
``python3 course.py lab`` does:

* Binder builds from the ``main`` branch; ``binder/postBuild`` writes the workbook with
  ``hooktutor workbook workbook`` and the learner-mode Lab settings, which ``binder/start`` puts
  on ``JUPYTER_CONFIG_PATH``. The badge opens ``workbook/00_start_here.ipynb``.
* Colab opens a notebook from a GitHub branch. The workflow (``.github/workflows/ci.yml``, job
  ``learner-edition``) writes the workbook of every push to ``main`` with ``hooktutor workbook``
  and force-pushes it, alone, to the branch ``learner`` (never edited, never merged: like a Pages
  branch). The Colab links open the lessons there; their set-up cell installs the package from
  ``main``, keeping Colab's own torch.

Each edition in another language (``notebooks/zh_CN/``) goes the same routes, in a folder named
for its language: ``workbook/zh_CN/`` on Binder, ``zh_CN/`` on the branch ``learner`` (the Colab
column of ``README.zh-CN.md`` opens its lessons there).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from .lab import FIRST_LESSON

ROOT = Path(__file__).resolve().parents[2]
BRANCH = "main"  # what Binder builds and the set-up cell installs
LEARNER_BRANCH = "learner"  # the learner's edition, written by the workflow from BRANCH: what Colab opens
BINDER_WORKBOOK = "workbook"  # the folder binder/postBuild writes the workbook into
BINDER_LAB_CONFIG = ".hooktutor-lab"  # the learner-mode Lab settings on Binder (binder/start)
SETUP_TAG = "colab-setup"
# Repositories the lessons and guides may link to besides the home (the source of what they cite).
OTHER_REPOSITORIES = {"pytorch/pytorch"}


def home(root: Path = ROOT) -> str:
    """``[project.urls] Homepage`` of pyproject.toml: the public home, https://github.com/OWNER/REPO."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: tomli where installed; pip's copy only as the last resort (importing
        try:            # pip makes setuptools' distutils shim stand aside: a later `import setuptools` fails)
            import tomli as tomllib
        except ImportError:
            from pip._vendor import tomli as tomllib
    url = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]["Homepage"]
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise ValueError(f"[project.urls] Homepage must be https://github.com/OWNER/REPO, not {url!r}")
    return url


def slug(url: str) -> str:
    return url.removeprefix("https://github.com/")


def clone_url(url: str) -> str:
    return f"{url}.git"


def binder_url(url: str, lesson: str = FIRST_LESSON, lang: str | None = None) -> str:
    folder = f"{BINDER_WORKBOOK}/{lang}" if lang else BINDER_WORKBOOK
    return f"https://mybinder.org/v2/gh/{slug(url)}/{BRANCH}?urlpath=lab/tree/{folder}/{lesson}"


def colab_url(url: str, lesson: str, lang: str | None = None) -> str:
    """The learner's edition of ``lesson`` (``01_tensor_hooks.ipynb``) on the branch ``learner``;
    with ``lang`` (``zh_CN``), its edition in that language."""
    path = f"{lang}/{lesson}" if lang else lesson
    return f"https://colab.research.google.com/github/{slug(url)}/blob/{LEARNER_BRANCH}/{path}"


def pip_requirement(url: str) -> str:
    """What the set-up cell installs on Colab: the package of the branch the learner's edition is
    written from. Only hooktutor is named: pip keeps every installed package that satisfies its
    lower bounds (Colab's torch, torch >= 2.1), so Colab's torch stays."""
    return f"hooktutor @ git+{url}@{BRANCH}"


def pip_lab_requirement(url: str) -> str:
    """What a learner without a clone installs before a release: the package of the main branch,
    with JupyterLab (``hooktutor lab`` then writes the workbook)."""
    return f"hooktutor[lab] @ git+{url}@{BRANCH}"


PIP_FROM_GIT = re.compile(r'pip install "hooktutor\[lab\] @ git\+[^"\s]*"')


def binder_badge(url: str) -> str:
    return f"[![Binder](https://mybinder.org/badge_logo.svg)]({binder_url(url)})"


def colab_badge(url: str, lesson: str, lang: str | None = None) -> str:
    return (f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"({colab_url(url, lesson, lang)})")


def setup_cell_source(url: str) -> str:
    """The first code cell of every lesson. On a prepared machine (a checkout's .venv, Binder, a
    hub, an installed wheel) it installs nothing; on Colab it installs the course package once per
    runtime (torch not named: Colab's is kept) and turns on Colab's widget manager."""
    return f'''\
# Set-up (generated by `python -m hooktutor links --write`). On Google Colab only, and only once:
# install the course package (Colab's torch is kept) and turn on widgets. Elsewhere: nothing.
import importlib.util
import sys

if "google.colab" in sys.modules:
    if importlib.util.find_spec("hooktutor") is None:
        import subprocess

        subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                        "{pip_requirement(url)}"], check=True)
    from google.colab import output

    output.enable_custom_widget_manager()

from hooktutor.course.errors import show_errors_short

show_errors_short()   # an error shows its message and the line that raised it,
                      # not torch's internals'''


def binder_files(url: str, editions: Sequence[str] = ()) -> dict[str, str]:
    """binder/postBuild and binder/start (relative path -> text); ``editions``: the languages of
    the editions in ``notebooks/`` (each gets its workbook, ``workbook/zh_CN``)."""
    languages = "".join(f"python -m hooktutor workbook {BINDER_WORKBOOK}/{lang} --source notebooks/{lang}\n"
                        for lang in editions)
    if languages:
        languages = ("# Each edition in another language: its own workbook, in a folder named for the "
                     "language.\n" + languages)
    generated = "# Generated by `python -m hooktutor links --write` (hooktutor/course/links.py): edit that, not this.\n"
    post = f"""\
#!/usr/bin/env bash
{generated}# Binder (repo2docker) builds the conda environment from binder/environment.yml and this image from
# the {BRANCH} branch of {url}; the course package itself is installed here.
set -euo pipefail
python -m pip install --no-deps -e .
# The learner's workbook (exercises blank, as `python3 course.py lab` gives it); the badge opens it.
python -m hooktutor workbook {BINDER_WORKBOOK}
{languages}# The learner-mode JupyterLab settings of `python3 course.py lab` (nbgrader's menus, news prompt
# off); binder/start puts the folder first on JUPYTER_CONFIG_PATH.
python -m hooktutor lab-config {BINDER_LAB_CONFIG}
"""
    start = f"""\
#!/usr/bin/env bash
{generated}# Binder runs the server through this: the course's learner-mode settings first on JUPYTER_CONFIG_PATH.
export JUPYTER_CONFIG_PATH="$HOME/{BINDER_LAB_CONFIG}${{JUPYTER_CONFIG_PATH:+:$JUPYTER_CONFIG_PATH}}"
exec "$@"
"""
    return {"binder/postBuild": post, "binder/start": start}


# -- the generated parts of hand-written files ------------------------------------------------
GUIDE_BEGIN = ("<!-- where learners open the course: generated from [project.urls] of pyproject.toml by "
               "`python -m hooktutor links --write`; do not edit this block -->")
GUIDE_END = "<!-- end of where learners open the course -->"


def guide_block(url: str, lessons: list[str]) -> str:
    rows = "\n".join(f"| `{Path(name).stem}` | [Colab]({colab_url(url, name)}) |" for name in lessons)
    return f"""{GUIDE_BEGIN}
| where | link or command |
|---|---|
| the repository | {url} (`git clone {clone_url(url)}`) |
| Binder, the learner's workbook | {binder_url(url)} |
| Colab's set-up cell installs | `pip install "{pip_requirement(url)}"` (torch not named) |

| lesson | the learner's edition in Colab |
|---|---|
{rows}
{GUIDE_END}"""


def rewrite_readme(text: str, url: str) -> str:
    text = PIP_FROM_GIT.sub(f'pip install "{pip_lab_requirement(url)}"', text)
    text = re.sub(r"\[!\[Binder\]\(https://mybinder\.org/badge_logo\.svg\)\]\([^)\s]*\)", binder_badge(url), text)

    def row(match: re.Match) -> str:
        return re.sub(r"\[!\[Open in Colab\]\([^)\s]*\)\]\([^)\s]*\)",
                      colab_badge(url, f"{match.group(1)}.ipynb"), match.group(0))

    return re.sub(r"^\| `(\d\d_\w+)` \|.*$", row, text, flags=re.M)


def rewrite_edition_readme(text: str, url: str, lang: str) -> str:
    """``README.<lang>.md`` with the Colab badge of each row of its lesson table opening that
    lesson's edition in ``lang`` (a row ``| `01_tensor_hooks` | ... | [![Open in Colab](...)](...) |``)."""
    def row(match: re.Match) -> str:
        return re.sub(r"\[!\[Open in Colab\]\([^)\s]*\)\]\([^)\s]*\)",
                      colab_badge(url, f"{match.group(1)}.ipynb", lang), match.group(0))

    return re.sub(r"^\| `(\d\d_\w+)` \|.*$", row, text, flags=re.M)


def rewrite_guide(text: str, url: str, lessons: list[str]) -> str:
    text = PIP_FROM_GIT.sub(f'pip install "{pip_lab_requirement(url)}"', text)
    text = re.sub(r"git clone https://github\.com/[\w.-]+/[\w.-]+?\.git", f"git clone {clone_url(url)}", text)
    pattern = re.compile(re.escape(GUIDE_BEGIN) + r".*?" + re.escape(GUIDE_END), flags=re.S)
    if not pattern.search(text):
        raise ValueError(f"docs/instructors.md has no block between {GUIDE_BEGIN!r} and {GUIDE_END!r}")
    return pattern.sub(lambda _: guide_block(url, lessons), text)


def rewrite_notebook(text: str, url: str) -> str:
    """The notebook (its JSON text) with its set-up cell generated: replaced, or added as the first
    code cell of a lesson that has none."""
    import nbformat

    nb = nbformat.reads(text, as_version=4)
    cells = [c for c in nb.cells if SETUP_TAG in c.metadata.get("tags", [])]
    if not cells:
        cell = nbformat.v4.new_code_cell(metadata={"jupyter": {"source_hidden": True}, "tags": [SETUP_TAG]})
        first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
        nb.cells.insert(first_code, cell)
        cells = [cell]
    for cell in cells:
        cell.source = setup_cell_source(url)
    out = nbformat.writes(nb) + "\n"
    return text if out == text or nbformat.reads(text, as_version=4) == nb else out


def expected(root: Path = ROOT) -> dict[Path, str]:
    """Every file that carries a generated link, with the text it should have."""
    url = home(root)
    lessons = sorted(p.name for p in (root / "notebooks").glob("*.ipynb"))
    want: dict[Path, str] = {}
    readme = root / "README.md"
    want[readme] = rewrite_readme(readme.read_text(encoding="utf-8"), url)
    guide = root / "docs" / "instructors.md"
    want[guide] = rewrite_guide(guide.read_text(encoding="utf-8"), url, lessons)
    from .lab import editions

    languages = editions(root / "notebooks")
    for lang in languages:
        other = root / f"README.{lang.replace('_', '-')}.md"
        if other.exists():
            want[other] = rewrite_edition_readme(other.read_text(encoding="utf-8"), url, lang)
    for name, text in binder_files(url, languages).items():
        want[root / name] = text
    for name in lessons:
        path = root / "notebooks" / name
        want[path] = rewrite_notebook(path.read_text(encoding="utf-8"), url)
    return want


def stale(root: Path = ROOT) -> dict[Path, str]:
    """The files whose text differs from what :func:`expected` generates (path -> expected text)."""
    out = {}
    for path, text in expected(root).items():
        have = path.read_text(encoding="utf-8") if path.exists() else None
        if have != text:
            out[path] = text
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m hooktutor links", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the files that disagree")
    args = parser.parse_args(argv)
    changed = stale(ROOT)
    for path, text in changed.items():
        rel = path.relative_to(ROOT).as_posix()
        if args.write:
            path.write_text(text, encoding="utf-8", newline="\n")
            if rel.startswith("binder/"):
                path.chmod(0o755)
            print(f"wrote {rel}")
        else:
            have = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
            sys.stdout.writelines(line + "\n" for line in difflib.unified_diff(
                have, text.splitlines(), f"{rel} (now)", f"{rel} (from [project.urls])", lineterm="", n=1))
    if not changed:
        print(f"every link to {home(ROOT)} agrees with [project.urls]")
        return 0
    if not args.write:
        print(f"{len(changed)} file(s) disagree with [project.urls]: python -m hooktutor links --write")
        return 1
    return 0
