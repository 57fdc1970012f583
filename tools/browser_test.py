"""Run every notebook in JupyterLab in a real, headless browser (`make test-browser`).

    python -m tools.browser_test [--only 03 07 ...] [--no-self-checks]
    (or python tools/browser_test.py: it imports nothing from tools/)

What a learner does, done by a program:

1. Starts JupyterLab exactly as ``make lab`` does (``make lab LAB_FLAGS=...`` on a free local
   port, with a random token and no browser of its own), and opens the address JupyterLab
   prints, as ``make lab`` would in the learner's browser. The first page must show
   notebook 01.
2. Drives the system's Chromium, headless, through the ``playwright`` Python package (its
   ``executable_path``; Playwright's own browser download is never used). Where Chromium is
   missing and this runs as root with apt-get (Debian), it installs Debian's
   ``chromium`` package; elsewhere it says in one line what is missing and exits with 2.
   ``CHROMIUM=/path/to/chromium`` names another Chromium or Chrome.
3. For every notebook in ``notebooks/``, in its own page: Edit > Clear Outputs of All Cells,
   Run > Run All Cells, wait until the kernel is idle and every code cell has run, then
   fails the notebook on

   - JupyterLab marking it modified as soon as it opens it (saving it unchanged would
     change the file: it is not normalised);
   - an error output, or anything written to stderr (no stored notebook has either);
   - a code cell that did not run, or cells that did not run once each, in order;
   - an image that did not load (``naturalWidth`` 0), in the outputs or in the text;
   - a formula MathJax could not typeset: an error node, an unknown command (JupyterLab's
     MathJax shows it in red, with no error node) or a ``$`` left in the text (a formula
     MathJax did not find, e.g. with unbalanced braces);
   - a message the browser logged as an error, or an uncaught exception in the page
     (``TOLERATED_CONSOLE`` lists what is tolerated, and why: nothing at present);
   - a request for anything outside this machine (the test blocks them all, so that nothing
     leaves the machine and a notebook that needs the network fails here rather than for a
     reader offline). ``TOLERATED_EXTERNAL`` lists the exceptions, and why.

   Before that, each notebook is saved once, unchanged, as a learner would (File > Save
   Notebook): the file must come back byte for byte (stored notebooks are normalised to
   what JupyterLab writes). After that nothing is saved (autosave is off in the test's own
   JupyterLab settings, which leave the learner's untouched); at the end every notebook must
   be byte for byte what it was, and ``git status`` what it was.
4. Builds a scratch notebook in ``build/browser-test/`` that calls a check from
   ``lib.checks`` with a wrong answer, and requires the failed check to show in JupyterLab as
   one line that carries the check's sentence, not a traceback.
5. Self-checks (unless ``--no-self-checks``): scratch notebooks with planted faults (a kernel
   name JupyterLab rewrites, a raised error, a missing image, an image that cannot be
   decoded, three broken formulas, a console error, an external image) and the Colab badge;
   every fault must be reported and the badge tolerated, or the run fails: a detector that
   finds nothing proves nothing.

It prints one line per notebook (Run All's time, cells, images, formulas) and every problem
found, then ``test-browser: N passed, M failed``; it exits 1 if anything failed.
``--only 03 07`` runs only the notebooks whose names start so (the one-line check and the
self-checks still run); ``BROWSER_TEST_DEBUG=1`` prints each step with its time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SCRATCH = ROOT / "build" / "browser-test"
FIRST_NOTEBOOK = "01_attention_with_lists.ipynb"

# Chromium opens no connection of its own: without the background-networking, component
# update and sync flags it contacts its vendor's servers at start (a closed network refuses
# them). --no-sandbox is needed as root. Playwright adds several of these itself; they are
# listed so that the set does not depend on its version. The profile (--user-data-dir) is a
# new empty folder for every run (launch_persistent_context below).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Console errors that do not fail the run: (pattern, why). Empty: every notebook ran with
# no console error at all. Add an entry only with the reason it is harmless.
TOLERATED_CONSOLE: list[tuple[re.Pattern, str]] = []

# External addresses a notebook may ask for (they are blocked all the same): (pattern, why).
# The Colab badge, the line under each title once the course has a public address
# (README, "Publishing the course"): an icon that loads wherever the reader is online, and
# offline there is no Colab to open anyway. Its image not loading is tolerated too.
TOLERATED_EXTERNAL: list[tuple[re.Pattern, str]] = [
    (
        re.compile(r"^https://colab\.research\.google\.com/assets/colab-badge\.svg$"),
        "the Colab badge (shown once the course is published); offline there is no Colab",
    ),
]

RUN_TIMEOUT_S = 600  # one notebook, Run All to idle (the slowest takes ~1 min in nbval)
START_TIMEOUT_S = 180  # JupyterLab's server to answer
STEP_TIMEOUT_MS = 60_000  # one page action (a page load, a menu click)


# Any address outside this machine (for the browser's request blocking).
EXTERNAL = re.compile(r"^(?!(https?|wss?)://(localhost|127\.0\.0\.1|\[::1\])[:/])[a-z]+://")


_T0 = time.monotonic()


def debug(message: str) -> None:
    """Steps with the time since start, when BROWSER_TEST_DEBUG is set."""
    if os.environ.get("BROWSER_TEST_DEBUG"):
        log(f"{time.monotonic() - _T0:7.1f} s: {message}")


def log(message: str) -> None:
    print(f"[test-browser] {message}", flush=True)


class Missing(Exception):
    """Something the test needs is not there; the message says what, in one line."""


# --------------------------------------------------------------------------- Chromium


def find_chromium(
    environ=os.environ,
    which: Callable[[str], str | None] = shutil.which,
    is_root: bool | None = None,
    run: Callable[[list[str]], int] | None = None,
) -> str:
    """The Chromium to drive: $CHROMIUM, else ``chromium`` on the PATH, else Debian's package
    installed with apt-get when running as root. Raises Missing (one line) otherwise."""
    named = environ.get("CHROMIUM")
    if named:
        path = which(named)
        if not path:
            raise Missing(f"CHROMIUM={named} is not an executable browser")
        return path
    for name in ("chromium", "chromium-browser"):
        path = which(name)
        if path:
            return path
    if is_root is None:
        is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    apt = which("apt-get")
    if not (is_root and apt):
        why = "not root" if apt else "no apt-get here"
        raise Missing(
            f"Chromium is missing and cannot be installed by this test ({why}): install "
            "Chromium or Chrome (Debian: the 'chromium' package), or set CHROMIUM=/path/to/it"
        )
    run = run or _run_apt
    log("Chromium is missing: installing Debian's 'chromium' package with apt-get")
    if run([apt, "update", "-qq"]) != 0 or run([apt, "install", "-y", "-qq", "chromium"]) != 0:
        raise Missing("apt-get could not install 'chromium' (its output is above)")
    path = which("chromium")
    if not path:
        raise Missing("apt-get installed 'chromium' but no 'chromium' command is on the PATH")
    return path


def _run_apt(command: list[str]) -> int:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(command, env=env).returncode


def chromium_version(path: str) -> str:
    done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    return (done.stdout or done.stderr).strip() or "unknown version"


# --------------------------------------------------------------------------- JupyterLab


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def is_local(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about", "chrome-error"):
        return True
    return parts.hostname in ("localhost", "127.0.0.1", "::1")


class Lab:
    """JupyterLab started with ``make lab`` (a context manager); stopped with its process
    group on exit."""

    def __init__(self, workdir: Path):
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.workdir = workdir
        self.log_path = workdir / "lab.log"
        self.process: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> Lab:
        settings = self.workdir / "lab-settings"
        # The test's own JupyterLab settings: autosave off, so that nothing run here is ever
        # written back to a notebook; the learner's own settings and workspaces are not used.
        docmanager = (
            settings / "@jupyterlab" / "docmanager-extension" / "plugin.jupyterlab-settings"
        )
        docmanager.parent.mkdir(parents=True, exist_ok=True)
        docmanager.write_text(json.dumps({"autosave": False}))
        env = dict(
            os.environ,
            JUPYTERLAB_SETTINGS_DIR=str(settings),
            JUPYTERLAB_WORKSPACES_DIR=str(self.workdir / "lab-workspaces"),
        )
        flags = (
            f"--no-browser --port={self.port} --ServerApp.port_retries=0 "
            f"--IdentityProvider.token={self.token}"
        )
        command = ["make", "--no-print-directory", "lab", f"LAB_FLAGS={flags}"]
        log(f'starting JupyterLab: make lab LAB_FLAGS="{flags.replace(self.token, "…")}"')
        self._log_file = self.log_path.open("w")
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            self._wait_until_up()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        pattern = re.compile(rf"http://(?:localhost|127\.0\.0\.1):{self.port}/\S*token=\S+")
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"make lab exited with {self.process.returncode}:\n{self.tail()}"
                )
            found = pattern.search(self.log_path.read_text(errors="replace"))
            if found and self.api("status") is not None:
                # JupyterLab hides a token it was given ("token=..."): put it back.
                self.url = re.sub(r"token=[^&\s]*", f"token={self.token}", found.group(0))
                self.base = "{0.scheme}://{0.netloc}".format(urlsplit(self.url))
                return
            time.sleep(0.5)
        raise RuntimeError(f"JupyterLab did not answer in {START_TIMEOUT_S} s:\n{self.tail()}")

    def page(self, path: Path) -> str:
        """The address of a notebook in a fresh workspace (no tabs restored)."""
        return f"{self.base}/lab/tree/{path.as_posix()}?reset&token={self.token}"

    def api(self, path: str, method: str = "GET"):
        """JSON from JupyterLab's REST API, or None if it does not answer."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body = response.read()
        except (urllib.error.URLError, OSError):
            return None
        return json.loads(body) if body else {}

    def shutdown_kernels(self) -> None:
        """End every session (and its kernel): only this test's pages use this server."""
        for session in self.api("sessions") or []:
            self.api(f"sessions/{session['id']}", method="DELETE")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def __exit__(self, *exc) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log_file.close()


