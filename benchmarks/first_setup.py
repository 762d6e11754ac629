#!/usr/bin/env python3
"""Time the first command's set-up from a fresh clone: `python3 course.py setup` with empty caches.

    python3 benchmarks/first_setup.py                      # pip, then uv if it is on PATH; once each
    python3 benchmarks/first_setup.py --installer pip --runs 2
    python3 benchmarks/first_setup.py --source https://github.com/hooktutor/hooktutor.git
    python3 benchmarks/first_setup.py --installer uv --runs 2 --cache-dir /media/usb/cache   # kept:
                                                   # the second run finds the cache the first filled

Each run clones ``--source`` (default: this checkout's committed HEAD) into a new temporary
folder, gives pip and uv new, empty cache folders (PIP_CACHE_DIR, UV_CACHE_DIR), and times
`python3 course.py setup` there with HOOKTUTOR_INSTALLER set. It prints one line per run:
the wall time; the bytes received over the network during the run (Linux: /proc/net/dev, every
interface but loopback, so traffic of other programs on the machine counts too); with pip, from
its ``--report``, the files it downloaded (their sizes asked of the server afterwards with HEAD
requests) and those it read from local disk (``file://``: a wheelhouse, a local index); uv has no
such report. Then the size of the cache and of the finished .venv.
The clone and the caches are deleted afterwards (``--keep`` keeps them). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from urllib.parse import unquote, urlparse
from urllib.request import Request, urlopen

ROOT = Path(__file__).resolve().parent.parent


def net_received() -> int | None:
    """Bytes received so far by every network interface except loopback (Linux), else None."""
    try:
        lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    except OSError:
        return None
    total = 0
    for line in lines:
        name, data = line.split(":", 1)
        if name.strip() != "lo":
            total += int(data.split()[0])
    return total


def du(path: Path) -> int:
    """Bytes of the files under ``path`` (links not followed; hard links counted once)."""
    seen, total = set(), 0
    for folder, _, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def remote_size(url: str) -> int:
    """The Content-Length of ``url`` (a HEAD request: nothing is downloaded); 0 if unknown."""
    try:
        with urlopen(Request(url, method="HEAD"), timeout=60) as response:
            return int(response.headers.get("Content-Length") or 0)
    except (OSError, ValueError):
        return 0


def report_bytes(report: Path) -> dict[str, int]:
    """From pip's install report: the bytes and number of the files pip read from file:// URLs
    and of those it downloaded (their sizes asked of the server afterwards)."""
    found = {"local_file_bytes": 0, "files_local": 0, "download_bytes": 0, "files_network": 0}
    if not report.exists():
        return found
    for item in json.loads(report.read_text()).get("install", []):
        url = item.get("download_info", {}).get("url", "")
        if item.get("is_direct"):  # the checkout itself (-e .)
            continue
        if url.startswith("file://"):
            path = Path(unquote(urlparse(url).path))
            found["local_file_bytes"] += path.stat().st_size if path.is_file() else 0
            found["files_local"] += 1
        else:
            found["download_bytes"] += remote_size(url)
            found["files_network"] += 1
    return found


def one_run(source: str, installer: str, keep: bool, cache: Path | None = None) -> dict:
    work = Path(tempfile.mkdtemp(prefix="hooktutor-first-setup-"))
    clone = work / "hooktutor"
    subprocess.run(["git", "clone", "-q", source, str(clone)], check=True)
    cache = cache or work
    env = dict(os.environ, PIP_CACHE_DIR=str(cache / "pip-cache"), UV_CACHE_DIR=str(cache / "uv-cache"),
               HOOKTUTOR_INSTALLER=installer)
    env.pop("HOOKTUTOR_VENV", None)
    report = work / "pip-report.json"
    if installer == "pip":
        env["PIP_REPORT"] = str(report)  # pip reads every option from PIP_<NAME>
    before, start = net_received(), time.perf_counter()
    code = subprocess.call([sys.executable, "course.py", "setup"], cwd=clone, env=env)
    seconds = time.perf_counter() - start
    after = net_received()
    result = {
        "installer": installer, "exit": code, "seconds": round(seconds, 1),
        "network_bytes": None if before is None else after - before,
        **(report_bytes(report) if installer == "pip" else {}),
        "cache_bytes": du(cache / ("pip-cache" if installer == "pip" else "uv-cache")),
        "venv_bytes": du(clone / ".venv"),
    }
    if keep:
        result["kept"] = str(work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return result


def mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.0f} MB"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--installer", action="append", choices=["pip", "uv"],
                        help="repeat to measure both (default: pip, and uv if found)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--source", default=str(ROOT), help="what to clone (default: this checkout)")
    parser.add_argument("--keep", action="store_true", help="keep the clone and the caches")
    parser.add_argument("--cache-dir", type=Path, help="the caches' folder, kept (default: a new one per run)")
    args = parser.parse_args(argv)
    installers = args.installer or ["pip", *(["uv"] if shutil.which("uv") else [])]
    caches = f"caches in {args.cache_dir}" if args.cache_dir else "empty caches"
    print(f"{date.today()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"`python3 course.py setup` from a fresh clone of {args.source}, {caches}", flush=True)
    failed = False
    for installer in installers:
        for _ in range(args.runs):
            r = one_run(args.source, installer, args.keep, args.cache_dir)
            failed |= r["exit"] != 0
            local = "" if "files_local" not in r else (
                f" (pip's report: {r['files_network']} files downloaded, {mb(r['download_bytes'])}; "
                f"{r['files_local']} read from local disk, {mb(r['local_file_bytes'])})")
            print(f"{installer}: {r['seconds']:.0f} s, network received {mb(r['network_bytes'])}{local}, "
                  f"cache {mb(r['cache_bytes'])}, .venv {mb(r['venv_bytes'])}, exit {r['exit']}", flush=True)
            print(json.dumps(r), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
