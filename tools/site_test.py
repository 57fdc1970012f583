"""Build the website and check every page in a real, headless browser (`make test-site`).

    python -m tools.site_test [--no-build] [--no-self-checks]

1. Builds the site afresh with tools/build_site.py, failing on any Sphinx warning (broken
   cross-reference, missing image, unknown directive); prints its time and size.
2. Serves build/site/ from a local HTTP server and opens every page in the system's Chromium,
   headless, set up exactly as `make test-browser` sets it up (tools/browser_test.py: the same
   Chromium, flags and blocking of every request that leaves the machine). A page fails on

   - a message the browser logged as an error, or an uncaught exception;
   - a request that failed or was answered with an error, or any request for something
     outside this machine (everything must be served by the site itself: MathJax included);
   - an image that did not load;
   - a formula MathJax did not typeset (a math element with no typeset formula in it, an
     error node, an unknown command) or a ``$`` left in the prose (a formula not found);
   - a link within the site to a file that is not there, or to an anchor (``#...``) that its
     page does not have;
   - (accessibility) a serious or critical violation found by axe-core (pinned in
     tools/axe/, installed with npm into build/axe, injected into the page: no outside
     request), in light mode and again in dark mode (the rules colours decide);
   - headings out of order: not exactly one h1, or a level skipped (h2 then h4);
   - a figure that is not opaque (each image decoded in a canvas: a see-through figure
     vanishes on a dark background); a notebook's figure whose alt text does not say what
     it shows (tools/figure_alt.py) or repeats another's, any other image without one;
   - at phone width (390 px), a page that scrolls sideways (code blocks and tables scroll in
     their own box); its screenshot is saved in build/site-screenshots/.
3. Types words into the search page and requires a result from the right notebook (Sphinx's
   own search, an index in the site: it works offline); and requires that search shows no
   solution: a word only a solution uses (read from the stored notebooks, one per notebook
   that has one) does not find its page, and no result's snippet shows a solution's line
   (site/conf.py keeps the solution cells out of the index, site/_static/search-no-solutions.js
   out of the snippets).
4. Self-check (unless ``--no-self-checks``): a copy of the site with one page broken on
   purpose (a missing image, a dead anchor, a link to a missing page, an untypeset formula,
   an unknown command, an outside image, a console error, and for the accessibility checks
   faint text and code, skipped and doubled headings, a box wider than a phone, a
   see-through figure, a figure with no alt, a notebook's figure with a two-word alt), and
   for search the snippet script emptied and the solution-only words indexed; every fault
   must be reported, or the run fails.

Prints one line per page and every problem, then ``test-site: N passed, M failed``; exits 1
if anything failed, 2 if Chromium, Playwright or npm (for axe-core) is missing.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tools.figure_alt import alt_text_problem

if __package__:
    from tools import browser_test as bt
    from tools import build_site
else:  # python tools/site_test.py
    import browser_test as bt
    import build_site

SITE = build_site.SITE
ROOT = build_site.ROOT
NOTEBOOK_PAGES = sorted(
    f"notebooks/{p.stem}.html" for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
)
# A word typed into the search page, and the page that must be among its results.
SEARCHES = {
    "rotary": "notebooks/09_positions.html",
    "roofline": "notebooks/10_attention_at_scale.html",
}
STEP_TIMEOUT_MS = 30_000


def log(message: str) -> None:
    print(f"[test-site] {message}", flush=True)


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the test reports failed requests itself
        pass


class Server:
    """The site served from ``folder`` on a free local port (a context manager)."""

    def __init__(self, folder: Path):
        handler = functools.partial(QuietHandler, directory=str(folder))
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def __enter__(self) -> Server:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# Runs in the page once it has loaded: images, formulas and links.
PAGE_JS = r"""async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const images = [];
  for (const img of document.querySelectorAll('img')) {
    if (!img.complete || img.naturalWidth === 0) {
      img.scrollIntoView();
      const deadline = Date.now() + 10000;
      while (!img.complete && Date.now() < deadline) await new Promise(r => setTimeout(r, 100));
    }
    images.push({src: img.currentSrc || img.src, ok: img.complete && img.naturalWidth > 0});
  }
  const math = [...document.querySelectorAll('.math')];
  const mathErrors = [];
  for (const el of math) {
    if (!el.querySelector('mjx-container')) {
      mathErrors.push(`not typeset: ${el.textContent.trim().slice(0, 60)}`);
    }
  }
  for (const el of document.querySelectorAll('mjx-merror')) {
    mathErrors.push(`MathJax error: ${el.getAttribute('data-mjx-error')}`);
  }
  const unknown = 'mjx-assistive-mml mtext[mathcolor="red"]';
  const names = new Set([...document.querySelectorAll(unknown)].map(el => el.textContent));
  for (const name of names) mathErrors.push(`MathJax error: unknown command ${name}`);
  const article = document.querySelector('article') || document.body;
  const text = article.cloneNode(true);
  text.querySelectorAll('code, pre, script, style, mjx-container, .math')
    .forEach(el => el.remove());
  const at = text.textContent.indexOf('$');
  if (at >= 0) {
    const near = text.textContent.slice(Math.max(0, at - 30), at + 30).replace(/\s+/g, ' ');
    mathErrors.push(`a $ left in the text, not typeset: "${near}"`);
  }
  const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
  // What a notebook page must show, or hide, to a reader.
  const pres = [...article.querySelectorAll('pre')];
  const reader = {
    nbval: pres.filter(p => /^\s*# NBVAL_/m.test(p.textContent)).length,
    setupShown: pres.some(p => p.textContent.startsWith('# Set-up.') && p.checkVisibility()),
    prompts: article.querySelectorAll('.prompt, .input_prompt, .jp-InputPrompt').length,
    colab: /(Run|Open) in Colab/.test(article.textContent),  // not yet, or the link
    downloads: [...article.querySelectorAll('a[download]')].map(a => a.href),
    prevNext: [...document.querySelectorAll('.prev-next-area a')].map(a => a.href),
    sidebar: [...document.querySelectorAll('.bd-sidenav a')].map(a => a.href),
  };
  return {images, formulas: math.length, mathErrors, links, reader};
}"""


@dataclass
class PageCheck:
    path: str
    images: int = 0
    formulas: int = 0
    links: int = 0
    problems: list[str] = field(default_factory=list)


class Browser:
    """Headless Chromium as `make test-browser` drives it; every outside request aborted."""

    def __init__(self, chromium: str, profile: Path):
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self.context = self._playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=chromium,
            headless=True,
            args=bt.CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 900},
        )
        self.context.set_default_timeout(STEP_TIMEOUT_MS)
        self.context.route(bt.EXTERNAL, lambda route: route.abort())

    def close(self) -> None:
        self.context.close()
        self._playwright.stop()

    def check(self, server: Server, folder: Path, path: str) -> PageCheck:
        result = PageCheck(path)
        page = self.context.new_page()
        console, requests = [], []
        page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: console.append(f"uncaught {exc}"))
        page.on(
            "request",
            lambda r: (
                None
                if bt.is_local(r.url)
                else requests.append(f"request for an outside resource (blocked): {r.url}")
            ),
        )
        page.on(
            "requestfailed",
            lambda r: (
                requests.append(f"request failed: {r.url} ({r.failure})")
                if bt.is_local(r.url)
                else None
            ),
        )
        page.on(
            "response",
            lambda r: (
                requests.append(f"request answered {r.status}: {r.url}")
                if r.status >= 400
                else None
            ),
        )
        try:
            page.goto(server.base + path, wait_until="load")
            page.wait_for_load_state("networkidle")
            found = page.evaluate(PAGE_JS)
            page.wait_for_load_state("networkidle")  # fonts MathJax asked for
            result.problems += exercise_and_output_problems(page, path, folder)
            a11y_problems = accessibility(page, server.base, path, folder)
        except Exception as exc:  # noqa: BLE001 - any failure to load the page is reported
            result.problems.append(f"could not check the page: {str(exc).splitlines()[0]}")
            page.close()
            return result
        page.close()
        result.images = len(found["images"])
        result.formulas = found["formulas"]
        result.problems += [
            f"image did not load: {i['src']}" for i in found["images"] if not i["ok"]
        ]
        result.problems += found["mathErrors"]
        result.problems += [f"browser console error: {text}" for text in console]
        result.problems += requests
        internal = sorted({url for url in found["links"] if url.startswith(server.base)})
        result.links = len(internal)
        result.problems += dead_links(folder, server.base, path, internal)
        result.problems += reader_problems(path, found["reader"], server.base)
        result.problems += a11y_problems
        return result


@functools.cache
def anchors(file: Path) -> frozenset[str]:
    """The ids (and old-style names) a page's HTML defines."""
    html = file.read_text(errors="replace")
    return frozenset(re.findall(r'\s(?:id|name)="([^"]+)"', html))


