"""The environment doctor: ``python -m course_setup.doctor``.

It answers the learner's question "will my outputs match the ones stored in the notebooks,
and if not, why?" by printing what decides it: Python, NumPy and the BLAS library under it
(threadpoolctl's view: which library, its version, the kernel set it chose for this CPU,
its threads), the environment variables that set threads or kernels, whether this is Google
Colab, and every package the course uses against the version the stored outputs were made
with. Those exact versions travel with the course (its ``pinned`` optional part, equal to
``constraints.txt``), so an installed course knows them too; they are read the way
:mod:`course_setup.install` reads the course's requirements, from the installed course's metadata.

It never fails: whatever it cannot find out (no threadpoolctl, no torch, the course's
metadata unreadable) it says it could not check, and it exits 0.
"""

from __future__ import annotations

import os
import platform
import sys
import textwrap
from importlib import metadata

from . import install

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "OPENBLAS_CORETYPE")  # fmt: skip
"""Environment variables that set the BLAS threads or, for OpenBLAS, its kernel set."""

TESTED_KERNELS = ("SkylakeX", "Haswell")
"""OpenBLAS kernel sets the whole suite, strict nbval included, passes with (AVX-512 and
AVX2): ``make test-matrix``, docs/results/test-matrix.md."""

TESTED_PYTHONS = ("3.11", "3.12", "3.13")
"""The Pythons ``make test-matrix`` runs the whole suite on."""

PINNED_PART = "pinned"
"""The course's optional part that lists the exact versions of the stored outputs."""

SENSITIVE = (
    "Which outputs can differ: timings and benchmark figures always do (their cells start "
    "with # NBVAL_IGNORE_OUTPUT and are not compared). Everything else prints numbers "
    "rounded, and strict nbval compares those printed numbers, so a different BLAS kernel "
    "set or package version changes only digits the prints round away; `make test-matrix` "
    "(two kernel sets, Python 3.11-3.13) and `make test-colab` (Colab's NumPy, torch and "
    "the rest) found no stored output that differs. A value lying on a rounding boundary "
    "could still print one digit differently: compare with the stored output by eye."
)


