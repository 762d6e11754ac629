"""Turn the measurements of one run into the markdown table and the plot."""

from __future__ import annotations

from pathlib import Path

try:
    from .hook_overhead import CONFIGS, LABELS, MODES
except ImportError:  # run as a script from benchmarks/
    from hook_overhead import CONFIGS, LABELS, MODES

CAPTURE_GOAL = 1.05
IMPORT_GOAL_MS = 150.0
WIDGET_GOAL_MS = 100.0


def _x(v: float) -> str:
    return f"{v:.2f}×"


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f} ms"


def _ok(flag: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[flag]


def goals(results: dict) -> list[tuple[str, str, bool | None]]:
    """``(goal, what was measured, met?)`` for each goal of the issue."""
    rows: list[tuple[str, str, bool | None]] = []
    hooks = results.get("hooks")
    if hooks:
        worst = max(((e[mode]["capture_vs_recorder"], name, mode)
                     for name, e in hooks["models"].items() for mode in MODES))
        every = ", ".join(f"{name} {mode} {_x(e[mode]['capture_vs_recorder'])}"
                          for name, e in hooks["models"].items() for mode in MODES)
        rows.append((f"`capture(grads=True)` at most {CAPTURE_GOAL:.2f}× a hand-written recorder "
                     "doing the same work, on every model",
                     f"worst {_x(worst[0])} ({worst[1]}, {worst[2]}); {every}",
                     worst[0] <= CAPTURE_GOAL))
    else:
        rows.append(("`capture` at most 1.05× a hand-written recorder", "", None))
    imp = results.get("import")
    if imp:
        heavy = ", ".join(imp["heavy"]) or "none"
        cpu = "" if imp["added_cpu_ms"] is None else f", CPU time {imp['added_cpu_ms']:+.0f} ms"
        rows.append((f"`import hooktutor` adds under {IMPORT_GOAL_MS:.0f} ms to `import torch`; "
                     "matplotlib and ipywidgets load only when used",
                     f"{imp['added_ms']:+.0f} ms as whole processes{cpu}; "
                     f"{imp['inside_ms']:.0f} ms timed inside the process; heavy modules "
                     f"loaded: {heavy}",
                     imp["added_ms"] < IMPORT_GOAL_MS and not {"matplotlib", "ipywidgets"} & set(imp["heavy"])))
    else:
        rows.append((f"`import hooktutor` adds under {IMPORT_GOAL_MS:.0f} ms", "", None))
    nbs = results.get("notebooks")
    if nbs:
        slow = [f"{n} {d['seconds']:.1f} s (limit {d['limit_s']:.0f} s)" for n, d in nbs.items()
                if d["seconds"] >= d["limit_s"]]
        worst = max(nbs.items(), key=lambda kv: kv[1]["seconds"] / kv[1]["limit_s"])
        rows.append(("every notebook executes in under 10 s, the capstone under 30 s",
                     (f"over the limit: {'; '.join(slow)}" if slow else
                      f"closest to its limit: {worst[0]} {worst[1]['seconds']:.1f} s "
                      f"of {worst[1]['limit_s']:.0f} s"),
                     not slow))
    else:
        rows.append(("every notebook under 10 s, the capstone under 30 s", "", None))
    widget = results.get("widget")
    if widget and widget.get("ms") is not None:
        rows.append((f"widget toggle-to-update under {WIDGET_GOAL_MS:.0f} ms",
                     f"{widget['ms']:.0f} ms ({widget.get('what', 'median')})",
                     widget["ms"] < WIDGET_GOAL_MS))
    else:
        why = (widget or {}).get("note", "benchmarks/widget_latency.py was not run")
        rows.append((f"widget toggle-to-update under {WIDGET_GOAL_MS:.0f} ms", why, None))
    checks = results.get("checks")
    if checks:
        slow = [f"{n} {d['ms'] / 1000:.2f} s (budget {d['budget_s']:g} s)" for n, d in checks["jobs"].items()
                if d["ms"] >= d["budget_s"] * 1000]
        worst = max(checks["jobs"].items(), key=lambda kv: kv[1]["ms"] / kv[1]["budget_s"])
        rows.append(("each exercise check under 1 s on its solution (5 s for one that starts processes or "
                     "compiles), lesson 10's training under 3 s",
                     (f"over budget: {'; '.join(slow)}" if slow else
                      f"closest to its budget: {worst[0]} {worst[1]['ms'] / 1000:.2f} s of {worst[1]['budget_s']:g} s "
                      f"({worst[1]['ratio']:.0f} units)"),
                     not slow))
    else:
        rows.append(("each exercise check under its budget", "", None))
    return rows


def markdown(results: dict) -> str:
    m = results["machine"]
    out = ["# Benchmarks: what hooks and the course cost", ""]
    out.append(f"Taken on **{m['cpu']}, {m['cores']} cores** ({m['os']}), Python {m['python']}, "
               f"torch {m['torch']}, {m['date']}; load average (1, 5, 15 min) {m['load']} at the start, "
               f"{m.get('load_end', 'n/a')} at the end. Command: `{results['command']}`.")
    out += ["", "## Goals", "", "| goal | measured in this run | verdict |", "|---|---|---|"]
    for goal, measured, flag in goals(results):
        out.append(f"| {goal} | {measured} | {_ok(flag)} |")

    hooks = results.get("hooks")
    if hooks:
        models = list(hooks["models"])
        out += ["", "## Hook overhead per step", "",
                "One step = attach the hooks, `model(x)` (**fwd**, grad enabled) or "
                "`model(x).sum().backward()` (**fwd+bwd**), remove the hooks. Ratios to the same "
                f"step without hooks, median over {hooks['rounds']} interleaved rounds of paired "
                f"samples, one thread, {hooks['clock']} time. Models: the course's MLP (5 leaves) "
                "and SmallCNN (8 leaves), batch 64 and 16; `deep_mlp(24)` (49 leaves), batch 64.",
                ""]
        head = "| configuration | " + " | ".join(f"{n} {mode}" for n in models for mode in MODES) + " |"
        out += [head, "|---" * (1 + 2 * len(models)) + "|"]
        out.append("| no hooks: µs per step | " + " | ".join(
            f"{hooks['models'][n][mode]['us']['none']:.0f} µs" for n in models for mode in MODES) + " |")
        for c in CONFIGS[1:]:
            out.append(f"| {LABELS[c]} | " + " | ".join(
                _x(hooks["models"][n][mode]["ratio"][c]) for n in models for mode in MODES) + " |")
        out.append("| **capture ÷ hand-written recorder** | " + " | ".join(
            f"**{_x(hooks['models'][n][mode]['capture_vs_recorder'])}**" for n in models for mode in MODES)
            + " |")
        out += ["", "### Gradients: full backward hooks versus tensor hooks", "",
                "| model | no-op hooks, fwd | no-op hooks, fwd+bwd | recorders, fwd | recorders, fwd+bwd |",
                "|---|---|---|---|---|"]
        for n in models:
            e = hooks["models"][n]
            out.append(f"| {n} | {_x(e['fwd']['full_bwd_vs_tensor_noop'])} | "
                       f"{_x(e['fwd+bwd']['full_bwd_vs_tensor_noop'])} | "
                       f"{_x(e['fwd']['full_bwd_vs_tensor_recorder'])} | "
                       f"{_x(e['fwd+bwd']['full_bwd_vs_tensor_recorder'])} |")
        out += ["", "Each cell: step time with full backward hooks ÷ step time with tensor hooks "
                "doing the same. torch.fx tracing, paid once per model before the first step: "
                + ", ".join(f"{n} {hooks['models'][n]['fx_trace_ms']:.1f} ms" for n in models) + "."]

    imp = results.get("import")
    if imp:
        out += ["", "## Import time", "", "| process | median wall time |", "|---|---|",
                f"| `python -c \"import torch\"` | {_ms(imp['torch_ms'])} |",
                f"| `python -c \"import torch, hooktutor\"` | {_ms(imp['both_ms'])} |",
                f"| difference, paired per round ({imp['rounds']} rounds) | {imp['added_ms']:+.0f} ms |",
                f"| `import hooktutor` timed inside a process that already imported torch | "
                f"{_ms(imp['inside_ms'])} |"]

    nbs = results.get("notebooks")
    if nbs:
        reps = next(iter(nbs.values()))["repeats"]
        out += ["", "## Notebooks", "",
                "Wall time of a fresh process executing the notebook in memory (kernel start "
                f"included), median of {reps} run(s).", "",
                "| notebook | seconds | of which cells | limit |", "|---|---|---|---|"]
        for name, d in nbs.items():
            out.append(f"| {name} | {d['seconds']:.1f} | {d['cells_s']:.1f} | {d['limit_s']:.0f} |")
    suite = results.get("suite")
    if suite:
        out += ["", "## Test suite", "",
                f"`pytest -n auto --dist loadfile --no-loadscope-reorder` (what `python3 course.py test` runs): "
                f"{suite['seconds']:.0f} s wall time ({suite['summary']})."]
        if suite.get("failed"):
            shown = suite["failed"][:15]
            more = len(suite["failed"]) - len(shown)
            out += ["", "Failed in this run:", "", *(f"- `{t}`" for t in shown)]
            if more > 0:
                out.append(f"- ... and {more} more")
    checks = results.get("checks")
    if checks:
        out += ["", "## Exercise checks", "",
                "Each check on its solution (visible and hidden cases), and lesson 10's training (40 steps), "
                f"median of {checks['rounds']} interleaved round(s), wall time, one thread. **units**: the same "
                "time divided by one SGD step of SmallCNN on 16 images timed right before it "
                f"({checks['unit_ms']:.2f} ms in this run): a figure of the code, less of the machine's load.",
                "", "| check | ms | units | budget |", "|---|---|---|---|"]
        for name, d in sorted(checks["jobs"].items(), key=lambda kv: -kv[1]["ms"]):
            out.append(f"| {name} | {d['ms']:.0f} | {d['ratio']:.0f} | {d['budget_s']:g} s |")
    widget = results.get("widget")
    if widget:
        out += ["", "## Widget latency", ""]
        if widget.get("ms") is not None:
            out.append(f"Toggle to updated view: {widget['ms']:.0f} ms ({widget.get('what', 'median')}).")
        if widget.get("lines"):
            out += ["", "```text", *widget["lines"], "```"]
        if widget.get("note"):
            out.append(widget["note"])
    return "\n".join(out) + "\n"


def plot(results: dict, path: Path) -> None:
    """Bars of the hook overhead ratios and of the notebook times, saved as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hooks, nbs = results.get("hooks"), results.get("notebooks")
    panels = [mode for mode in MODES if hooks] + (["notebooks"] if nbs else [])
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels) + 2.4, 5.4), squeeze=False,
                             gridspec_kw={"width_ratios": [1.0] * len(panels)})
    hook_axes = []
    for ax, panel in zip(axes[0], panels):
        if panel in MODES:
            models = list(hooks["models"])
            configs = CONFIGS[1:]
            height = 0.8 / len(models)
            for i, n in enumerate(models):
                ratios = [hooks["models"][n][panel]["ratio"][c] for c in configs]
                ax.barh([k + i * height for k in range(len(configs))], ratios, height=height, label=n)
            ax.set_yticks([k + 0.4 - height / 2 for k in range(len(configs))])
            if hook_axes:
                ax.set_yticklabels([])
            else:
                labels = [LABELS[c].replace(" (", "\n(").replace(", grads", ",\ngrads") for c in configs]
                ax.set_yticklabels(labels, fontsize=7)
            hook_axes.append(ax)
            ax.invert_yaxis()
            ax.axvline(1.0, color="black", linewidth=0.8)
            ax.set_xlabel("step time ÷ no hooks")
            ax.set_title(f"hook overhead, {panel}")
            ax.legend(fontsize=7, loc="lower right")
        else:
            names = [n.removesuffix(".ipynb") for n in nbs]
            secs = [d["seconds"] for d in nbs.values()]
            colors = ["tab:red" if d["seconds"] >= d["limit_s"] else "tab:green" for d in nbs.values()]
            ax.barh(names, secs, color=colors)
            for k, d in enumerate(nbs.values()):
                ax.plot([d["limit_s"]] * 2, [k - 0.4, k + 0.4], color="black", linewidth=1.5)
            ax.invert_yaxis()
            ax.tick_params(axis="y", labelsize=7)
            ax.set_xlabel("seconds (black mark: limit)")
            ax.set_title("notebook execution")
    m = results["machine"]
    fig.suptitle(f"hooktutor benchmarks: {m['cpu']}, {m['cores']} cores, torch {m['torch']}, {m['date']}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