def dead_links(folder: Path, base: str, page: str, urls: list[str]) -> list[str]:
    """Links to a file of the site that is not there, or to an anchor its page lacks."""
    problems = []
    for url in urls:
        parts = urlsplit(url)
        target = folder / unquote(parts.path).lstrip("/")
        if target.is_dir():
            target = target / "index.html"
        shown = url[len(base) :]
        if not target.is_file():
            problems.append(f"link to a missing file: {shown}")
        elif parts.fragment and target.suffix == ".html":
            if unquote(parts.fragment) not in anchors(target):
                problems.append(f"link to a missing anchor: {shown}")
    return problems


def reader_problems(path: str, seen: dict, base: str) -> list[str]:
    """The sidebar in course order on every page; on a notebook's page: its Colab line, a
    download link for it, a link to the next notebook, no prompts, no nbval marker, the
    set-up cell collapsed."""
    shown = [u[len(base) :].split("#")[0] for u in seen["sidebar"]]  # "#": the page itself
    order = [page for page in shown if page in NOTEBOOK_PAGES]
    problems = [] if order == NOTEBOOK_PAGES else [f"sidebar not in course order: {order}"]
    if path not in NOTEBOOK_PAGES:
        return problems
    stored = path.replace(".html", ".ipynb").split("/")[-1]
    if not any(u.endswith("/" + stored) for u in seen["downloads"]):
        problems.append(f"no download link for {stored}")
    following = NOTEBOOK_PAGES[NOTEBOOK_PAGES.index(path) + 1 :][:1]
    if following and base + following[0] not in seen["prevNext"]:
        problems.append(f"no next link to {following[0]}")
    problems += [] if seen["colab"] else ["no Colab line ('Run in Colab' or 'Open in Colab')"]
    problems += [f"{seen['prompts']} cell prompts shown"] if seen["prompts"] else []
    problems += [f"{seen['nbval']} code blocks show an nbval marker"] if seen["nbval"] else []
    problems += ["the set-up cell is shown, not collapsed"] if seen["setupShown"] else []
    return problems


