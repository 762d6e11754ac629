"""The course's website (`python3 course.py site`, hooktutor/course/site.py) in headless Chromium.

Built once per session into a temporary folder, offline, and served by ``python -m http.server``
on 127.0.0.1: every page at 1366x768 loads with no console error and no failed request (a CDN
script, a missing picture or font would be one), every internal link and anchor leads somewhere
that exists, each widget's static pictures are on its page, and Sphinx's search finds a hook API
by name. Each lesson has its launch buttons (Colab, Binder, the learner's notebook to download,
the source), no solution marker, pictures with alt text that describes them, outputs that wrap
instead of scrolling sideways, and no two identical pictures in one widget's fallback; the
landing page says what the course teaches, for whom, where to start, and maps every lesson.
The site's copies of the lessons: tests/test_site_source.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from .conftest import ROOT, WAIT_MS, free_port, unavailable

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1366, "height": 768}
SEARCHED = "register_full_backward_hook"  # a hook API the lessons teach (04)


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The built site's folder (the command the README names, into a temporary folder)."""
    from hooktutor.course.site import sphinx_missing

    why = sphinx_missing()
    if why:
        unavailable(why)
    out = tmp_path_factory.mktemp("site") / "site"
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "hooktutor", "site", "--out", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"the site did not build:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    print(f"site built in {time.monotonic() - start:.1f} s")
    return out