# --------------------------------------------------------------------------- one notebook

# Runs in the page: the state of the notebook shown (JupyterLab's DOM, version 4).
# textContent, not innerText: innerText is empty for cells the browser skips drawing
# (JupyterLab marks off-screen cells content-visibility: auto).
STATE_JS = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const cells = [...panel.querySelectorAll('.jp-Notebook .jp-Cell')].map((cell, index) => {
    const code = cell.classList.contains('jp-CodeCell');
    const prompt = code ? cell.querySelector('.jp-InputArea-prompt') : null;
    const outputs = [...cell.querySelectorAll('.jp-OutputArea-output')].map(out => ({
      mime: out.getAttribute('data-mime-type') || '',
      text: out.textContent,
    }));
    return {
      index: index + 1,
      code,
      prompt: prompt ? prompt.textContent.trim() : '',
      outputs,
    };
  });
  return {
    title: document.querySelector('#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current')
      ?.textContent.trim(),
    kernel: panel.querySelector('.jp-Toolbar-kernelName')?.textContent.trim(),
    dirty: document.querySelector('#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current')
      ?.classList.contains('jp-mod-dirty'),
    status: indicator ? indicator.getAttribute('data-status') : null,
    cells,
  };
}"""

# Runs in the page: every image and formula in the notebook shown, once rendered. An image
# that has not finished loading is brought into view and waited for (up to 10 s).
RENDERED_JS = r"""async () => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const cellOf = el => {
    const cell = el.closest('.jp-Cell');
    return cell ? [...panel.querySelectorAll('.jp-Notebook .jp-Cell')].indexOf(cell) + 1 : 0;
  };
  const images = [];
  for (const img of panel.querySelectorAll('.jp-Notebook img')) {
    if (!img.complete || img.naturalWidth === 0) {
      img.scrollIntoView();
      const deadline = Date.now() + 10000;
      while (!img.complete && Date.now() < deadline) await new Promise(r => setTimeout(r, 100));
    }
    images.push({cell: cellOf(img), src: img.currentSrc || img.src,
                 width: img.naturalWidth, complete: img.complete});
  }
  const formulas = panel.querySelectorAll('.jp-Notebook mjx-container').length;
  const mathErrors = [];
  for (const el of panel.querySelectorAll('.jp-Notebook mjx-merror')) {
    mathErrors.push({cell: cellOf(el), message: el.getAttribute('data-mjx-error')});
  }
  // JupyterLab's MathJax shows an unknown command as its name in red, with no error node.
  const unknown = '.jp-Notebook mjx-assistive-mml mtext[mathcolor="red"]';
  for (const el of panel.querySelectorAll(unknown)) {
    mathErrors.push({cell: cellOf(el), message: `unknown command ${el.textContent}`});
  }
  // A formula MathJax did not find (unbalanced braces or dollars) stays as text, $ and all.
  for (const md of panel.querySelectorAll('.jp-Notebook .jp-MarkdownCell .jp-RenderedMarkdown')) {
    const text = md.cloneNode(true);
    text.querySelectorAll('code, pre, mjx-container').forEach(el => el.remove());
    const at = text.textContent.indexOf('$');
    if (at >= 0) {
      const near = text.textContent.slice(Math.max(0, at - 30), at + 30).replace(/\s+/g, ' ');
      mathErrors.push({cell: cellOf(md), message: `a $ left in the text, not typeset: "${near}"`});
    }
  }
  return {images, formulas, mathErrors};
}"""

PROMPT_DONE = re.compile(r"^\[(\d+)\]:$")
ERROR_MIMES = ("application/vnd.jupyter.stderr",)


@dataclass
class NotebookRun:
    name: str
    seconds: float = 0.0
    code_cells: int = 0
    images: int = 0
    formulas: int = 0
    runnable: set[int] = field(default_factory=set)  # code cells with code (from 1)
    problems: list[str] = field(default_factory=list)
    tolerated: list[str] = field(default_factory=list)
    cells: list[dict] = field(default_factory=list)


class Browser:
    """Headless Chromium driven by Playwright, one page per notebook."""

    def __init__(self, chromium: str, lab: Lab, profile: Path):
        from playwright.sync_api import sync_playwright

        self.lab = lab
        self._playwright = sync_playwright().start()
        self.context = self._playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 900},
        )
        self.context.set_default_timeout(STEP_TIMEOUT_MS)
        # Nothing leaves this machine: every request elsewhere is aborted (and recorded).
        # The pattern is matched by Playwright's driver, so local requests never wait for
        # Python (with the sync API, Python handles events only inside a Playwright call:
        # waits below use page.wait_for_timeout, never time.sleep).
        self.context.route(EXTERNAL, lambda route: route.abort())

    def close(self) -> None:
        self.context.close()
        self._playwright.stop()

    def open(self, url: str):
        """A new page at ``url``, recording console errors and external requests."""
        page = self.context.new_page()
        page.course_console = []  # (text, url of the resource it is about)
        page.course_external = []

        def on_console(msg):
            if msg.type == "error":
                page.course_console.append((msg.text, msg.location.get("url", "")))

        page.on("console", on_console)
        page.on("pageerror", lambda exc: page.course_console.append((f"uncaught {exc}", "")))
        page.on(
            "request",
            lambda req: None if is_local(req.url) else page.course_external.append(req.url),
        )
        page.goto(url)
        return page

    def run(self, page, name: str, path: Path) -> NotebookRun:
        """Clear all outputs, Run All, wait; then collect what went wrong in the notebook."""
        stored = json.loads(path.read_text())["cells"]
        result = NotebookRun(name)
        # Which cells Run All executes is read from the file: an editor JupyterLab has not
        # drawn yet (off screen) shows no text in the page.
        result.runnable = {
            i
            for i, cell in enumerate(stored, 1)
            if cell["cell_type"] == "code" and "".join(cell["source"]).strip()
        }
        state = self.wait_until_shown(page, path)
        debug(f"{path.name} shown, kernel idle")
        if state["dirty"]:
            result.problems.append(
                "JupyterLab marked the notebook modified as soon as it opened it: saving it "
                "unchanged would change the file (is it normalised?)"
            )
        self._save_unchanged(page, path, result)
        kinds = [c["code"] for c in state["cells"]]
        if kinds != [cell["cell_type"] == "code" for cell in stored]:
            result.problems.append("the cells shown are not the notebook's cells")
            return result
        self._menu(page, "Edit", "Clear Outputs of All Cells")
        state = page.evaluate(STATE_JS)
        left = [
            c["index"] for c in state["cells"] if c["outputs"] or PROMPT_DONE.match(c["prompt"])
        ]
        if left:
            result.problems.append(f"outputs or counts left after clearing, cells {left}")
        started = time.monotonic()
        debug("cleared; Run All")
        self._menu(page, "Run", "Run All Cells")
        state = self._wait_for_run(page, result)
        result.seconds = time.monotonic() - started
        result.cells = state["cells"]
        result.code_cells = len(result.runnable)
        debug("run over")
        self._check_cells(state, result)
        self._check_rendered(page, result)
        self._check_console(page, result)
        return result

    def _save_unchanged(self, page, path: Path, result: NotebookRun) -> None:
        """Save the notebook as a learner would (File > Save Notebook) before changing
        anything: the file must come back byte for byte (it is stored normalised). If it
        does not, the difference is reported and the stored file put back."""
        stored, stamp = path.read_bytes(), path.stat().st_mtime_ns
        self._menu(page, "File", "Save Notebook")
        deadline = time.monotonic() + 20
        while path.stat().st_mtime_ns == stamp and time.monotonic() < deadline:
            page.wait_for_timeout(200)
        if path.stat().st_mtime_ns == stamp:
            result.problems.append("File > Save Notebook did not write the notebook in 20 s")
        elif path.read_bytes() != stored:
            old, new = stored.decode().splitlines(), path.read_text().splitlines()
            pairs = zip(old, new, strict=False)
            first = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(old), len(new)))
            result.problems.append(
                f"saving the notebook unchanged in JupyterLab changed the file (first at line "
                f"{first + 1}): it is not stored as JupyterLab writes it (make normalize)"
            )
            path.write_bytes(stored)

    def wait_until_shown(self, page, path: Path) -> dict:
        """Wait until the notebook shows all its cells (JupyterLab adds them a few at a time)
        and its kernel is connected and idle, twice in a row.

        The toolbar's status alone is not enough: it reads "idle" before the notebook has a
        kernel at all ("No Kernel"), and Run All clicked then runs nothing. So the kernel's
        name must be shown and the server must report the notebook's kernel idle too."""
        cells = len(json.loads(path.read_text())["cells"])
        where = path.resolve().relative_to(ROOT).as_posix()
        deadline = time.monotonic() + STEP_TIMEOUT_MS / 1000
        state, ready = None, 0
        while time.monotonic() < deadline:
            state = page.evaluate(STATE_JS)
            shown = (
                state
                and len(state["cells"]) == cells
                and state["status"] == "idle"
                and state["kernel"] not in (None, "", "No Kernel")
            )
            server = shown and any(
                s.get("path") == where and s["kernel"]["execution_state"] == "idle"
                for s in self.lab.api("sessions") or []
            )
            ready = ready + 1 if server else 0
            if ready == 2:
                return state
            page.wait_for_timeout(250)
        seen = state and (len(state["cells"]), state["kernel"], state["status"])
        raise RuntimeError(f"{path.name} did not show its {cells} cells and an idle kernel: {seen}")

    def _menu(self, page, menu: str, item: str) -> None:
        """Click a menu of JupyterLab's menu bar, then one of its items, as a learner does."""
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
        entry = page.locator(
            ".lm-Menu-item:not(.lm-mod-disabled)",
            has=page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")),
        )
        entry.click()

    def _wait_for_run(self, page, result: NotebookRun) -> dict:
        """Wait until the kernel is idle and the run is over: every code cell has run, or a
        cell failed and the rest were cancelled. Twice in a row, a second apart."""
        start = time.monotonic()
        settled = 0
        while time.monotonic() < start + RUN_TIMEOUT_S:
            state = page.evaluate(STATE_JS)
            code = [c for c in state["cells"] if c["index"] in result.runnable]
            running = any(c["prompt"] == "[*]:" for c in code)
            ran_all = all(PROMPT_DONE.match(c["prompt"]) for c in code)
            failed = any(o["mime"] in ERROR_MIMES for c in code for o in c["outputs"])
            if state["status"] == "idle" and not running and (ran_all or failed):
                settled += 1
                if settled == 2:
                    return state
            else:
                settled = 0
            if time.monotonic() > start + STEP_TIMEOUT_MS / 1000 and not any(
                c["prompt"] == "[*]:" or PROMPT_DONE.match(c["prompt"]) for c in code
            ):
                snapshot_page(page, result)
                result.problems.append("Run All started no cell in a minute")
                return state
            page.wait_for_timeout(1000)
        state = page.evaluate(STATE_JS)
        prompts = [c["prompt"] for c in state["cells"] if c["index"] in result.runnable]
        snapshot_page(page, result)
        result.problems.append(
            f"Run All did not finish in {RUN_TIMEOUT_S} s: kernel {state['status']}, "
            f"{prompts.count('[*]:')} cells running or queued, "
            f"{sum(not PROMPT_DONE.match(p) for p in prompts)} of {len(prompts)} not run"
        )
        return state

    @staticmethod
    def _check_cells(state: dict, result: NotebookRun) -> None:
        counts = []
        for cell in state["cells"]:
            if cell["index"] not in result.runnable:
                continue
            done = PROMPT_DONE.match(cell["prompt"])
            if not done:
                result.problems.append(f"cell {cell['index']} did not run ({cell['prompt']})")
            else:
                counts.append(int(done.group(1)))
            for out in cell["outputs"]:
                if out["mime"] in ERROR_MIMES:
                    text = out["text"].strip()
                    lines = text.splitlines()
                    shown = "\n      ".join(lines[-12:])
                    more = f"(last 12 of {len(lines)} lines)\n      " if len(lines) > 12 else ""
                    result.problems.append(
                        f"cell {cell['index']}: error or stderr output:\n      {more}{shown}"
                    )
        # A fresh kernel numbers the cells it runs 1, 2, 3, ...: each ran once, in order.
        if counts != list(range(1, len(counts) + 1)):
            result.problems.append(f"cells did not run once each in order: counts {counts}")

    @staticmethod
    def _check_rendered(page, result: NotebookRun) -> None:
        rendered = page.evaluate(RENDERED_JS)
        result.images = len(rendered["images"])
        result.formulas = rendered["formulas"]
        for image in rendered["images"]:
            if image["width"] == 0:
                src = image["src"]
                shown = src.split("?")[0] if is_local(src) else src  # no token, no _xsrf
                shown = shown if len(shown) < 120 else shown[:60] + "…"
                if not is_local(src) and tolerated_external(src):
                    result.tolerated.append(f"cell {image['cell']}: external image {shown}")
                    continue
                result.problems.append(f"cell {image['cell']}: image did not load: {shown}")
        for error in rendered["mathErrors"]:
            result.problems.append(f"cell {error['cell']}: MathJax error: {error['message']}")

    @staticmethod
    def _check_console(page, result: NotebookRun) -> None:
        for url in dict.fromkeys(page.course_external):  # once each, in order
            why = tolerated_external(url)
            if why:
                result.tolerated.append(f"external request (blocked) {url}: {why}")
            else:
                result.problems.append(f"request for an external resource (blocked): {url}")
        for text, url in page.course_console:
            if url and not is_local(url) and tolerated_external(url):
                result.tolerated.append(f"console error about {url}: {text}")
                continue
            why = next((why for pattern, why in TOLERATED_CONSOLE if pattern.search(text)), None)
            if why:
                result.tolerated.append(f"console error {text!r}: {why}")
            else:
                where = f" ({url})" if url else ""
                result.problems.append(f"browser console error: {text}{where}")