# --- Exercises, long outputs, student downloads and the title cell's bullets -------------
# On a notebook's page: every exercise solution (a code block holding "### BEGIN SOLUTION")
# is not shown until its "Show solution" toggle is clicked, then is; the page has as many
# solutions as the notebook; the student version linked beside the download link is served
# and holds no solution; the title cell's "Needs:" and "Time:" lines are shown. On every
# page: no block of text output taller than OUTPUT_MAX_PX unless it scrolls (site/conf.py
# puts outputs of more than LONG_OUTPUT_LINES lines in a 24em scroll box).
SOLUTION_MARK = "### BEGIN SOLUTION"
SHOW_SOLUTION = "Show solution"
# Output lines are 17.5 px apart on the site (14 px text), plus about 15 px of padding: 25
# lines (site/conf.py's LONG_OUTPUT_LINES) take about 453 px, and the longest output stored
# (20 lines) 365 px. An output over this limit is longer than 25 lines and shown whole.
OUTPUT_MAX_PX = 470
TITLE_BULLETS = ("Needs:", "Time:")
READER_JS = r"""([mark, bullets]) => {
  const article = document.querySelector('article') || document.body;
  const shown = el => {
    const box = el.getBoundingClientRect();
    return el.checkVisibility({opacityProperty: true, visibilityProperty: true})
      && box.width > 0 && box.height > 0;
  };
  const solutions = [...article.querySelectorAll('pre')]
    .filter(pre => pre.textContent.includes(mark))
    .map((pre, i) => {
      pre.dataset.solution = String(i);
      const summary = pre.closest('details')?.querySelector(':scope > summary');
      const name = (pre.textContent.match(/def (\w+)/) || [, `block ${i + 1}`])[1];
      return {name, shown: shown(pre), toggle: summary ? summary.innerText.trim() : null};
    });
  const outputs = [];
  for (const out of article.querySelectorAll('.cell_output')) {
    if (!shown(out) || out.querySelector('img')) continue;  // figures are not text
    const style = getComputedStyle(out);
    const scrolls = /auto|scroll/.test(style.overflowY) && out.scrollHeight > out.clientHeight;
    const lines = out.innerText.split('\n').length;
    outputs.push({height: Math.round(out.getBoundingClientRect().height), scrolls, lines});
  }
  const titleLines = {};
  for (const label of bullets) {
    const li = [...article.querySelectorAll('li')].find(
      li => li.querySelector('strong')?.textContent.trim() === label);
    titleLines[label] = li && shown(li) ? li.innerText.trim() : null;
  }
  const student = [...article.querySelectorAll('a[download]')].map(a => a.href)
    .filter(href => /\/student\/[^/]+\.ipynb$/.test(href));
  return {solutions, outputs, titleLines, student};
}"""


@functools.cache
def solution_regions(notebook: str) -> tuple[str, ...]:
    """The solution regions of a stored notebook (tools/make_student.py's reading), each as
    its non-blank lines."""
    import nbformat

    from tools import make_student

    nb = nbformat.read(ROOT / "notebooks" / "solved" / f"{notebook}.ipynb", as_version=4)
    _, infos = make_student.student_notebook(nb, notebook)
    return tuple(
        "\n".join(line.strip() for line in region.lines if line.strip())
        for info in infos
        for region in info.regions
        if region.kind == "solution"
    )


def student_notebook_problems(text: str, notebook: str) -> list[str]:
    """What is wrong with a served student notebook: not a notebook, a solution marker or
    a solution's code in it, an output."""
    import json

    try:
        cells = json.loads(text)["cells"]
    except (ValueError, KeyError, TypeError):
        return [f"student/{notebook}.ipynb is not a notebook"]
    code = ["".join(c.get("source", "")) for c in cells]
    flat = "\n".join(line.strip() for c in code for line in c.splitlines() if line.strip())
    problems = []
    if any(SOLUTION_MARK in c for c in code):
        problems.append(f"student/{notebook}.ipynb has a {SOLUTION_MARK!r} marker")
    leaked = [r for r in solution_regions(notebook) if r and r in flat]
    if leaked:
        problems.append(f"student/{notebook}.ipynb holds {len(leaked)} solution(s)")
    if any(c.get("outputs") for c in cells):
        problems.append(f"student/{notebook}.ipynb has outputs")
    return problems


def exercise_and_output_problems(page, path: str, folder: Path) -> list[str]:
    """The checks above, on a page already loaded; clicks each solution's toggle."""
    seen = page.evaluate(READER_JS, [SOLUTION_MARK, list(TITLE_BULLETS)])
    problems = [
        f"an output {o['height']} px tall ({o['lines']} lines) is shown whole, not collapsed "
        f"or in a scroll box (limit {OUTPUT_MAX_PX} px)"
        for o in seen["outputs"]
        if o["height"] > OUTPUT_MAX_PX and not o["scrolls"]
    ]
    if path not in NOTEBOOK_PAGES:
        return problems
    notebook = Path(path).stem
    expected = len(solution_regions(notebook))
    if len(seen["solutions"]) != expected:
        problems.append(
            f"{len(seen['solutions'])} solutions on the page, the notebook has {expected}"
        )
    for i, solution in enumerate(seen["solutions"]):
        where = f"solution {solution['name']}"
        if solution["shown"]:
            problems.append(f"{where} is visible without clicking")
            continue
        if solution["toggle"] != SHOW_SOLUTION:
            problems.append(f"{where} has no {SHOW_SOLUTION!r} toggle: {solution['toggle']!r}")
            continue
        block = page.locator(f'pre[data-solution="{i}"]')
        block.locator("xpath=ancestor::details[1]/summary").click()
        if not block.evaluate(
            "el => el.checkVisibility() && el.getBoundingClientRect().height > 0"
        ):
            problems.append(f"{where} is not shown after clicking its toggle")
    for label, text in seen["titleLines"].items():
        if not text or len(text) <= len(label) + 3:
            problems.append(f"the title cell's {label!r} line is not shown")
    stored = f"/student/{notebook}.ipynb"
    links = [href for href in seen["student"] if href.endswith(stored)]
    if not links:
        problems.append(f"no download link for the student version {stored[1:]}")
        return problems
    response = page.request.get(links[0])
    if not response.ok:
        problems.append(f"student version {stored[1:]} answered {response.status}")
    else:
        problems += student_notebook_problems(response.text(), notebook)
    return problems


