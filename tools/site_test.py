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
   - a notebook's figure without an alt text that says what it shows (read from the page's
     HTML file: ``figure_alt_problems``).
3. Types words into the search page and requires a result from the right notebook (Sphinx's
   own search, an index in the site: it works offline).
4. Self-check (unless ``--no-self-checks``): a copy of the site with one page broken on
   purpose (a missing image, a dead anchor, a link to a missing page, an untypeset formula,
   an unknown command, an outside image, a console error); every fault must be reported, or
   the run fails.

Prints one line per page and every problem, then ``test-site: N passed, M failed``; exits 1
if anything failed, 2 if Chromium or Playwright is missing.
"""

from __future__ import annotations

import argparse
import functools
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

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
    colab: article.textContent.includes('Run in Colab'),
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
        result.problems += figure_alt_problems((folder / path).read_text())
        return result


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found: list[dict[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.found.append(dict(attrs))


def figure_alt_problems(html: str) -> list[str]:
    """A notebook's figures (the images myst-nb writes to _images/) without an alt text that
    says what they show: missing (docutils then puts the file's address in ``alt``), short,
    generic (lib.plots.alt_text_problem) or the same as another figure's on the page."""
    from lib.plots import alt_text_problem

    parser = _Images()
    parser.feed(html)
    problems, seen = [], set()
    for img in parser.found:
        src, alt = img.get("src") or "", img.get("alt")
        if "_images/" not in src:
            continue
        why = alt_text_problem(None if alt == src else alt)
        if why is None and alt in seen:
            why = f"alt text {alt!r} is the same as another figure's"
        seen.add(alt)
        problems += [f"figure {src.rsplit('/', 1)[-1]}: {why}"] if why else []
    return problems


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
    problems += [] if seen["colab"] else ["no 'Run in Colab' line"]
    problems += [f"{seen['prompts']} cell prompts shown"] if seen["prompts"] else []
    problems += [f"{seen['nbval']} code blocks show an nbval marker"] if seen["nbval"] else []
    problems += ["the set-up cell is shown, not collapsed"] if seen["setupShown"] else []
    return problems


def pages_of(folder: Path) -> list[str]:
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*.html")
        if "_static" not in p.relative_to(folder).parts
    )


def check_search(browser: Browser, server: Server) -> list[str]:
    """Type each word into the search page; its notebook must be among the results."""
    problems = []
    for word, expected in SEARCHES.items():
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
            hits = page.eval_on_selector_all(
                "#search-results ul.search li a", "els => els.map(a => a.href)"
            )
        except Exception as exc:  # noqa: BLE001
            problems.append(f"search for {word!r} did not run: {str(exc).splitlines()[0]}")
            continue
        finally:
            page.close()
        shown = sorted({h[len(server.base) :].split("#")[0] for h in hits})
        if expected not in shown:
            problems.append(f"search for {word!r} did not find {expected} (found: {shown})")
        else:
            log(f"search {word!r}: {len(shown)} pages, {expected} among them")
    return problems


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


def self_check(browser: Browser) -> list[str]:
    """Plant the faults in a copy of the site; all must be reported, and nothing else."""
    with tempfile.TemporaryDirectory(prefix="site-test-") as tmp:
        folder = Path(tmp) / "site"
        shutil.copytree(SITE, folder)
        page = folder / BROKEN_PAGE
        html = page.read_text()
        page.write_text(html.replace("</article>", PLANTED + "</article>", 1))
        with Server(folder) as server:
            found = browser.check(server, folder, BROKEN_PAGE).problems
    patterns = [re.compile(p) for p in EXPECTED]
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
                log(f"self-check: {'FAILED' if found else f'found all {len(EXPECTED)} faults'}")
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
