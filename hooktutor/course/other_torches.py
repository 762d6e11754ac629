"""Do the lessons hold on other torch (and transformers) releases? The worker of ``python3 course.py compat``.

Stored outputs are made with the pinned torch and compared by strict nbval; on any other
torch a repr or an error text may differ while every claim still holds. So here nothing
stored is compared. Instead each notebook is executed in a fresh kernel and

* every code cell without the ``raises-exception`` tag must run without an error (its
  asserts are the lesson's checks);
* every tagged cell must raise the error its metadata declares: the exception's type and a
  regular expression on the stable part of its message, never the whole text::

      "metadata": {"tags": ["raises-exception"],
                   "hooktutor": {"expect_error": {"type": "RuntimeError",
                                                  "match": "is a view and is being modified inplace"}}}

Cells whose text output differs from the stored one are listed (drift), not failed.

A transformers environment (``compat --transformers 5.0.0``: the pinned torch, another
transformers) executes only the lessons that name a transformers floor (``needs_transformers``).

    python -m hooktutor.course.other_torches run RESULT.json [NOTEBOOK...]   # in the environment to test
    python -m hooktutor.course.other_torches run RESULT.json --transformers-lessons   # those lessons only
    python -m hooktutor.course.other_torches report OUT.md RESULT.json...     # the table, from every result
    python -m hooktutor.course.other_torches report OUT.md --pinned=2.13.0 --carry=torch:2.1.2,transformers R.json...
        # ... keeping from OUT.md the columns of torch 2.1.2 and of every transformers release not run
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
TEXT_TYPES = ("text/plain", "text/html", "text/latex", "text/markdown")


# --- the metadata of an intended error --------------------------------------------------------------

def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def expected_error(cell) -> dict | None:
    """The ``{"type": ..., "match": ...}`` a cell tagged raises-exception declares, or None."""
    spec = cell.get("metadata", {}).get("hooktutor", {}).get("expect_error")
    return dict(spec) if spec else None


def error_problem(spec: dict | None, ename: str | None, evalue: str | None) -> str | None:
    """Why an error (``ename``, ``evalue``; None when the cell raised nothing) does not satisfy ``spec``."""
    if not spec or not spec.get("type") or not spec.get("match"):
        return "tagged raises-exception but declares no metadata.hooktutor.expect_error {type, match}"
    if ename is None:
        return f"should raise {spec['type']} but raised nothing"
    if ename != spec["type"]:
        return f"should raise {spec['type']} but raised {ename}: {evalue}"
    if not re.search(spec["match"], evalue or ""):
        return f"raised {ename}, but its message does not match /{spec['match']}/: {evalue}"
    return None


# --- outputs, compared the way nbval compares them ---------------------------------------------------

def sanitizers() -> list[tuple[re.Pattern, str]]:
    cfg = ROOT / "tests" / "sanitize.cfg"
    text = cfg.read_text() if cfg.exists() else ""
    return [(re.compile(r), s) for r, s in re.findall(r"^regex: (.*)$\n^replace: (.*)$", text, flags=re.M)]


def comparable(outputs: list, subs: list[tuple[re.Pattern, str]]) -> str:
    parts: list[str] = []
    last_stream = None
    for o in outputs:
        if o["output_type"] == "stream":
            if last_stream == o["name"]:
                parts[-1] += o["text"]
            else:
                parts.append(f"{o['name']}: {o['text']}")
            last_stream = o["name"]
            continue
        last_stream = None
        if o["output_type"] == "error":
            parts.append(f"error: {o['ename']}: {o['evalue']}")
        else:
            parts.extend(f"{m}: {o['data'][m]}" for m in TEXT_TYPES if m in o.get("data", {}))
    text = "\n".join(parts)
    for pattern, replacement in subs:
        text = pattern.sub(replacement, text)
    return text


# --- running ---------------------------------------------------------------------------------------

def execute(path: Path) -> dict:
    """Execute one notebook in a fresh kernel of this environment; check every cell; note the drift."""
    import nbformat
    from nbclient import NotebookClient

    stored = nbformat.read(path, as_version=4)
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                            shutdown_kernel="immediate", resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    try:
        client.execute()
        crashed = ""
    except Exception as exc:  # a dead kernel or a timeout: report it with the cells that did run
        crashed = f"{type(exc).__name__}: {str(exc)[:300]}"
    seconds = time.perf_counter() - start
    subs = sanitizers()
    failures, drift = [], []
    for index, (cell, old) in enumerate(zip(nb.cells, stored.cells)):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        errors = [o for o in cell.get("outputs", []) if o["output_type"] == "error"]
        ename, evalue = (errors[0]["ename"], errors[0]["evalue"]) if errors else (None, None)
        if "raises-exception" in tags(cell):
            problem = error_problem(expected_error(cell), ename, evalue)
        else:
            problem = f"raised {ename}: {evalue}" if errors else None
        if problem:
            failures.append({"cell": index, "problem": problem[:600]})
        if "nbval-ignore-output" not in tags(cell) and \
                comparable(cell.get("outputs", []), subs) != comparable(old.get("outputs", []), subs):
            drift.append(index)
    if crashed:
        failures.append({"cell": None, "problem": crashed})
    return {"ok": not failures, "seconds": round(seconds, 1), "failures": failures, "drift": drift}


FLOOR_LIBRARIES = ("torch", "transformers")   # a lesson may name a floor of its own for each


def floors(path: Path) -> dict[str, tuple[str, str]]:
    """The floors the lesson at ``path`` names in its metadata: {library: (release, why)}. Where a
    library it teaches needs a newer torch, or a newer release of itself, than the course admits:
    ``{"hooktutor": {"needs_torch": "2.6", "why": "transformers 5 runs on torch 2.6 or newer",
    "needs_transformers": "5.0", "why_transformers": "..."}}`` (``why`` is the torch floor's)."""
    import nbformat

    meta = nbformat.read(path, as_version=4).metadata.get("hooktutor", {})
    found = {}
    for library in FLOOR_LIBRARIES:
        least = meta.get(f"needs_{library}")
        if least:
            why = meta.get("why" if library == "torch" else f"why_{library}", "see the lesson")
            found[library] = (str(least), why)
    return found


def installed_versions(torch_version: str | None = None) -> dict[str, str]:
    """The installed releases of the floor libraries (torch: ``torch_version`` when given)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for library in FLOOR_LIBRARIES:
        if library == "torch" and torch_version:
            found[library] = torch_version
            continue
        try:
            found[library] = version(library)
        except PackageNotFoundError:
            pass
    return found


def not_admitted(path: Path, torch_version: str | None = None, versions: dict[str, str] | None = None) -> str | None:
    """Why the lesson at ``path`` does not run here, or None: a release below a floor it names
    (:func:`floors`). ``versions`` ({library: release}) defaults to what is installed, with torch
    ``torch_version`` when given."""
    from .claims import version_tuple

    have = installed_versions(torch_version) if versions is None else dict(versions)
    if torch_version:
        have["torch"] = torch_version
    for library, (least, why) in floors(path).items():
        if library in have and version_tuple(have[library]) < version_tuple(least):
            return f"needs {library} {least} or newer: {why}"
    return None


# The Python the notebooks' outputs are stored with (`python -m hooktutor regen` runs in the course's
# .venv): its pins in requirements/constraints.txt are the releases the stored outputs show.
STORED_PYTHON = (3, 11)


def outputs_not_comparable(path: Path, versions: dict[str, str] | None = None) -> str | None:
    """Why the stored outputs of the lesson at ``path`` cannot be compared here, or None.

    A lesson that names a floor of a library other than torch (``needs_transformers``) prints what
    that library's release does (lesson 12: the output fields, the hidden states a cleared hook
    dict leaves), and asserts it release by release (hooktutor/course/claims.py). Its stored
    outputs are those of the release pinned for :data:`STORED_PYTHON`; an older Python can be
    pinned an older release (Python 3.10: transformers 5.20.2, the last that installs there), whose
    printed facts differ while every assertion still holds. There the lesson runs cell by cell,
    every assertion and every declared exception checked, its outputs not compared."""
    from .doctor import pinned_versions

    have = installed_versions() if versions is None else dict(versions)
    stored = pinned_versions(Path(__file__).resolve().parents[2] / "requirements" / "constraints.txt",
                             STORED_PYTHON)
    for library in floors(path):
        if library == "torch" or library not in have or library not in stored:
            continue
        if have[library] != stored[library]:
            return (f"its outputs are stored with {library} {stored[library]} (the pin of Python "
                    f"{'.'.join(map(str, STORED_PYTHON))} and newer); {library} {have[library]} is installed")
    return None


def env_name(result: dict) -> str:
    """``torch 2.13.0+cpu``, or ``transformers 5.0.0 (torch 2.13.0+cpu)`` for a transformers environment
    (a result marked ``transformers_env``)."""
    if result.get("transformers_env"):
        return f"transformers {result['transformers']} (torch {result['torch']})"
    return f"torch {result['torch']}"


def run(result_file: Path, paths: list[Path], transformers_env: bool = False) -> int:
    import numpy
    import torch

    from . import claims as versions

    result = {
        "torch": torch.__version__, "numpy": numpy.__version__, "python": platform.python_version(),
        "transformers": installed_versions().get("transformers"), "transformers_env": transformers_env,
        "notebooks": {}, "claims": [], "tests": None,
    }
    for path in paths:
        why = not_admitted(path, torch.__version__)
        if why:
            print(f"[compat] {env_name(result)}: {path.name} not run ({why})", flush=True)
            result["notebooks"][path.stem] = {"ok": True, "seconds": 0.0, "failures": [], "drift": [],
                                              "not_admitted": why}
            continue
        print(f"[compat] {env_name(result)}: executing {path.name}", flush=True)
        outcome = execute(path)
        result["notebooks"][path.stem] = outcome
        for f in outcome["failures"]:
            print(f"[compat]   FAIL cell [{f['cell']}]: {f['problem'][:300]}", flush=True)
    result["claims"] = versions.probe_all()
    for row in result["claims"]:
        if not row["agrees"]:
            print(f"[compat]   probe {row['id']} contradicts the registry: expected {row['expected']}, "
                  f"observed {row['observed']} {row['error']}", flush=True)
    result_file.write_text(json.dumps(result, indent=1) + "\n")
    ok = all(n["ok"] for n in result["notebooks"].values()) and all(r["agrees"] for r in result["claims"])
    return 0 if ok else 1


# --- the report ------------------------------------------------------------------------------------

def _cells(indices: list) -> str:
    return ", ".join(f"[{i}]" for i in indices)


def column_release(label: str) -> str:
    """The release a column of the report is about: ``torch 2.1.2+cu121`` -> ``2.1.2+cu121``,
    ``transformers 5.0.0 (torch 2.13.0+cpu)`` -> ``5.0.0``."""
    return label.split(" ")[1]


def carried_columns(old_doc: str, kind: str, keep_out: set[str], releases: set[str] | None = None) -> list[dict]:
    """The environments of ``kind`` ("torch" or "transformers") that an earlier report (the text
    ``old_doc``) shows and this run did not test, as pre-rendered columns: what a run that left
    them out (``compat --torch ""``, or ``--torch 2.12.1`` for the other releases of COMPAT_TORCH)
    carries over, so the report still shows every environment. ``releases``: only the columns of
    those releases (``{"2.1.2"}`` keeps ``torch 2.1.2+cu121``), None: every column of ``kind``.
    The pinned one and those in ``keep_out`` (labels this run has) are not carried."""
    from .claims import version_tuple

    wanted = None if releases is None else {version_tuple(r) for r in releases}
    table = [line for line in old_doc.splitlines() if line.startswith("| ")]
    if not table or not table[0].startswith("| lesson |"):
        return []
    header = [c.strip() for c in table[0].strip("|").split("|")][1:]
    carried = []
    for i, name in enumerate(header):
        if not name.startswith(f"{kind} ") or "(pinned)" in name or name in keep_out:
            continue
        if wanted is not None and version_tuple(column_release(name)) not in wanted:
            continue
        col = {"carried": True, "label": name, "cells": {}, "observed": {}, "drift": "none", "failures": []}
        for line in table[1:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) == len(header) + 1:
                col["cells"][cells[0]] = cells[i + 1]
        short = name.replace("torch ", "", 1) if kind == "torch" else name
        claim_id = None
        for line in old_doc.splitlines():
            if line.startswith("### `"):
                claim_id = line.split("`")[1]
            elif line.startswith("- **Observed**: ") and claim_id:
                for part in line[len("- **Observed**: "):].rstrip(".").split("; "):
                    if part.startswith(f"{short}: "):
                        col["observed"][claim_id] = part[len(short) + 2:]
            elif line.startswith(f"- {name}: "):
                col["drift"] = line[len(f"- {name}: "):].rstrip(".")
            elif line.startswith(f"- {name}, "):   # its failures
                col["failures"].append(line)
        carried.append(col)
    return carried


def carry_plan(carry: tuple[str, ...]) -> dict[str, set[str] | None]:
    """What ``report`` carries over, from its ``carry`` entries: a kind (``"torch"``: every column of
    that kind) or one release of it (``"torch:2.1.2"``). {kind: releases, None for all}."""
    plan: dict[str, set[str] | None] = {}
    for entry in carry:
        kind, _, release = entry.partition(":")
        if not release:
            plan[kind] = None
        elif kind not in plan or plan[kind] is not None:
            plan.setdefault(kind, set()).add(release)
    return plan


def report(out: Path, result_files: list[Path], pinned: str = "", carry: tuple[str, ...] = ()) -> int:
    """Write the report ``out`` from the results of ``run``; the environments that ``carry`` names
    (:func:`carry_plan`: a kind, or ``kind:release``) and this run left out are carried over from
    the report already there."""
    from . import claims as versions

    results = [json.loads(p.read_text()) for p in result_files]
    results.sort(key=lambda r: (bool(r.get("transformers_env")), versions.version_tuple(r["torch"]),
                                versions.version_tuple(r.get("transformers") or "0")))
    lessons = sorted({stem for r in results for stem in r["notebooks"]})
    old = out.read_text() if out.exists() and carry else ""
    this_run = {env_name(r) for r in results}   # a column this run has is never carried as well
    carried = [c for kind, releases in carry_plan(carry).items()
               for c in carried_columns(old, kind, this_run, releases)]

    def order(r: dict) -> tuple:
        if r.get("carried"):
            kind, version = r["label"].split(" ")[:2]
            return (kind == "transformers", versions.version_tuple(version), (0, 0, 0))
        return (bool(r.get("transformers_env")), versions.version_tuple(r["torch"]),
                versions.version_tuple(r.get("transformers") or "0"))

    columns = sorted([*results, *carried], key=order)
    today = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")

    def label(r: dict) -> str:
        if r.get("carried"):
            return r["label"]
        if r.get("transformers_env"):
            return env_name(r)
        tag = " (pinned)" if pinned and versions.version_tuple(r["torch"]) == versions.version_tuple(pinned) else ""
        return f"torch {r['torch']}{tag}"

    lines = [
        "# The lessons on each torch and transformers release",
        "",
        "<!-- Generated by `python3 course.py compat`; do not edit by hand, run it again. -->",
        "",
        f"Generated by `python3 course.py compat` on {today}, with Python {results[0]['python']} on "
        f"{platform.system()} {platform.machine()}. Tested: "
        + "; ".join(f"{label(r)} with NumPy {r['numpy']}" for r in results) + "."
        + ("" if not carried else " Carried over from the previous report (not run this time): "
           + ", ".join(label(c) for c in carried) + "."),
        "",
        "The transformers environments (`--transformers`) keep the pinned torch and change transformers only: "
        "they execute the lessons that name a transformers floor (`needs_transformers` in the notebook's "
        "metadata), run the library tests of those lessons (`tests/test_huggingface.py` and their "
        "exercises) and every probe; a release below the floor is reported *not admitted* and only probed.",
        "",
        "Every notebook was executed top to bottom in a fresh kernel of each environment. A lesson passes "
        "when every cell without the `raises-exception` tag runs without an error (its asserts are the "
        "lesson's checks) and every tagged cell raises the type and matches the message pattern its "
        "metadata declares. Stored outputs are not compared here (strict nbval does that for the pinned "
        "torch); the cells whose text differs from the stored one are listed under *Drift*.",
        "",
        "## Lessons",
        "",
        "| lesson | " + " | ".join(label(r) for r in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    failed = False
    for stem in lessons:
        row = []
        for r in columns:
            if r.get("carried"):
                row.append(r["cells"].get(f"`{stem}`", "not run"))
                continue
            n = r["notebooks"].get(stem)
            if n is None:
                row.append("not run" if not r.get("transformers_env") else "not run (no transformers in it)")
            elif n.get("not_admitted"):
                row.append(f"not admitted ({n['not_admitted']})")
            elif n["ok"]:
                row.append(f"pass ({n['seconds']:.1f} s)")
            else:
                failed = True
                row.append(f"**FAIL**: cells {_cells([f['cell'] for f in n['failures']])}")
        lines.append(f"| `{stem}` | " + " | ".join(row) + " |")
    test_row = []
    for r in columns:
        if r.get("carried"):
            test_row.append(r["cells"].get("library tests (`tests/`, not `course_env`)", "not run"))
        elif r.get("tests") is None:
            test_row.append("run by `python3 course.py test`")
        else:
            failed |= r["tests"] != 0
            test_row.append(("pass" if r["tests"] == 0 else f"**FAIL** (pytest exit {r['tests']})")
                            + (f": {r['tests_scope']}" if r.get("tests_scope") else ""))
    lines.append("| library tests (`tests/`, not `course_env`) | " + " | ".join(test_row) + " |")
    probe_row = []
    for r in columns:
        if r.get("carried"):
            probe_row.append(r["cells"].get("probes of the claims below", "not run"))
            continue
        bad = [c["id"] for c in r["claims"] if not c["agrees"]]
        failed |= bool(bad)
        probe_row.append("agree" if not bad else "**CONTRADICT**: " + ", ".join(bad))
    lines.append("| probes of the claims below | " + " | ".join(probe_row) + " |")

    failures = [f"- {label(r)}, `{stem}` cell [{f['cell']}]: {f['problem'][:300]}"
                for r in results for stem, n in r["notebooks"].items() for f in n["failures"]]
    failures += [f"- {label(r)}, library test `{t}`" for r in results for t in r.get("test_failures", [])]
    failures += [line for c in carried for line in c["failures"]]
    if failures:
        lines += ["", "### Failures", "", *failures]

    lines += [
        "",
        "## What differs between releases",
        "",
        "Registered in `hooktutor/course/claims.py` (those about transformers in "
        "`hooktutor/course/claims_transformers.py`). Each lesson cell concerned says \"since torch 2.x\" (or "
        "\"since transformers 5.x\") and checks the behaviour of the installed release through "
        "`claims.expected(...)`; the probe of each claim ran in every tested environment and its answer is "
        "shown below.",
    ]
    for c in versions.CLAIMS.values():
        seen = []
        for r in columns:
            if r.get("carried"):
                short = r["label"].replace("torch ", "", 1) if r["label"].startswith("torch ") else r["label"]
                seen.append(f"{short}: {r['observed'].get(c.id, 'not probed (that run predates the claim)')}")
                continue
            row = next((x for x in r["claims"] if x["id"] == c.id), None)
            name = label(r).replace("torch ", "", 1) if not r.get("transformers_env") else label(r)
            if row is None:
                seen.append(f"{name}: not probed")
            elif row.get("skipped"):
                seen.append(f"{name}: not probed ({row['skipped']})")
            else:
                what = {True: "new", False: "old", None: "probe failed"}[row["observed"]]
                seen.append(f"{name}: {what}{'' if row['agrees'] else ' (CONTRADICTS the registry)'}")
        lines += [
            "",
            f"### `{c.id}` (since {c.library} {c.since}"
            + (f"; also {', '.join(f'{lo} to before {hi}' for lo, hi in c.also)}" if c.also else "") + ")",
            "",
            f"- **Lessons**: {', '.join(f'`{x}`' for x in c.lessons)}; {c.where}.",
            f"- **Before {c.library} {c.since}**: {c.before}.",
            f"- **Since {c.library} {c.since}**: {c.after}.",
            f"- **Kind**: {'a claim the lesson teaches' if c.kind == 'behaviour' else 'the wording of an error a lesson shows'}.",  # noqa: E501
            f"- **How the version was established**: {c.evidence}.",
            f"- **Observed**: {'; '.join(seen)}.",
        ]

    lines += [
        "",
        "## Drift: cells whose text output differs from the stored one",
        "",
        "Not failures: a repr, a warning or an error text that reads differently on that release. After the "
        "sanitize rules of `tests/sanitize.cfg`; cells tagged `nbval-ignore-output` are left out.",
        "",
    ]
    for r in columns:
        if r.get("carried"):
            lines.append(f"- {label(r)}: {r['drift']}.")
            continue
        drifted = [f"`{stem}` {_cells(n['drift'])}" for stem, n in r["notebooks"].items() if n["drift"]]
        lines.append(f"- {label(r)}: " + ("; ".join(drifted) if drifted else "none") + ".")
    out.write_text("\n".join(lines) + "\n")
    print(f"[compat] wrote {out}", flush=True)
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "run":
        rest = argv[2:]
        transformers_env = "--transformers-lessons" in rest
        rest = [a for a in rest if a != "--transformers-lessons"]
        paths = [Path(p).resolve() for p in rest] or sorted(NOTEBOOKS.glob("*.ipynb"))
        if transformers_env:
            paths = [p for p in paths if "transformers" in floors(p)]
        return run(Path(argv[1]), paths, transformers_env)
    if len(argv) >= 3 and argv[0] == "report":
        rest, pinned, carry = argv[2:], "", ()
        while rest and rest[0].startswith(("--pinned=", "--carry=")):
            option, value = rest.pop(0).split("=", 1)
            if option == "--pinned":
                pinned = value
            else:
                carry = tuple(v for v in value.split(",") if v)
        return report(Path(argv[1]), [Path(p) for p in rest], pinned, carry)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