# Faults of the block above, planted in the self-check's page (and its student notebook).
LONG_TEXT = "<pre>" + "\n".join(f"line {i}" for i in range(60)) + "</pre>"
PLANTED_READER = (
    "<pre>def leaked_answer():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION</pre>"
    f'<div class="cell_output">{LONG_TEXT}</div>'
    # Not a fault: the same output in myst-nb's scroll box (the tag site/conf.py gives).
    f'<div class="cell tag_output_scroll"><div class="cell_output">{LONG_TEXT}</div></div>'
)
EXPECTED_READER = [
    r"^solution leaked_answer is visible without clicking$",
    r"^4 solutions on the page, the notebook has 3$",
    r"^an output \d+ px tall \(60 lines\) is shown whole, not collapsed or in a scroll box",
    r"^the title cell's 'Time:' line is not shown$",
    r"^student/01_attention_with_lists\.ipynb has a '### BEGIN SOLUTION' marker$",
    r"^student/01_attention_with_lists\.ipynb holds 3 solution\(s\)$",
    r"^student/01_attention_with_lists\.ipynb has outputs$",
]


def plant_reader_faults(folder: Path, html: str) -> str:
    """The self-check's page with a solution shown, a long output shown whole and its "Time:"
    line gone; its student version replaced by the solved notebook."""
    name = Path(BROKEN_PAGE).stem
    solved = (ROOT / "notebooks" / "solved" / f"{name}.ipynb").read_text()
    (folder / "student" / f"{name}.ipynb").write_text(solved)
    html = html.replace("<strong>Time:</strong>", "<strong>Duration:</strong>", 1)
    return html.replace("</article>", PLANTED_READER + "</article>", 1)


def pages_of(folder: Path) -> list[str]:
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*.html")
        if "_static" not in p.relative_to(folder).parts
    )


def run_search(browser: Browser, server: Server, word: str) -> list[tuple[str, str]]:
    """Type ``word`` into the search page: each result's page and its snippet (the text
    Sphinx cut from the page around the word, fetched after the results are listed)."""
    page = browser.context.new_page()
    try:
        page.goto(server.base + "search.html")
        box = page.locator(".bd-search-container input[name=q]")
        box.first.fill(word)
        box.first.press("Enter")
        page.wait_for_function(
            "() => (document.querySelector('#search-results .search-summary, "
            "#search-results p')?.textContent || '').trim() !== ''"
        )
        page.wait_for_load_state("networkidle")  # each snippet is cut from a fetched page
        hits = page.eval_on_selector_all(
            "#search-results ul.search li",
            "els => els.map(li => [li.querySelector('a')?.href || '',"
            " li.querySelector('p.context')?.textContent || ''])",
        )
    finally:
        page.close()
    return [(href[len(server.base) :].split("#")[0], snippet) for href, snippet in hits]


def check_search(browser: Browser, server: Server) -> list[str]:
    """Type each word into the search page; its notebook must be among the results; then
    the searches that must not show a solution (``search_solution_problems``)."""
    problems, found = [], {}
    for word, expected in SEARCHES.items():
        try:
            found[word] = run_search(browser, server, word)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"search for {word!r} did not run: {str(exc).splitlines()[0]}")
            continue
        shown = sorted({page for page, _ in found[word]})
        if expected not in shown:
            problems.append(f"search for {word!r} did not find {expected} (found: {shown})")
        else:
            log(f"search {word!r}: {len(shown)} pages, {expected} among them")
    return problems + search_solution_problems(browser, server, found)


# --- Search shows no solution (site/conf.py's class no-search on the solution cells, which
# Sphinx's index skips; site/_static/search-no-solutions.js, which takes them out of each
# result's snippet). Read from the stored notebooks: a word only a solution uses on its page
# must not find that page; no snippet may show a solution's line, neither for SEARCHES nor for
# a word whose first use on its page is in a solution (the snippet is cut around the first).
SOLUTION_END = "### END SOLUTION"
SOLUTION_WORD_MIN = 5  # shorter words are too common to be a solution's alone
SNIPPET_LINE_MIN = 15  # a solution's line this long that a snippet shows is a leak


def _stem(word: str) -> str:
    import snowballstemmer  # Sphinx's English stemmer (its index and its search page)

    return snowballstemmer.stemmer("english").stemWord(word.lower())


@functools.cache
def notebook_cells(notebook: str) -> tuple[tuple[bool, str], ...]:
    """The stored notebook's cells in page order: (a solution cell?, its source and text
    outputs). A solution cell is wholly collapsed on the site, so wholly kept from search."""
    cells = json.loads((ROOT / "notebooks" / "solved" / f"{notebook}.ipynb").read_text())["cells"]
    found = []
    for cell in cells:
        text = ["".join(cell["source"])]
        for out in cell.get("outputs", []):
            shown = out.get("text") or out.get("data", {}).get("text/plain", "")
            text.append("".join(shown) if isinstance(shown, list) else shown)
        lines = text[0].splitlines()
        solution = any(line.strip() == SOLUTION_MARK for line in lines)
        if solution:  # the markers' words are not the solution's
            markers = (SOLUTION_MARK, SOLUTION_END)
            text[0] = "\n".join(line for line in lines if line.strip() not in markers)
        found.append((solution, "\n".join(text)))
    return tuple(found)


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text) if len(w) >= SOLUTION_WORD_MIN and not w.isdigit()}


def solution_only_word(notebook: str) -> str | None:
    """A word of the notebook's solutions that nothing else on its page contains, nor any
    word whose stem holds its stem (Sphinx's search matches part of an indexed word)."""
    cells = notebook_cells(notebook)
    other = "\n".join(text for solution, text in cells if not solution).lower()
    stems = {_stem(w) for w in re.findall(r"\w+", other)}
    words = _words("\n".join(text for solution, text in cells if solution))
    for word in sorted(words, key=lambda w: (-len(w), w)):
        stem = _stem(word)
        if word.lower() not in other and not any(stem in s for s in stems):
            return word
    return None


