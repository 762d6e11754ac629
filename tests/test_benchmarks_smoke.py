"""The benchmark code runs, on tiny sizes, and compares like with like (no timing is asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import hooktutor as ht

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import check_times  # noqa: E402
import hook_overhead  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402


@pytest.mark.parametrize("model_name", ["MLP", "CNN", "deep MLP (24 Linear)"])
def test_hand_written_recorder_does_the_same_work_as_capture(model_name):
    model, x = hook_overhead.benchmark_models(small=True)[model_name]
    with ht.capture(model, grads=True) as rec:
        model(x).sum().backward()
    outputs, grads = hook_overhead.record_by_hand(model, lambda: model(x).sum().backward())
    assert list(outputs) == rec.names
    for name in rec.names:
        assert len(outputs[name]) == rec.n_calls(name) == 1
        assert torch.equal(outputs[name][0], rec[name])
        assert torch.equal(grads[name][0], rec.grads[name])
    assert len(ht.list_hooks(model)) == 0


@pytest.mark.parametrize("model_name", ["MLP", "CNN"])
def test_no_hook_alternatives_return_what_capture_records(model_name):
    model, x = hook_overhead.benchmark_models(small=True)[model_name]
    with ht.capture(model) as rec:
        expected = model(x)
    for out, inter in (hook_overhead.forward_returning(model, x),
                       hook_overhead.forward_returning(model, x, clone=True),
                       hook_overhead.fx_extractor(model)(x)):
        assert torch.allclose(out, expected)
        assert sorted(inter) == sorted(rec.names)
        for name in rec.names:
            assert torch.allclose(inter[name], rec[name])


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_every_step_runs_and_leaves_no_hook():
    model, x = hook_overhead.benchmark_models(small=True)["CNN"]
    for mode in hook_overhead.MODES:
        steps, _ = hook_overhead.make_steps(model, x, mode)
        assert set(steps) == set(hook_overhead.CONFIGS)
        for step in steps.values():
            step()
        assert len(ht.list_hooks(model)) == 0


def test_tiny_run_makes_the_table_and_the_plot(tmp_path):
    hooks = hook_overhead.measure(rounds=2, target_s=1e-4, small=True)
    results = {
        "machine": {"cpu": "test CPU", "cores": "2", "os": "os", "python": "3", "torch": torch.__version__,
                    "date": "today", "load": "0", "load_end": "0"},
        "command": "python benchmarks/run.py --quick",
        "hooks": hooks,
        "import": {"rounds": 1, "torch_ms": 1000.0, "both_ms": 1020.0, "added_ms": 20.0,
                   "added_cpu_ms": 18.0, "inside_ms": 15.0, "heavy": []},
        "notebooks": {"00_start_here.ipynb": {"seconds": 3.0, "cells_s": 1.0, "limit_s": 10.0, "repeats": 1}},
        "widget": {"ms": None, "note": "not measured"},
        "checks": check_times.measure(rounds=1, keys=["start_here.count_calls"]),
    }
    table = report.markdown(results)
    for config in hook_overhead.CONFIGS[1:]:
        assert hook_overhead.LABELS[config] in table
    assert "capture ÷ hand-written recorder" in table
    assert "test CPU, 2 cores" in table
    verdicts = {goal.split()[0]: flag for goal, _, flag in report.goals(results)}
    assert verdicts["`import"] is True and verdicts["widget"] is None
    assert verdicts["every"] is True  # the notebooks' goal (the checks' verdict depends on this machine's load)
    assert "| start_here.count_calls |" in table and "each exercise check under 1 s" in table
    report.plot(results, tmp_path / "latest.png")
    assert (tmp_path / "latest.png").read_bytes()[:4] == b"\x89PNG"


def test_readme_table_is_replaced_only_between_the_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{run.README_START}\nold\n{run.README_END}\noutro\n")
    assert run.update_readme(readme, "| new |")
    assert readme.read_text() == f"intro\n{run.README_START}\n| new |\n{run.README_END}\noutro\n"
    plain = tmp_path / "OTHER.md"
    plain.write_text("no markers\n")
    assert not run.update_readme(plain, "| new |")
    assert plain.read_text() == "no markers\n"


def test_readme_block_drops_the_title_and_demotes_headings():
    block = run.readme_block("# Title\n\nTaken on X.\n\n## Goals\n\n| a |\n")
    assert block == "Taken on X.\n\n### Goals\n\n| a |"
