#!/usr/bin/env python3
"""Measure what hooks and the course cost, in one command: ``make bench``.

    python benchmarks/run.py            # full run: writes benchmarks/results/latest.{md,png,json}
    python benchmarks/run.py --suite    # ... and also times the whole test suite (slow)
    python benchmarks/run.py --quick    # a short run for development; prints, writes nothing
    python benchmarks/run.py --only hooks,import   # some parts only (hooks, import, notebooks, widget, checks)

Started by a Python without torch (a fresh clone), it sets up the course environment the
way ``course.py`` does and runs itself there. Every comparison is a ratio taken inside this
run: configurations interleaved round-robin, medians over rounds, one torch thread.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PARTS = ("hooks", "import", "notebooks", "widget", "checks")
DEFAULT_OUT = HERE / "results" / "latest"
README_START, README_END = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"


def ensure_environment() -> None:
    """Re-run this script in the course environment when this Python lacks the course."""
    try:
        import nbclient  # noqa: F401
        import torch  # noqa: F401

        import hooktutor  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("HOOKTUTOR_BENCH_REEXEC"):
        sys.exit("benchmarks: torch, hooktutor or nbclient is missing even in the course "
                 "environment; run `python3 course.py doctor` to see what to fix")
    sys.path.insert(0, str(ROOT))
    import course

    python = course.ensure_env()
    env = {**os.environ, "HOOKTUTOR_BENCH_REEXEC": "1"}
    sys.exit(subprocess.call([str(python), str(Path(__file__).resolve()), *sys.argv[1:]], env=env))


def say(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def widget_latency(python: str, quick: bool) -> dict:
    """Run benchmarks/widget_latency.py (written with the widgets) if it is there."""
    import re

    from _common import run_timed

    script = HERE / "widget_latency.py"
    if not script.exists():
        return {"ms": None, "note": "benchmarks/widget_latency.py does not exist yet; not measured."}
    cmd = [python, str(script)] + (["--quick"] if quick else [])
    _, _, proc = run_timed(cmd, cwd=ROOT, timeout=900, env={"MPLBACKEND": "Agg"})
    if proc.returncode != 0 and quick:  # the script may not know --quick
        _, _, proc = run_timed(cmd[:2], cwd=ROOT, timeout=900, env={"MPLBACKEND": "Agg"})
    lines = [ln.rstrip() for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0:
        return {"ms": None, "lines": lines[-15:] + proc.stderr.strip().splitlines()[-10:],
                "note": f"widget_latency.py failed (exit code {proc.returncode})."}
    found: dict = {"ms": None, "lines": [ln for ln in lines if not ln.lstrip().startswith("{")][-20:]}
    for line in reversed(lines):  # a JSON line wins: {"median_ms": ...} or similar
        if line.lstrip().startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            keys = [k for k in data if isinstance(data[k], (int, float)) and "ms" in k]
            key = next((k for k in keys if "median" in k), keys[0] if keys else None)
            if key is not None:
                found.update(ms=float(data[key]), what=key, data=data)
                return found
    for line in lines:  # else the first "... median ... 12.3 ms" line
        hit = re.search(r"median.*?(\d+(?:\.\d+)?)\s*ms", line, re.IGNORECASE)
        if hit:
            label = line[:hit.start()].strip() or "median"
            found.update(ms=float(hit.group(1)), what=f"median, slowest widget: {label}")
            return found
    found["note"] = "widget_latency.py printed no median in ms; its output is shown above."
    return found


def readme_block(table: str) -> str:
    """The table for a README: without its title, each heading one level deeper."""
    lines = table.strip().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join("#" + ln if ln.startswith("#") else ln for ln in lines).strip()


def update_readme(path: Path, table: str) -> bool:
    """Replace the text between the benchmark markers of ``path``, if it has them."""
    if not path.exists():
        return False
    text = path.read_text(encoding="utf-8")
    if README_START not in text or README_END not in text:
        return False
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    path.write_text(f"{head}{README_START}\n{table.strip()}\n{README_END}{tail}", encoding="utf-8")
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few rounds; print only (see --write)")
    parser.add_argument("--suite", action="store_true",
                        help="also time the test suite as `python3 course.py test` runs it")
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts of {PARTS}")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="hook overhead in process CPU time (default) or wall time")
    parser.add_argument("--write", action="store_true", help="write results even with --quick")
    parser.add_argument("--out", default=str(DEFAULT_OUT),
                        help="where to write .md, .png and .json (without the suffix)")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")

    os.environ.setdefault("MPLBACKEND", "Agg")
    import check_times
    import hook_overhead
    import import_time
    import notebook_times
    import report
    import torch
    from _common import load_average, machine

    torch.set_num_threads(1)
    python = sys.executable
    results: dict = {"machine": machine(), "quick": args.quick,
                     "command": " ".join(["python benchmarks/run.py", *argv])}
    if "hooks" in parts:
        results["hooks"] = hook_overhead.measure(rounds=15 if args.quick else 101,
                                                 target_s=0.002, clock=args.clock, progress=say)
    if "import" in parts:
        say("import time")
        results["import"] = import_time.measure(rounds=3 if args.quick else 21, python=python)
    if "notebooks" in parts:
        results["notebooks"] = notebook_times.measure(repeats=1 if args.quick else 3, python=python,
                                                      progress=say)
    if "widget" in parts:
        say("widget latency")
        results["widget"] = widget_latency(python, args.quick)
    if "checks" in parts:
        say("exercise checks and lesson 10's training")
        results["checks"] = check_times.measure(rounds=1 if args.quick else 3, progress=say)
    if args.suite:
        say("the whole test suite (pytest -n auto --dist loadfile --no-loadscope-reorder, as course.py test)")
        results["suite"] = notebook_times.measure_suite(python=python)
    results["machine"]["load_end"] = load_average()

    table = report.markdown(results)
    print(table)
    if args.quick and not args.write:
        say("quick run: nothing written (add --write to keep it)")
        return 0
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(table, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    report.plot(results, out.with_suffix(".png"))
    say(f"wrote {out.with_suffix('.md').relative_to(ROOT) if out.is_relative_to(ROOT) else out}"
        " (.md, .png, .json)")
    if args.quick or out != DEFAULT_OUT:
        return 0  # only a full run to the usual place is "the latest results"
    for readme in (HERE / "README.md", ROOT / "README.md"):
        if update_readme(readme, readme_block(table)):
            say(f"updated the table in {readme.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    ensure_environment()
    sys.path.insert(0, str(HERE))
    sys.exit(main(sys.argv[1:]))