def solution_first_word(notebook: str) -> str | None:
    """A word first met on the page (its stem, as the snippet looks for it) in a solution and
    met again after it outside the solutions: without search-no-solutions.js, its snippet is
    cut from the solution."""
    cells = notebook_cells(notebook)
    for at, (solution, text) in enumerate(cells):
        if not solution:
            continue
        before = "\n".join(t for _, t in cells[:at]).lower()
        after = _words("\n".join(t for s, t in cells[at + 1 :] if not s))
        for word in sorted(_words(text) & after, key=lambda w: (-len(w), w)):
            if _stem(word) not in before:
                return word
    return None


@functools.cache
def solution_lines() -> frozenset[str]:
    """Every solution's lines (whitespace squeezed) long enough to tell, and not on their
    page outside its solutions."""
    lines = set()
    for page in NOTEBOOK_PAGES:
        cells = notebook_cells(Path(page).stem)
        other = " ".join(" ".join(t.split()) for s, t in cells if not s)
        for line in (ln for s, t in cells if s for ln in t.splitlines()):
            line = " ".join(line.split())
            if len(line) >= SNIPPET_LINE_MIN and line not in other:
                lines.add(line)
    return frozenset(lines)


def snippet_problems(word: str, hits: list[tuple[str, str]]) -> list[str]:
    """Snippets that show a solution's line."""
    problems = []
    for page, snippet in hits:
        text = " ".join(snippet.split())
        shown = sorted(line for line in solution_lines() if line in text)
        if shown:
            problems.append(
                f"search for {word!r}: the snippet from {page} shows a solution's line: "
                f"{shown[0]!r}"
            )
    return problems


def search_solution_problems(
    browser: Browser, server: Server, found: dict[str, list[tuple[str, str]]]
) -> list[str]:
    """``found``: SEARCHES' results. For each notebook, a word only its solutions use must
    not find its page; a word first met in a solution is searched (for its snippet); no
    snippet may show a solution's line. Fails if no such word can be found at all."""
    problems, leaked = [], 0
    only = {p: solution_only_word(Path(p).stem) for p in NOTEBOOK_PAGES}
    only = {p: w for p, w in only.items() if w}
    first = [w for w in map(solution_first_word, (Path(p).stem for p in NOTEBOOK_PAGES)) if w]
    if not only:
        problems.append("no word is used by a solution alone: the index check cannot run")
    if not first:
        problems.append("no word is first met in a solution: the snippet check cannot run")
    searches = dict(found)
    for page, word in only.items():
        try:
            searches[word] = hits = run_search(browser, server, word)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"search for {word!r} did not run: {str(exc).splitlines()[0]}")
            continue
        if page in {p for p, _ in hits}:
            leaked += 1
            problems.append(f"search for {word!r}, used only in a solution, found {page}")
    for word in first[:1]:
        try:
            searches[word] = run_search(browser, server, word)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"search for {word!r} did not run: {str(exc).splitlines()[0]}")
    for word, hits in searches.items():
        problems += snippet_problems(word, hits)
    log(
        f"search and solutions: {len(only)} words only a solution uses, {leaked} found their "
        f"page; {sum(map(len, searches.values()))} snippets of {len(searches)} searches checked"
    )
    return problems


# Faults of the block above, planted in the self-check's copy of the site: the snippet script
# emptied (the snippets are cut from whole pages again) and each solution-only word put back
# into the index for its page (as if the solution cells were indexed).
EXPECTED_SEARCH = [
    r"^search for '\w+', used only in a solution, found notebooks/",
    r"^search for '\w+': the snippet from notebooks/\S+ shows a solution's line: ",
]


def plant_search_faults(folder: Path) -> None:
    script = folder / "_static" / "search-no-solutions.js"
    assert script.is_file(), "site/_static/search-no-solutions.js is not in the site"
    script.write_text("// emptied by the self-check\n")
    index = folder / "searchindex.js"
    text = index.read_text()
    head, body = text.split("(", 1)
    data = json.loads(body[: body.rindex(")")])
    for page in NOTEBOOK_PAGES:
        word = solution_only_word(Path(page).stem)
        if word:
            data["terms"][_stem(word)] = data["docnames"].index(page.removesuffix(".html"))
    index.write_text(f"{head}({json.dumps(data)})")


# --- Accessibility (issue 26): axe-core, headings, phone width, dark mode, opaque figures ---
# axe-core pinned by tools/axe/package.json and its lock file, installed with `npm ci` into
# build/axe (once; again when the pin changes) and injected into each page as an inline script:
# the browser asks nothing more of anyone.
AXE_PIN = ROOT / "tools" / "axe"
AXE_DIR = ROOT / "build" / "axe"
AXE_FAIL_ON = ("serious", "critical")
# In dark mode only the rules that colours decide are run again (all rules run in light mode).
AXE_COLOUR_RULES = ["color-contrast", "link-in-text-block"]
PHONE = {"width": 390, "height": 844}  # a phone, in CSS pixels
SCREENSHOTS = ROOT / "build" / "site-screenshots"  # one per page at phone width, not committed


def axe_version() -> str:
    return json.loads((AXE_PIN / "package.json").read_text())["dependencies"]["axe-core"]