@pytest.fixture(scope="session")
def served(site):
    """``http://127.0.0.1:PORT`` serving the site."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(site)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/index.html", timeout=2).close()
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("python -m http.server did not serve the site within 60 s", pytrace=False)
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def editions_of(root: Path) -> list[str]:
    from hooktutor.course.site import editions

    return editions(root)


def ids_in(path: Path) -> set[str]:
    return set(re.findall(r'\sid="([^"]+)"', path.read_text(encoding="utf-8")))


LINKS = """() => [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))"""
BROKEN_IMAGES = """() => [...document.querySelectorAll('img')]
    .filter(img => !(img.complete && img.naturalWidth > 0)).map(img => img.getAttribute('src'))"""


def test_every_page_loads_clean_and_every_internal_link_exists(site, served, browser):
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if "_static" not in p.parts)
    lessons = [p for p in pages if re.match(r"(?:[a-z]{2}_[A-Z]{2}/)?\d\d_", p)]
    editions = editions_of(ROOT)
    assert len(lessons) == len(editions) * len(list((ROOT / "notebooks").glob("*.ipynb")))
    assert {f"{lang}/index.html" if lang != "en" else "index.html" for lang in editions} <= set(pages)
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: m.type in ("error", "warning") and problems.append(f"console {m.type}: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    # net::ERR_ABORTED: a request the browser itself cancelled when the test went on to the next
    # page (the favicon, fetched after "load"); a missing file answers 404 (the response handler)
    page.on("requestfailed", lambda r: "ERR_ABORTED" not in (r.failure or "")
            and problems.append(f"failed request: {r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))
    ids: dict[str, set[str]] = {}
    try:
        for name in pages:
            page.goto(f"{served}/{name}", wait_until="load")
            assert not page.evaluate(BROKEN_IMAGES), f"{name}: pictures that did not load"
            for href in page.evaluate(LINKS):
                parsed = urllib.parse.urlparse(href)
                if parsed.scheme or href.startswith(("mailto:", "//")):
                    continue  # external: not this site's
                target = (site / name).parent / urllib.parse.unquote(parsed.path) if parsed.path else site / name
                target = target.resolve()
                if target.is_dir():
                    target = target / "index.html"
                assert target.is_file(), f"{name}: the link {href!r} leads nowhere"
                if parsed.fragment and target.suffix == ".html":
                    known = ids.setdefault(str(target), ids_in(target))
                    assert parsed.fragment in known, f"{name}: the link {href!r}: no #{parsed.fragment} on its page"
            if name in lessons:
                toc = page.locator(".bd-sidebar-secondary .toc-entry a")
                assert toc.count() >= 3, f"{name}: no table of contents beside the lesson"
                problems.extend(f"{name}: {p}" for p in lesson_page_problems(page, name, site))
            assert not problems, f"{name}:\n" + "\n".join(problems)
    finally:
        context.close()


SIDEWAYS = """() => [...document.querySelectorAll('div.cell_output pre, div.output pre')]
    .filter(pre => pre.scrollWidth > pre.clientWidth + 1).map(pre => pre.textContent.slice(0, 80))"""
IMAGES = """() => [...document.querySelectorAll('article img')].map(img => [img.getAttribute('alt') || '',
    img.getAttribute('src'), img.closest('.hooktutor-fallback') ? 'fallback' : 'figure'])"""


def lesson_page_problems(page, name: str, site: Path) -> list[str]:
    """What a lesson page lacks: its four launch buttons, alt texts, wrapped outputs, ..."""
    from hooktutor.course import links
    from hooktutor.course.site_text import LANGUAGE_NAMES, launch_labels
    from hooktutor.i18n import set_language

    lang, _, stem = name.removesuffix(".html").rpartition("/")
    lang = lang or "en"
    edition = None if lang == "en" else lang
    home = links.home(ROOT)
    found = []
    buttons = {a.inner_text().strip(): a.get_attribute("href")
               for a in page.locator(".hooktutor-launch a.hooktutor-button").all()}
    set_language(lang)
    try:
        labels = launch_labels()
    finally:
        set_language("en")
    folder = "notebooks" if edition is None else f"notebooks/{edition}"
    want = {labels["colab"]: links.colab_url(home, f"{stem}.ipynb", edition),
            labels["binder"]: links.binder_url(home, f"{stem}.ipynb", edition),
            labels["download"]: f"_static/notebooks/{stem}.ipynb",
            labels["source"]: f"{home}/blob/{links.BRANCH}/{folder}/{stem}.ipynb"}
    for other in editions_of(ROOT):   # the language switch: the same page in each other edition
        if other != lang:
            want[LANGUAGE_NAMES[other]] = ("" if lang == "en" else "../") + (
                f"{stem}.html" if other == "en" else f"{other}/{stem}.html")
    if buttons != want:
        found.append(f"launch buttons {buttons}, expected {want}")
    if "BEGIN SOLUTION" in page.content() or "END SOLUTION" in page.content():
        found.append("a solution marker is shown")
    for alt, src, where in page.evaluate(IMAGES):
        if len(alt.split()) < 3 or alt.endswith(".png") or "/" in alt:
            found.append(f"a {where} picture {src} has no alt text that says what it shows: {alt!r}")
    fallbacks = page.locator(".hooktutor-fallback")
    for k in range(fallbacks.count()):
        srcs = [img.get_attribute("src") for img in fallbacks.nth(k).locator("img").all()]
        digests = [hashlib.sha256((site / src).read_bytes()).hexdigest() for src in srcs]
        if len(set(digests)) != len(digests):
            found.append(f"a widget's fallback shows the same picture twice: {srcs}")
    sideways = page.evaluate(SIDEWAYS)
    if sideways:
        found.append(f"outputs that scroll sideways at {VIEWPORT['width']}px: {sideways[:3]}")
    return found


def test_the_landing_page_orients_and_the_download_is_the_learners_notebook(site, served, browser):
    import json

    from hooktutor.course.site_source import lesson_table

    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    try:
        page.goto(f"{served}/index.html")
        for heading in ("What you will learn", "Who it is for", "Where to start", "The lessons"):
            assert page.get_by_role("heading", name=heading).count() == 1, heading
        text = page.locator("article").inner_text()
        assert "The core course" in text and "The advanced track" in text
        for lesson in lesson_table((ROOT / "README.md").read_text(encoding="utf-8")):
            row = page.locator("article tr", has=page.locator(f'a[href="{lesson.stem}.html"]'))
            assert row.count() == 1 and lesson.level in row.inner_text() and lesson.time in row.inner_text(), \
                lesson.stem
        assert page.locator('.hooktutor-launch a[href="00_start_here.html"]').count() == 1
        with urllib.request.urlopen(f"{served}/_static/notebooks/01_tensor_hooks.ipynb", timeout=120) as resp:
            nb = json.loads(resp.read().decode("utf-8"))
        answers = [c for c in nb["cells"] if "solution" in c["metadata"].get("tags", [])]
        assert answers and all("raise NotImplementedError" in "".join(c["source"]) for c in answers)
    finally:
        context.close()


def test_solutions_are_folded_and_widgets_pictured(site, served, browser):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    try:
        page.goto(f"{served}/01_tensor_hooks.html")
        solution = page.locator("details", has_text="Show the solution").first
        assert solution.get_attribute("open") is None, "a solution is folded"
        hints = page.locator("details.hooktutor-hints").first
        assert hints.get_attribute("open") is None and "Hint 1" in hints.inner_html()
        fallback = page.locator(".hooktutor-fallback")
        assert fallback.count() == 1 and "python3 course.py lab" in fallback.inner_text()
        assert fallback.locator("img").count() == 2, "the toggle's view unticked and ticked"
        assert page.locator(".hooktutor-check").count() >= 4, "the checks' reports are shown as stored"
        assert page.get_by_text("Verdict: only when").first.is_visible()
    finally:
        context.close()


def test_search_finds_a_hook_api(served, browser):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    try:
        page.goto(f"{served}/search.html?q={SEARCHED}")
        results = page.locator("#search-results ul.search li")
        results.first.wait_for(timeout=WAIT_MS)
        hrefs = [a.get_attribute("href") for a in page.locator("#search-results ul.search li a").all()]
        assert any(h and h.startswith("04_backward_hooks.html") for h in hrefs), hrefs
    finally:
        context.close()


def test_the_chinese_edition_speaks_chinese_and_switches_back(site, served, browser):
    """The Chinese site (zh_CN/): its landing page and lessons in Chinese (headings, hints, the
    solution's fold, a widget's pictures with the command that runs it in Chinese), each page
    linking to the same page in English and back, and its search finding a hook API."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    try:
        page.goto(f"{served}/zh_CN/index.html")
        assert page.locator("html").get_attribute("lang") == "zh-CN"
        for heading in ("你会学到什么", "适合谁", "从哪里开始", "课程列表"):
            assert page.get_by_role("heading", name=heading).count() == 1, heading
        assert page.locator('.hooktutor-launch a[hreflang="en"]').get_attribute("href") == "../index.html"
        page.goto(f"{served}/zh_CN/01_tensor_hooks.html")
        assert page.locator("h1").first.inner_text().startswith("01")
        assert page.locator("details", has_text="显示答案").first.get_attribute("open") is None
        hints = page.locator("details.hooktutor-hints").first
        assert "的提示" in hints.inner_text() and "提示 1" in hints.inner_html()
        fallback = page.locator(".hooktutor-fallback")
        assert fallback.count() == 1 and "python3 course.py lab --lang zh_CN" in fallback.inner_text()
        page.locator('.hooktutor-launch a[hreflang="en"]').click()
        page.wait_for_url(f"{served}/01_tensor_hooks.html")
        page.locator('.hooktutor-launch a[hreflang="zh-CN"]').click()
        page.wait_for_url(f"{served}/zh_CN/01_tensor_hooks.html")
        page.goto(f"{served}/zh_CN/search.html?q={SEARCHED}")
        page.locator("#search-results ul.search li").first.wait_for(timeout=WAIT_MS)
        hrefs = [a.get_attribute("href") for a in page.locator("#search-results ul.search li a").all()]
        assert any(h and h.startswith("04_backward_hooks.html") for h in hrefs), hrefs
    finally:
        context.close()
