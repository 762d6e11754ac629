"""The static fallback of each widget on the website: pictures of its states, drawn by the
widget's own code at site build time (``python3 course.py site``, ``hooktutor.course.site``).

A static page has no kernel, so a widget (``hooktutor.widgets``) cannot run there. For each cell
of a lesson whose stored output is a hooktutor widget, this module runs, in this process and on
the CPU, that cell's own source after the earlier cells that define the names it uses (found by
reading the code: the last earlier cell that binds each name, and so on back), then sets the
widget to each of its states (a toggle off and on; a panel with no hook and with a layer zeroed;
the patch picker without and with a patch) and keeps what its views show: the very PNGs and the
status line the live widget draws. Everything the lessons compute is seeded, so the pictures are
the same on every build. Each fallback says how to run the widget live.

Nothing here changes a stored output: the pictures are extra, and the page says they were drawn
for the site.
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import hashlib
import html
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .site_source import WIDGET_VIEW, lessons_folder, source_of

# -- which cells a widget's cell needs --------------------------------------------------------

def _names(source: str) -> tuple[set[str], set[str]]:
    """(names the cell reads, names it binds at its top level)."""
    tree = ast.parse(source)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound: set[str] = set()
    for node in tree.body:
        for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [node]:
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                bound.add(sub.id)
            elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(sub.name)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                bound.update((a.asname or a.name).split(".")[0] for a in sub.names)
    return read - set(dir(builtins)), bound


def needed_cells(sources: list[str], target: int) -> list[int]:
    """The indices of the code ``sources`` before ``target`` that ``target`` depends on: for
    each name it reads, the last earlier cell that binds it, and what that cell reads, in turn."""
    info = [_names(s) for s in sources]
    chosen: set[int] = set()
    todo = [target]
    while todo:
        i = todo.pop()
        for name in info[i][0]:
            for j in range(i - 1, -1, -1):
                if name in info[j][1]:
                    if j not in chosen:
                        chosen.add(j)
                        todo.append(j)
                    break
    return sorted(chosen)


def widget_cells(nb: dict) -> list[int]:
    """Indices of the cells whose stored output is a hooktutor widget (its repr names its class)."""
    from ..widgets import __all__ as classes

    found = []
    for index, cell in enumerate(nb["cells"]):
        for output in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            data = output.get("data", {})
            text = "".join(data.get("text/plain", ""))
            if WIDGET_VIEW in data and text.split("(")[0] in classes:
                found.append(index)
    return found


# -- the states of a widget ---------------------------------------------------------------------

def states(widget: Any) -> list[tuple[str, Callable[[], None]]]:
    """(label, action) for each state the fallback shows, by the widget's kind."""
    from ..widgets import HookPanel, PatchPicker
    from ..widgets._base import CheckboxWidget
    from .site_text import checkbox_state, panel_states, patch_states

    if isinstance(widget, CheckboxWidget):
        description = widget.checkbox.description
        return [(checkbox_state(description, False), lambda: setattr(widget, "value", False)),
                (checkbox_state(description, True), lambda: setattr(widget, "value", True))]
    if isinstance(widget, HookPanel):
        layer = widget.layers[len(widget.layers) // 2]
        return list(zip(panel_states(layer),
                        [widget.reset, lambda: (widget.reset(), widget.set_mode(layer, "zero"))], strict=True))
    if isinstance(widget, PatchPicker):
        name, last = widget.names[1 if len(widget.names) > 1 else 0], int(widget.slider.max)
        return list(zip(patch_states(name, last),
                        [lambda: widget.pick("(no patch)", 0), lambda: widget.pick(name, 0),
                         lambda: widget.pick(name, last)], strict=True))
    raise TypeError(f"no static states known for {type(widget).__name__}; add them to "
                    "hooktutor/course/site_widgets.py:states()")


def _text(value: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", value)).split())


def snapshot(widget: Any) -> tuple[list[str], list[tuple[bytes, str]]]:
    """What the widget shows now: its status lines (text) and its pictures (PNG bytes, alt)."""
    import ipywidgets as w

    lines: list[str] = []
    pictures: list[tuple[bytes, str]] = []

    def walk(node: Any) -> None:
        if isinstance(node, w.Output):
            for output in node.outputs:
                data = output.get("data", {})
                if "image/png" in data:
                    pictures.append((base64.b64decode(data["image/png"]), str(data.get("text/plain", "picture"))))
                elif output.get("output_type") == "stream":
                    lines.append(output.get("text", "").strip())
        elif isinstance(node, w.HTML) and node.value and "<table" not in node.value:
            text = _text(node.value)
            if text and not text.startswith("HookPanel:"):
                lines.append(text)
        for child in getattr(node, "children", ()):
            walk(child)

    walk(widget.widget)
    return [line for line in lines if line], pictures


# -- one lesson ---------------------------------------------------------------------------------

def render_lesson(nb: dict, stem: str, folder: Path) -> dict[int, str]:
    """Run each widget cell of lesson ``nb`` as described above; write its pictures into
    ``folder`` and return {cell index: the fallback's markdown}."""
    import matplotlib

    matplotlib.use("Agg")
    cells = widget_cells(nb)
    if not cells:
        return {}
    # a cell that shows an error on purpose (raises-exception) binds nothing a later cell can use
    skip = {"colab-setup", "raises-exception"}
    code = [(i, source_of(c)) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and not skip & set(c.get("metadata", {}).get("tags", []))]
    position = {i: k for k, (i, _) in enumerate(code)}
    sources = [s for _, s in code]
    namespace: dict[str, Any] = {"__name__": f"site_{stem}"}
    done: set[int] = set()
    fallbacks = {}
    from ..widgets import close_all

    try:
        for index in cells:
            target = position[index]
            for k in needed_cells(sources, target):
                if k not in done:
                    _run(sources[k], namespace, stem, code[k][0])
                    done.add(k)
            widget = _run(sources[target], namespace, stem, index, value=True)
            done.add(target)
            fallbacks[index] = _fallback(widget, stem, index, folder)
    finally:
        close_all()
    return fallbacks


def _run(source: str, namespace: dict, stem: str, index: int, value: bool = False) -> Any:
    """Execute a cell's source in ``namespace`` (its printing swallowed); with ``value``, return
    the value of its last line, as the notebook displays it."""
    tree = ast.parse(source)
    last = None
    if value and tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            exec(compile(tree, f"<{stem} cell {index}>", "exec"), namespace)
            result = eval(compile(last, f"<{stem} cell {index}>", "eval"), namespace) if last else None
    except Exception as err:
        raise RuntimeError(f"{stem}.ipynb cell {index}, run for its widget's static pictures, raised "
                           f"{type(err).__name__}: {err}. The site runs only the cells a widget's cell needs "
                           "(hooktutor/course/site_widgets.py:needed_cells): give the widget's cell what it "
                           "uses by name") from err
    if value and result is None:
        raise RuntimeError(f"{stem}.ipynb cell {index} shows a widget but does not end with it as its value")
    import matplotlib.pyplot as plt

    plt.close("all")
    return result


def _fallback(widget: Any, stem: str, index: int, folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    from .site_text import same_picture, widget_heading, widget_lead

    kind = type(widget).__name__
    parts = [f"```{{admonition}} {widget_heading(kind)}\n:class: hooktutor-fallback\n", f"{widget_lead()}\n"]
    shown: list[bytes] = []   # the pictures of the state before
    for number, (label, action) in enumerate(states(widget)):
        action()
        lines, pictures = snapshot(widget)
        parts.append(f"**{label}**" + (": " + " \u00b7 ".join(_md_text(x) for x in lines) if lines else "") + "\n")
        before, shown = shown, [png for png, _ in pictures]
        for k, (png, alt) in enumerate(pictures):
            if k < len(before) and before[k] == png:
                # the same picture as in the state above (a hook that only observes, a layer
                # before the one changed): said, not shown twice
                parts.append(f"*{_md_text(same_picture(alt))}*\n")
                continue
            name = f"{stem}-cell{index}-state{number}-{k}.png"
            path = folder / name
            if not path.exists() or path.read_bytes() != png:
                path.write_bytes(png)
            parts.append(f"![{_md_text(alt)}]({folder.name}/{name})\n")
    parts.append("```\n")
    return "\n".join(parts)


def _md_text(text: str) -> str:
    """Plain text safe inside markdown (no emphasis, links or code from stray characters)."""
    return re.sub(r"([\\`*_\[\]<>|])", r"\\\1", text.replace("\n", " "))


def render_all(root: Path, folder: Path, lang: str = "en") -> dict[str, dict[int, str]]:
    """The fallbacks of every lesson in ``root/notebooks`` (``root/notebooks/<lang>``, the widgets
    speaking ``lang``): {lesson stem: {cell index: markdown}}.

    Kept in ``folder/fallbacks.json`` with a key of every lesson and of the widget and course
    code: a rebuild with nothing changed reuses them instead of running the cells again."""
    import torch

    from ..i18n import language, set_language

    notebooks = lessons_folder(root, lang)
    key = hashlib.sha256(lang.encode())
    for path in sorted([*notebooks.glob("*.ipynb"), *(root / "hooktutor").rglob("*.py"),
                        *(root / "hooktutor" / "locale").rglob("*.po")]):
        key.update(path.name.encode())
        key.update(path.read_bytes())
    key.update(torch.__version__.encode())
    cache = folder / "fallbacks.json"
    if cache.exists():
        stored = json.loads(cache.read_text(encoding="utf-8"))
        if stored.get("key") == key.hexdigest():
            return {stem: {int(i): md for i, md in cells.items()} for stem, cells in stored["lessons"].items()}
    threads, spoken = torch.get_num_threads(), language()
    torch.set_num_threads(1)
    set_language(lang)
    try:
        result = {}
        for path in sorted(notebooks.glob("*.ipynb")):
            nb = json.loads(path.read_text(encoding="utf-8"))
            cells = render_lesson(nb, path.stem, folder)
            if cells:
                result[path.stem] = cells
    finally:
        torch.set_num_threads(threads)
        set_language(spoken)
    cache.write_text(json.dumps({"key": key.hexdigest(), "lessons": result}, indent=1) + "\n", encoding="utf-8")
    return result