@functools.cache
def axe_source() -> str:
    """axe.min.js at the pinned version, installed with npm if it is not there yet; raises
    bt.Missing (one line) where npm is missing or fails."""
    version = axe_version()
    installed = AXE_DIR / "node_modules" / "axe-core"
    if not (installed / "package.json").is_file() or (
        json.loads((installed / "package.json").read_text())["version"] != version
    ):
        npm = shutil.which("npm")
        if npm is None:
            raise bt.Missing(
                f"npm is missing: the accessibility check needs axe-core {version} from npm "
                "(install Node.js with npm, then run this again)"
            )
        log(f"installing axe-core {version} with npm ci (tools/axe/ pins it) into build/axe")
        AXE_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(AXE_PIN / name, AXE_DIR / name)
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=AXE_DIR,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise bt.Missing(f"npm ci could not install axe-core {version}: {' '.join(tail)}")
    return (installed / "axe.min.js").read_text()


# axe-core on the page as it is now: violations, each with its impact and how many elements.
# ``rules`` null: every rule; else only those. The contrast rule is most of axe's time on a page
# of code, whose thousands of highlighted tokens come in a few dozen colour pairings: in code
# blocks it sees one token of each (colour, weight, style, size, its own background and its
# block's), elsewhere every element. (One axe run per mode: each run costs seconds to set up.)
AXE_JS = r"""async (rules) => {
  const same = 'data-site-test-same-colours';
  document.querySelectorAll(`[${same}]`).forEach(el => el.removeAttribute(same));
  const seen = new Set();
  for (const el of document.querySelectorAll('div.highlight pre, div.highlight pre *')) {
    const text = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!text || !el.checkVisibility()) continue;  // not for the contrast rule anyway
    const s = getComputedStyle(el);
    const pre = el.closest('pre'), block = el.closest('div.highlight');
    const key = [s.color, s.backgroundColor, s.fontWeight, s.fontStyle, s.fontSize,
      getComputedStyle(pre).backgroundColor, getComputedStyle(block).backgroundColor,
      getComputedStyle(block.parentElement).backgroundColor].join('|');
    if (seen.has(key)) el.setAttribute(same, ''); else seen.add(key);
  }
  axe.configure({rules: [{id: 'color-contrast', selector: `*:not([${same}])`}]});
  const options = {resultTypes: ['violations']};
  if (rules) options.runOnly = {type: 'rule', values: rules};
  const result = await axe.run(document, options);
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, count: v.nodes.length,
    first: v.nodes[0] ? v.nodes[0].target.join(' ') : '',
    summary: v.nodes[0] ? (v.nodes[0].failureSummary || '').split('\n')[1] || '' : '',
  }));
}"""

# Every heading in order (h1 once, no level skipped), and each figure decoded into a canvas:
# how many of its pixels are not fully opaque (a transparent figure vanishes in dark mode).
STRUCTURE_JS = r"""() => {
  const headings = [...document.querySelectorAll("h1, h2, h3, h4, h5, h6")]
    .filter(h => h.checkVisibility())  // not the theme's print-only title
    .map(h => ({
    level: +h.tagName[1], text: h.textContent.replace(/[¶#]\s*$/, '').trim().slice(0, 60),
  }));
  const figures = [];
  for (const img of document.querySelectorAll('article img')) {
    if (!img.complete || img.naturalWidth === 0) continue;  // reported as not loaded
    const canvas = document.createElement('canvas');
    canvas.width = img.naturalWidth;
    canvas.height = img.naturalHeight;
    const context = canvas.getContext('2d');
    context.drawImage(img, 0, 0);
    let data;
    try {
      data = context.getImageData(0, 0, canvas.width, canvas.height).data;
    } catch (e) {
      const src = img.currentSrc || img.src;
      figures.push({src, alt: img.getAttribute('alt'), error: String(e)});
      continue;
    }
    let seeThrough = 0;
    for (let i = 3; i < data.length; i += 4) if (data[i] < 255) seeThrough++;
    figures.push({
      src: img.currentSrc || img.src, alt: img.getAttribute('alt'), seeThrough,
      pixels: data.length / 4,
    });
  }
  return {headings, figures};
}"""

# At phone width: the page must not scroll sideways. The widest elements that stick out of
# the viewport, outside any box that scrolls (or clips) on its own, are named.
PHONE_JS = r"""() => {
  const width = window.innerWidth;
  const scrollWidth = document.scrollingElement.scrollWidth;
  const clipped = el => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const x = getComputedStyle(p).overflowX;
      if (x === 'auto' || x === 'scroll' || x === 'hidden' || x === 'clip') return true;
    }
    return false;
  };
  const wide = [];
  if (scrollWidth > width) {
    for (const el of document.body.querySelectorAll('*')) {
      const box = el.getBoundingClientRect();
      if (box.width > 0 && box.right > width + 1 && !clipped(el)) {
        const name = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
          + (el.classList.length ? '.' + [...el.classList].slice(0, 2).join('.') : '');
        wide.push({name, right: Math.round(box.right)});
      }
    }
  }
  return {width, scrollWidth, wide: wide.slice(-3)};
}"""

# Switch the theme's mode at once: the theme eases colours over a few tenths of a second,
# and axe must not measure a colour half-way (a reader's page opens in its mode, unanimated).
MODE_JS = r"""(mode) => {
  if (!document.getElementById('site-test-still')) {
    const style = document.createElement('style');
    style.id = 'site-test-still';
    style.textContent = '*, *::before, *::after { transition: none !important; '
      + 'animation: none !important; }';
    document.head.append(style);
  }
  document.documentElement.dataset.theme = mode;
  document.body.getBoundingClientRect();  // the new colours computed now
}"""


def axe_problems(violations: list[dict], mode: str) -> list[str]:
    """The serious and critical violations."""
    problems = []
    for v in violations:
        if v["impact"] not in AXE_FAIL_ON:
            continue
        line = (
            f"axe ({mode} mode): {v['impact']} {v['id']} on {v['count']} element(s), "
            f"first {v['first']}: {v['summary']}"
        )
        problems.append(line)
    return problems