def _package_rows(could_not: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(a line per package, the differences from the pins, those of them the course's tests
    do not cover: outside the tested range, or missing)."""
    try:
        pins = {
            install._key(name): spec.removeprefix("==")
            for name, spec, part in install.requirements((PINNED_PART,))
            if part == PINNED_PART
        }
        known = metadata.metadata(install.DISTRIBUTION).get_all("Provides-Extra") or []
        parts = sorted(set(known) - {PINNED_PART})
        ranges = {}
        for name, spec, part in install.requirements(parts):
            ranges.setdefault(install._key(name), (name, spec, part))
        installed = install.installed_versions()
    except Exception as exc:  # noqa: BLE001 - the doctor reports, it never fails
        could_not.append(f"the pinned versions: the course's metadata is unreadable ({exc})")
        return [], [], []
    lines, differences, untested = [], [], []
    for key in sorted(set(ranges) | set(pins)):
        name, spec, part = ranges.get(key, (key, "", None))
        have, pin = installed.get(key), pins.get(key)
        if pin is None and spec.startswith("=="):  # pinned by the requirement itself
            pin = spec.removeprefix("==")
        if have is None:
            note = "not installed" + (f" (optional part {part!r})" if part else "")
            if part:
                note += ": the set-up cell of a notebook that needs it installs it"
            else:
                differences.append(f"{name} is not installed")
                untested.append(differences[-1])
        elif pin is not None and have.split("+")[0] == pin:  # +cpu: a build of that release
            note = "as pinned"
        else:
            inside = _inside(spec, have)
            tested = f"the course is tested with {spec}" if spec else "no range"
            pinned = f"pinned {pin}" if pin else "not pinned"
            note = f"{pinned}; {tested}" + ("" if inside in (True, None) else ": OUTSIDE it")
            if pin is not None:
                differences.append(
                    f"{name} {have} instead of {pin}"
                    + (" (outside the tested range)" if inside is False else "")
                    + (" (a version string that cannot be read)" if inside is None else "")
                )
                if inside is False:
                    untested.append(differences[-1])
        lines.append(f"  {name:<22} {have or '-':<12} {note}")
    return lines, differences, untested


def _platform_differences(kernels: list[str]) -> list[str]:
    """A Python or BLAS kernel set the suite is not run with (``make test-matrix``):
    ``kernels`` has one entry per BLAS library, its OpenBLAS kernel set or what it is."""
    found = []
    python = ".".join(platform.python_version_tuple()[:2])
    if python not in TESTED_PYTHONS:
        found.append(f"Python {python} (the suite is checked on {', '.join(TESTED_PYTHONS)})")
    untested = [k for k in kernels if k not in TESTED_KERNELS]
    if untested:
        found.append(
            f"BLAS kernels {', '.join(untested)} (the suite is checked with OpenBLAS's "
            f"{' and '.join(TESTED_KERNELS)})"
        )
    return found


def note() -> None:
    """For the end of a notebook's set-up cell: one line, and only where this environment is
    outside what the course's tests cover (a package outside its tested range or missing, a
    Python or kernel set the suite does not run on); nothing otherwise, Colab's versions
    included. It never fails."""
    try:
        could_not: list[str] = []
        _, _, untested = _package_rows(could_not)
        found = untested + _platform_differences(_blas_rows(could_not)[1])
    except Exception:  # noqa: BLE001 - a note must not break the set-up cell
        return
    if found:
        print(
            f"Note: outputs may differ from the stored ones here ({'; '.join(found)}); "
            "`python -m course_setup.doctor` says more."
        )


def _inside(spec: str, version: str) -> bool | None:
    """Whether ``version`` is in the range ``spec``; None when that cannot be told."""
    try:
        if not spec:
            return True
        return install._satisfies(spec, version) if install._valid(version) else None
    except Exception:  # noqa: BLE001 - an unreadable version is "unknown", not an error
        return None


def _blas_rows(could_not: list[str]) -> tuple[list[str], list[str]]:
    """(a line per thread pool, the kernel set of each BLAS library found: OpenBLAS names
    its own; any other library, or an OpenBLAS that names none, gets "<library>'s own")."""
    try:
        import numpy  # noqa: F401 - loads NumPy's BLAS, so that threadpoolctl sees it
        from threadpoolctl import threadpool_info
    except Exception as exc:  # noqa: BLE001 - missing, or broken on import
        could_not.append(f"the BLAS library and its kernels: {exc}")
        return [], []
    try:
        pools = threadpool_info()
    except Exception as exc:  # noqa: BLE001
        could_not.append(f"the BLAS library and its kernels: threadpoolctl failed ({exc})")
        return [], []
    lines, kernels = [], []
    for pool in pools:
        api = pool.get("internal_api", "?")
        arch = pool.get("architecture")
        if pool.get("user_api") == "blas":
            kernels.append(str(arch) if arch else f"{api}'s own")
        lines.append(
            f"  {pool.get('user_api', '?')}: {api} {pool.get('version') or '(version unknown)'}"
            + (f", kernels {arch}" if arch else "")
            + f", {pool.get('num_threads', '?')} threads"
        )
    if not kernels:
        could_not.append("the BLAS library: threadpoolctl found no BLAS thread pool")
    return lines, kernels


def report() -> str:
    """The doctor's whole report, as printed."""
    could_not: list[str] = []
    out = ["Environment doctor (python -m course_setup.doctor)", ""]
    out.append(
        f"Python      {platform.python_version()} ({platform.python_implementation()}, "
        f"{platform.system()} {platform.machine()})"
    )
    colab = install.in_colab()
    out.append(f"Colab       {'yes' if colab else 'no'}")
    try:
        out.append(f"Course      {install.DISTRIBUTION} {metadata.version(install.DISTRIBUTION)}")
    except Exception as exc:  # noqa: BLE001
        could_not.append(f"the course's version: {exc}")
    try:
        import numpy

        out.append(f"NumPy       {numpy.__version__}")
    except Exception as exc:  # noqa: BLE001 - missing, or broken on import
        could_not.append(f"NumPy: {exc}")
    blas, kernels = _blas_rows(could_not)
    out += ["Thread pools (threadpoolctl)", *blas] if blas else []
    out.append("Environment variables (threads, kernels)")
    out += [f"  {v}={os.environ.get(v, '(unset)')}" for v in THREAD_VARIABLES]
    rows, differences, _ = _package_rows(could_not)
    if rows:
        out += ["", "Packages (installed, then against the versions of the stored outputs)", *rows]
    differences += _platform_differences(kernels)
    out += ["", "Will your outputs match the ones stored in the notebooks?"]
    if differences:
        out.append("  Mostly: this environment differs from the one that made them in")
        out += [f"  - {d}" for d in differences]
        if colab:
            out.append(
                "  (Colab's versions: `make test-colab` checks every stored output on them.)"
            )
    elif could_not:
        out.append("  Probably: nothing checked differs, but not everything could be checked.")
    else:
        out.append("  Yes: the same package versions, and a BLAS kernel set the suite checks.")
    out += textwrap.wrap(SENSITIVE, 88, initial_indent="  ", subsequent_indent="  ")
    if could_not:
        out += ["", "Could not check:", *(f"  - {c}" for c in could_not)]
    return "\n".join(out)


def main() -> int:
    try:
        print(report())
    except Exception as exc:  # noqa: BLE001 - the doctor must not fail on an odd platform
        print(f"Environment doctor: could not finish ({type(exc).__name__}: {exc})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