def tolerated_external(url: str) -> str | None:
    return next((why for pattern, why in TOLERATED_EXTERNAL if pattern.search(url)), None)


# --------------------------------------------------------------------------- scratch notebooks


def scratch_notebook(path: Path, cells: list[tuple[str, object]]) -> Path:
    """Write a notebook of (kind, source) cells, kind "code" or "markdown", with notebook 01's
    metadata (as JupyterLab writes it); a ("metadata", dict) entry changes the metadata."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata.update(json.loads((NOTEBOOKS / FIRST_NOTEBOOK).read_text())["metadata"])
    for kind, source in cells:
        if kind == "metadata":
            nb.metadata.update(source)
            continue
        maker = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
        nb.cells.append(maker(source))
    nbformat.write(nb, path)
    return path


# A check from lib.checks called with a wrong answer (softmax over axis 0 instead of the last
# one). Cell 1 prints the check's sentence; cell 2 lets the check fail as in an exercise.
CHECK_CELLS = [
    (
        "code",
        "import numpy as np\n"
        "from lib import checks\n\n\n"
        "def softmax(x):  # a wrong answer: normalised over axis 0\n"
        "    e = np.exp(x)\n"
        "    return e / e.sum(axis=0, keepdims=True)\n\n\n"
        "try:\n"
        "    checks.check_softmax(softmax)\n"
        "except checks.CheckFailed as failure:\n"
        "    print(failure)",
    ),
    ("code", "checks.check_softmax(softmax)"),
]


def check_shows_one_line(run: NotebookRun) -> tuple[list[str], str]:
    """How a failed check showed (CHECK_CELLS): (problems, the line shown). It must be one
    line that carries the check's own sentence."""
    if len(run.cells) != len(CHECK_CELLS):
        return ["the check notebook did not run"], ""
    first, second = run.cells
    printed = "".join(o["text"] for o in first["outputs"]).strip()
    if not printed:
        return ["check_softmax accepted a wrong answer (no CheckFailed), so nothing showed"], ""
    errors = [o["text"] for o in second["outputs"] if o["mime"] in ERROR_MIMES]
    if len(second["outputs"]) != 1 or len(errors) != 1:
        return [f"the failed check showed {len(second['outputs'])} outputs, not one error"], ""
    lines = [line.strip() for line in errors[0].splitlines() if line.strip()]
    if len(lines) != 1:
        return [
            f"a failed check showed as {len(lines)} lines, not one: a traceback (CheckFailed "
            f"needs IPython's _render_traceback_); its last line: {lines[-1]!r}"
        ], ""
    if printed not in lines[0]:
        return [f"the failed check's line {lines[0]!r} lacks its sentence {printed!r}"], ""
    return [], lines[0]