def heading_problems(headings: list[dict]) -> list[str]:
    """Exactly one h1, first; no level skipped going down (h2 then h4)."""
    problems = []
    ones = [h for h in headings if h["level"] == 1]
    if len(ones) != 1:
        problems.append(f"{len(ones)} h1 headings, not one: {[h['text'] for h in ones]}")
    elif headings[0]["level"] != 1:
        problems.append(f"a heading before the h1: h{headings[0]['level']} {headings[0]['text']!r}")
    for before, h in itertools.pairwise(headings):
        if h["level"] > before["level"] + 1:
            problems.append(
                f"heading skips a level: h{before['level']} {before['text']!r} then "
                f"h{h['level']} {h['text']!r}"
            )
    return problems


def figure_problems(figures: list[dict], base: str) -> list[str]:
    """Figures that are not opaque, and figures without an alt text: a notebook's figure (in
    _images/, where myst-nb writes them) needs one that says what it shows (the course's
    rule, tools/figure_alt.py) and differs from every other figure's on the page; any other
    image needs one that is not its file's name (what docutils writes when none is given)."""
    problems, seen = [], set()
    for f in figures:
        src = f["src"][len(base) :] if f["src"].startswith(base) else f["src"][:80]
        alt = (f.get("alt") or "").strip()
        if re.fullmatch(r"\S*\.(png|jpe?g|svg|gif|webp)", alt):
            why = "its alt text is its file name (none was given)"
        elif "_images/" in src:
            why = alt_text_problem(alt)
            if why is None and alt in seen:
                why = f"alt text {alt!r} is the same as another figure's"
            seen.add(alt)
        else:
            why = None if alt else "no alt text"
        if why:
            problems.append(f"figure {src}: {why}")
        if "error" in f:
            problems.append(f"figure could not be read back: {src} ({f['error']})")
        elif f["seeThrough"]:
            share = f["seeThrough"] / f["pixels"]
            problems.append(f"figure not opaque: {src} ({share:.0%} of its pixels see-through)")
    return problems


