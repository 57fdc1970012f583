"""Build the course's website into build/site/ (`make site`) from the stored notebooks.

    python -m tools.build_site [--strict]

Sphinx with myst-nb (nothing is executed) and sphinx-book-theme; the configuration is
site/conf.py. Every build starts afresh (the reader's view of a notebook is made in
site/conf.py's hooks, which Sphinx's change tracking does not see). Where this runs as root on
Linux with `unshare`, the build runs with no network at all, which proves it needs none;
elsewhere it runs as it is. ``--strict`` fails on any warning (Sphinx's -W --keep-going).
Prints the build time and the site's size.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "build" / "site"
DOCTREES = ROOT / "build" / "site-doctrees"  # Sphinx's cache, kept out of the site


def no_network_prefix() -> list[str]:
    """`unshare -n` (a new network namespace with no interface up) where it works."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"]
    return []


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def build(strict: bool = False) -> int:
    for folder in (SITE, DOCTREES):
        shutil.rmtree(folder, ignore_errors=True)
    offline = no_network_prefix()
    command = [sys.executable, "-m", "sphinx", "-q", "-b", "html", "-c", "site"]
    command += ["-d", str(DOCTREES), *(["-W", "--keep-going"] if strict else []), ".", str(SITE)]
    started = time.monotonic()
    done = subprocess.run([*offline, *command], cwd=ROOT)
    seconds = time.monotonic() - started
    network = "with no network (unshare -n)" if offline else "(network not cut: no unshare)"
    if done.returncode != 0:
        print(f"site: the build failed {network} after {seconds:.1f} s", file=sys.stderr)
        return done.returncode
    pages = len([p for p in SITE.rglob("*.html") if "_static" not in p.parts])
    print(
        f"site: built {pages} pages in build/site/ in {seconds:.1f} s {network}, "
        f"{size_mb(SITE):.1f} MB" + (", zero warnings" if strict else ""),
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strict", action="store_true", help="fail on any warning")
    return build(parser.parse_args(argv).strict)


if __name__ == "__main__":
    sys.exit(main())