# Self-checks: notebooks with faults the test must report: {name: (cells, problems, tolerated)}.
# Each expected pattern must match a reported problem (a tolerated note), and every problem
# reported (note) must match an expected pattern.
SELF_CHECKS = {
    "selfcheck_error.ipynb": (
        [
            # A kernel name JupyterLab writes differently: it marks the notebook modified, and
            # saving it unchanged rewrites the file.
            (
                "metadata",
                {
                    "kernelspec": {
                        "display_name": "Python 3",
                        "language": "python",
                        "name": "python3",
                    }
                },
            ),
            ("code", "print('runs')"),
            ("code", "raise RuntimeError('self-check: this error must be reported')"),
            ("code", "print('never runs: Run All stops at the error')"),
        ],
        [
            r"^cell 2: error or stderr output:.*RuntimeError: self-check: this error must be",
            r"^cell 3 did not run",
            r"^JupyterLab marked the notebook modified as soon as it opened it",
            r"^saving the notebook unchanged in JupyterLab changed the file",
        ],
    ),
    "selfcheck_render.ipynb": (
        [
            ("markdown", "A picture that is not there: ![missing](missing-picture.png)"),
            (
                "markdown",
                "Fine: $\\frac{1}{2}$. Unknown: $\\notacommand{x}$. "
                "Wrong: $$\\begin{align} a \\end{matrix}$$",
            ),
            ("markdown", "Unbalanced: $x^{2$ is left as text."),
            (
                "code",
                "from IPython.display import Image, Javascript, display\n\n"
                "display(Image(data=b'these bytes are not a PNG', format='png'))\n"
                "display(Javascript('console.error(\"self-check: console error\")'))",
            ),
        ],
        [
            r"^cell 1: image did not load: .*missing-picture\.png$",
            r"^cell 4: image did not load: data:image/png",
            r"^cell 2: MathJax error: unknown command \\notacommand$",
            r"^cell 2: MathJax error: \\begin\{align\} ended with \\end\{matrix\}$",
            r"^cell 3: MathJax error: a \$ left in the text, not typeset: .*\$x\^\{2",
            r"^browser console error: self-check: console error",
            r"^browser console error: Failed to load resource.*404.*missing-picture\.png",
        ],
    ),
    "selfcheck_external.ipynb": (
        [
            (
                "markdown",
                "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
                "(https://colab.research.google.com/github/OWNER/REPOSITORY/blob/main/x.ipynb)",
            ),
            ("markdown", "An image from elsewhere: ![elsewhere](https://example.org/picture.png)"),
        ],
        [
            r"^cell 2: image did not load: https://example\.org/picture\.png$",
            r"^request for an external resource \(blocked\): https://example\.org/picture\.png$",
            r"^browser console error: .*\(https://example\.org/picture\.png\)$",
        ],
        [
            r"^cell 1: external image https://colab\.research\.google\.com/.*badge\.svg$",
            r"^external request \(blocked\) https://colab\.research\.google\.com/.*badge\.svg: ",
            r"^console error about https://colab\.research\.google\.com/.*badge\.svg: ",
        ],
    ),
}