def accessibility(page, base: str, path: str, folder: Path) -> list[str]:
    """axe-core in light and in dark mode, headings, figures' backgrounds, and the page at
    phone width (a screenshot saved in build/site-screenshots/, or beside the copy of the site
    the self-check breaks)."""
    page.add_script_tag(content=axe_source())
    problems = []
    for mode, rules in (("light", None), ("dark", AXE_COLOUR_RULES)):
        page.evaluate(MODE_JS, mode)
        problems += axe_problems(page.evaluate(AXE_JS, rules), mode)
    page.evaluate(MODE_JS, "light")
    structure = page.evaluate(STRUCTURE_JS)
    problems += heading_problems(structure["headings"])
    problems += figure_problems(structure["figures"], base)
    page.set_viewport_size(PHONE)
    phone = page.evaluate(PHONE_JS)
    if phone["scrollWidth"] > phone["width"]:
        wide = ", ".join(f"{w['name']} (to {w['right']} px)" for w in phone["wide"])
        problems.append(
            f"scrolls sideways at phone width: {phone['scrollWidth']} px wide in a "
            f"{phone['width']} px viewport; sticking out: {wide or 'nothing named'}"
        )
    shots = SCREENSHOTS if folder == SITE else folder.parent / "screenshots"
    shot = shots / path.replace(".html", ".png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    # The first screen, or the whole page where it scrolls sideways (to see where).
    save_screenshot(page, shot, full_page=phone["scrollWidth"] > phone["width"])
    return problems


def save_screenshot(page, shot: Path, full_page: bool) -> None:
    """The screenshot is for a person to look at, not a check (the checks above read the page
    itself), so one that cannot be taken is said in the log and fails nothing. Playwright
    first waits for the page's fonts and a stable frame; once in the 37 runs recorded in
    docs/results/ci-runs.md, headless Chromium kept it waiting past the step's timeout on a
    page whose checks had all been made: so it is tried twice."""
    for attempt in (1, 2):
        try:
            page.screenshot(path=str(shot), full_page=full_page)
            return
        except Exception as exc:  # noqa: BLE001 - Playwright's TimeoutError, or a closed page
            reason = " ".join(str(exc).split())[:300]  # its call log says what it waited for
            log(f"screenshot of {shot.name} not taken (try {attempt} of 2): {reason}")


# The self-check: faults planted in a copy of one notebook page; each must be reported.
BROKEN_PAGE = "notebooks/01_attention_with_lists.html"
PLANTED = (
    '<p>A picture that is not there: <img src="missing-picture.png" alt="missing"></p>'
    '<p><a href="#no-such-anchor">a dead anchor</a>, <a href="no-such-page.html">a dead page</a>,'
    ' <a href="02_attention_with_numpy.html#no-such-section">a dead anchor elsewhere</a></p>'
    "<p>Unbalanced: $x^{2$ is left as text.</p>"
    '<p><span class="math notranslate nohighlight">\\(\\notacommand{x}\\)</span></p>'
    '<p><img src="https://example.org/picture.png" alt="elsewhere"></p>'
    '<script>console.error("self-check: console error")</script>'
    "<pre># NBVAL_IGNORE_OUTPUT\nprint(1)</pre><pre># Set-up. Shown to readers.</pre>"
)
EXPECTED = [
    r"^image did not load: .*missing-picture\.png$",
    r"^request answered 404: .*missing-picture\.png$",
    r"^link to a missing anchor: notebooks/01_attention_with_lists\.html#no-such-anchor$",
    r"^link to a missing file: notebooks/no-such-page\.html$",
    r"^link to a missing anchor: notebooks/02_attention_with_numpy\.html#no-such-section$",
    r"^a \$ left in the text, not typeset: .*\$x\^\{2",
    r"^MathJax error: unknown command \\notacommand$",
    r"^image did not load: https://example\.org/picture\.png$",
    r"^request for an outside resource \(blocked\): https://example\.org/picture\.png$",
    r"^browser console error: self-check: console error$",
    r"^browser console error: Failed to load resource.*404",
    r"^browser console error: Failed to load resource.*ERR_FAILED",
    r"^1 code blocks show an nbval marker$",
    r"^the set-up cell is shown, not collapsed$",
]


# The accessibility checks' own faults, planted on the same page: text and a code token with
# too little contrast (axe, both modes), a second h1 and a heading five levels below it, a box
# wider than a phone, a see-through figure, a figure with no alt text, a notebook's figure
# (in _images/) whose alt text does not say what it shows.
PLANTED_A11Y = (
    '<p style="color:#c8c8c8;background:#ffffff">Grey on white, too faint to read.</p>'
    '<div class="highlight"><pre><span class="n">x</span> = <span class="n">y</span> '
    '<span style="color:#d0d0d0;background:#ffffff">faint code</span></pre></div>'
    "<h1>A second title</h1><h6>A heading five levels down</h6>"
    '<div style="width:600px">A box wider than a phone.</div>'
    '<p><img src="see-through.png" alt="a see-through square"></p>'
    '<p><img src="see-through.png?no-alt"></p>'
    '<p><img src="../_images/planted.png" alt="a plot"></p>'
)
EXPECTED_A11Y = [
    r"^axe \(light mode\): serious color-contrast on 2 element",  # the text and the code
    r"^axe \(dark mode\): serious color-contrast on 2 element",
    r"^2 h1 headings, not one: .*'A second title'",
    r"^heading skips a level: h1 'A second title' then h6 'A heading five levels down'$",
    r"^scrolls sideways at phone width: .* div \(to \d+ px\)",
    r"^figure not opaque: notebooks/see-through\.png \(100% of its pixels see-through\)$",
    r"^figure not opaque: notebooks/see-through\.png\?no-alt \(100% of its pixels",
    r"^axe \(light mode\): critical image-alt on 1 element",
    r"^figure notebooks/see-through\.png\?no-alt: no alt text$",
    r"^figure _images/planted\.png: alt text 'a plot' is too short: say what the figure shows$",
    r"^figure not opaque: _images/planted\.png \(100% of its pixels see-through\)$",
]


def see_through_png(size: int = 8) -> bytes:
    """A PNG of one colour at half opacity (RGBA), written without any imaging library."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + bytes([200, 30, 30, 128]) * size for _ in range(size))
    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def self_check(browser: Browser) -> list[str]:
    """Plant the faults in a copy of the site; all must be reported, and nothing else."""
    with tempfile.TemporaryDirectory(prefix="site-test-") as tmp:
        folder = Path(tmp) / "site"
        shutil.copytree(SITE, folder)
        page = folder / BROKEN_PAGE
        html = plant_reader_faults(folder, page.read_text())
        page.write_text(html.replace("</article>", PLANTED + PLANTED_A11Y + "</article>", 1))
        (page.parent / "see-through.png").write_bytes(see_through_png())
        (folder / "_images" / "planted.png").write_bytes(see_through_png())
        plant_search_faults(folder)
        with Server(folder) as server:
            checked = browser.check(server, folder, BROKEN_PAGE)
            found = checked.problems + search_solution_problems(browser, server, {})
    planted = EXPECTED + EXPECTED_READER + EXPECTED_A11Y + EXPECTED_SEARCH
    patterns = [re.compile(p) for p in planted]
    missed = [f"not reported: /{p.pattern}/" for p in patterns if not any(map(p.search, found))]
    extra = [f"reported unexpectedly: {f}" for f in found if not any(p.search(f) for p in patterns)]
    return missed + extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-build", action="store_true", help="check build/site as it is")
    parser.add_argument("--no-self-checks", action="store_true", help="skip the self-check")
    args = parser.parse_args(argv)
    began = time.monotonic()
    if not args.no_build and build_site.build(strict=True) != 0:
        log("FAILED: the build (Sphinx's warnings or errors are above)")
        print("test-site: 0 passed, 1 failed", flush=True)
        return 1
    try:
        chromium = bt.find_chromium()
        import playwright  # noqa: F401

        axe_source()
    except (bt.Missing, ImportError) as missing:
        print(f"test-site: {missing}", file=sys.stderr)
        return 2
    started = time.monotonic()
    failed, passed = [], 0
    with tempfile.TemporaryDirectory(prefix="site-test-") as tmp:
        browser = Browser(chromium, Path(tmp) / "profile")
        try:
            with Server(SITE) as server:
                for path in pages_of(SITE):
                    result = browser.check(server, SITE, path)
                    verdict = f"{len(result.problems)} problem(s)" if result.problems else "ok"
                    log(
                        f"{path}: {result.images} images, {result.formulas} formulas, "
                        f"{result.links} internal links: {verdict}"
                    )
                    for problem in result.problems:
                        log(f"  {problem}")
                    if result.problems:
                        failed.append(path)
                    else:
                        passed += 1
                search = check_search(browser, server)
            for problem in search:
                log(problem)
            failed += ["search"] if search else []
            passed += 0 if search else 1
            if not args.no_self_checks:
                found = self_check(browser)
                for problem in found:
                    log(f"  self-check: {problem}")
                planted = len(EXPECTED + EXPECTED_READER + EXPECTED_A11Y + EXPECTED_SEARCH)
                log(f"self-check: {'FAILED' if found else f'found all {planted} faults'}")
                failed += ["self-check"] if found else []
                passed += 0 if found else 1
        finally:
            browser.close()
    log(
        f"{'FAILED: ' + ', '.join(failed) if failed else 'all passed'} "
        f"({time.monotonic() - started:.0f} s in the browser, {time.monotonic() - began:.0f} s "
        "in all)"
    )
    print(f"test-site: {passed} passed, {len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
