"""Notebook outputs compared the way nbval compares them: text only, after the sanitize file
(tests/sanitize.cfg). Used by the tests that run a notebook outside nbval and hold its outputs to
the stored ones (browser/test_learner_hour.py; nbval compares its own way)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT_TYPES = ("text/plain", "text/html", "text/latex", "text/markdown")


def sanitizers() -> list[tuple[re.Pattern, str]]:
    text = (ROOT / "tests" / "sanitize.cfg").read_text()
    return [(re.compile(r), s) for r, s in re.findall(r"^regex: (.*)$\n^replace: (.*)$", text, flags=re.M)]


def comparable(outputs: list, subs: list[tuple[re.Pattern, str]]) -> list[str]:
    out = []
    last_stream = None  # the kernel may split one print into several chunks; join them as nbval does
    for o in outputs:
        if o["output_type"] == "stream" and last_stream == o["name"]:
            out[-1] += o["text"]
            continue
        last_stream = o["name"] if o["output_type"] == "stream" else None
        if o["output_type"] == "stream":
            out.append(f"{o['name']}: {o['text']}")
        elif o["output_type"] == "error":
            out.append(f"error: {o['ename']}: {o['evalue']}")
        else:
            for mime in TEXT_TYPES:
                if mime in o.get("data", {}):
                    out.append(f"{mime}: {o['data'][mime]}")
    text = "\n".join(out)
    for pattern, replacement in subs:
        text = pattern.sub(replacement, text)
    return text.splitlines()