def self_check_problems(name: str, run: NotebookRun) -> list[str]:
    """What a self-check's run failed to report (or to tolerate), or reported (or tolerated)
    beyond what it should."""
    _, problems, tolerated = (*SELF_CHECKS[name], [])[:3]
    found = []
    for verb, patterns, notes in (
        ("reported", problems, run.problems),
        ("tolerated", tolerated, run.tolerated),
    ):
        expected = [re.compile(p, re.DOTALL) for p in patterns]
        found += [f"not {verb}: /{p.pattern}/" for p in expected if not any(map(p.search, notes))]
        found += [
            f"{verb} unexpectedly: {n}" for n in notes if not any(p.search(n) for p in expected)
        ]
    return found


# --------------------------------------------------------------------------- the whole run


def snapshot() -> tuple[dict[str, str], str | None]:
    """Hashes of the stored notebooks, and `git status` (None outside a git checkout)."""
    hashes = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(NOTEBOOKS.glob("*"))
        if p.is_file()
    }
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        status = done.stdout if done.returncode == 0 else None
    except OSError:
        status = None
    return hashes, status


def snapshot_page(page, run: NotebookRun) -> None:
    """Save what the page shows when something went wrong, and say where."""
    shot = SCRATCH / f"{Path(run.name).stem}.png"
    try:
        page.screenshot(path=shot)
    except Exception:  # noqa: BLE001 - a page that cannot be shown has nothing to add
        return
    run.problems.append(f"what the page showed: {shot.relative_to(ROOT)}")


def drive(browser: Browser, lab: Lab, page, name: str, path: Path) -> NotebookRun:
    """Run one notebook in ``page`` (or a new page), then close the page and its kernel. A
    step JupyterLab did not take is a problem of that notebook (with a screenshot)."""
    try:
        if page is None:
            debug(f"opening {path}")
            page = browser.open(lab.page(path))
        run = browser.run(page, name, ROOT / path)
    except Exception as exc:  # noqa: BLE001 - any failure to drive the page is reported
        run = NotebookRun(name)
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        run.problems.append(f"could not drive JupyterLab: {first_line}")
        if page is not None:
            snapshot_page(page, run)
    finally:
        if page is not None:
            page.close()
        lab.shutdown_kernels()
    return run


def main(argv: list[str] | None = None) -> int:
    # A TERM (a CI time-out, kill) ends the run like Ctrl-C: JupyterLab and the browser are
    # stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NN", help="notebooks by number prefix")
    parser.add_argument("--no-self-checks", action="store_true", help="skip the self-checks")
    args = parser.parse_args(argv)

    try:
        chromium = find_chromium()
        try:
            import playwright  # noqa: F401
        except ImportError:
            raise Missing(
                "the 'playwright' Python package is missing: run make install "
                "(it is in requirements-dev.txt)"
            ) from None
    except Missing as missing:
        print(f"test-browser: {missing}", file=sys.stderr)
        return 2
    log(f"browser: {chromium} ({chromium_version(chromium)})")

    notebooks = sorted(NOTEBOOKS.glob("*.ipynb"))
    if args.only:
        notebooks = [p for p in notebooks if any(p.name.startswith(n) for n in args.only)]
    before = snapshot()
    new_checkpoints = [d for d in (NOTEBOOKS / ".ipynb_checkpoints",) if not d.exists()]
    if SCRATCH.exists():
        shutil.rmtree(SCRATCH)
    SCRATCH.mkdir(parents=True)
    queue = [(p.name, p.relative_to(ROOT)) for p in notebooks]
    check = scratch_notebook(SCRATCH / "check_one_line.ipynb", CHECK_CELLS)
    queue.append(("one-line check", check.relative_to(ROOT)))
    if not args.no_self_checks:
        for name, (cells, *_) in SELF_CHECKS.items():
            queue.append((name, scratch_notebook(SCRATCH / name, cells).relative_to(ROOT)))

    started = time.monotonic()
    runs: list[NotebookRun] = []
    other: list[str] = []  # problems not tied to one notebook
    with tempfile.TemporaryDirectory(prefix="browser-test-") as tmp, Lab(SCRATCH) as lab:
        log(f"JupyterLab is up ({time.monotonic() - started:.0f} s)")
        browser = Browser(chromium, lab, Path(tmp) / "profile")
        try:
            # The page `make lab` would open must show notebook 01; run 01 in that page.
            page = browser.open(lab.url)
            try:
                title = browser.wait_until_shown(page, NOTEBOOKS / FIRST_NOTEBOOK)["title"]
            except Exception as exc:  # noqa: BLE001
                title = f"nothing ({str(exc).splitlines()[0]})"
            if title == FIRST_NOTEBOOK:
                log(f"the first page shows {FIRST_NOTEBOOK}")
            else:
                other.append(f"the first page showed {title}, not {FIRST_NOTEBOOK}")
            if queue[0][0] != FIRST_NOTEBOOK or title != FIRST_NOTEBOOK:
                page.close()
                lab.shutdown_kernels()
                page = None
            for name, path in queue:
                run = drive(browser, lab, page, name, path)
                page = None
                if name == "one-line check":
                    found, line = check_shows_one_line(run)
                    # Its own error output is the point; any other problem still counts.
                    run.problems = [p for p in run.problems if not p.startswith("cell 2: error")]
                    run.problems += found
                    log(f"{name}: {'FAILED' if run.problems else f'one line: {line}'}")
                elif name in SELF_CHECKS:
                    run.problems = self_check_problems(name, run)
                    faults, *tolerated = SELF_CHECKS[name][1:]
                    verdict = f"found all {len(faults)} planted faults" + (
                        f", tolerated the {len(tolerated[0])} expected" if tolerated else ""
                    )
                    log(f"self-check {name}: {'FAILED' if run.problems else verdict}")
                    run.tolerated = []  # expected here, and checked
                else:
                    log(
                        f"{name}: {run.seconds:5.1f} s, {run.code_cells} code cells, "
                        f"{run.images} images, {run.formulas} formulas: "
                        f"{f'{len(run.problems)} problem(s)' if run.problems else 'ok'}"
                    )
                for problem in run.problems:
                    log(f"  {problem}")
                for note in run.tolerated:
                    log(f"  tolerated: {note}")
                runs.append(run)
        finally:
            browser.close()

    after = snapshot()
    for name in sorted(set(before[0]) | set(after[0])):
        if before[0].get(name) != after[0].get(name):
            other.append(f"notebooks/{name} changed on disk during the run")
    if before[1] != after[1]:
        other.append(f"git status changed during the run; now:\n{after[1]}")
    for directory in new_checkpoints:  # JupyterLab makes one when it opens a notebook
        shutil.rmtree(directory, ignore_errors=True)
    for problem in other:
        log(problem)

    total = time.monotonic() - started
    failed = [r.name for r in runs if r.problems] + (["the run itself"] if other else [])
    log(f"{'FAILED: ' + ', '.join(failed) if failed else 'all passed'} ({total:.0f} s)")
    passed = len(runs) + 1 - len(failed)  # + 1: the run itself (first page, files unchanged)
    print(f"test-browser: {passed} passed, {len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
