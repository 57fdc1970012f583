"""course_setup.doctor (`python -m course_setup.doctor`): what it prints on this machine, a
version that is not the pinned one, a package that is missing, a platform where it cannot look (no
threadpoolctl, unreadable metadata), and the pins it compares with equal constraints.txt's."""

import subprocess
import sys
import tomllib

import numpy as np
import pytest
from helpers import ROOT

from course_setup import doctor, install


def constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[install._key(name)] = version.strip()
    return pins


def test_the_pins_are_constraints_txt_s():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pinned = pyproject["project"]["optional-dependencies"][doctor.PINNED_PART]
    want = constraints()
    for requirement in pinned:
        name, version = requirement.split("==")
        assert want[install._key(name)] == version, f"{name}: pyproject {version}, constraints"


def test_the_report_on_this_machine():
    text = doctor.report()
    assert f"NumPy       {np.__version__}" in text
    assert "Python      " in text and "Colab       " in text
    for variable in doctor.THREAD_VARIABLES:
        assert f"{variable}=" in text
    assert "Will your outputs match the ones stored in the notebooks?" in text
    assert "strict nbval compares those printed numbers" in text
    for name in ("numpy", "torch", "scipy", "threadpoolctl"):
        assert f"\n  {name} " in text
    from threadpoolctl import threadpool_info

    blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
    assert blas and f"blas: {blas[0]['internal_api']} {blas[0]['version']}" in text
    if blas[0].get("architecture"):
        assert f"kernels {blas[0]['architecture']}" in text


def test_a_version_other_than_the_pinned_one_is_named(monkeypatch):
    versions = dict(install.installed_versions(), numpy="2.1.3")
    monkeypatch.setattr(install, "installed_versions", lambda: versions)
    text = doctor.report()
    assert "\n  - numpy 2.1.3 instead of 2.4.6\n" in text
    assert "Mostly: this environment differs" in text
    versions["numpy"] = "1.26.4"  # below the tested range
    assert "numpy 1.26.4 instead of 2.4.6 (outside the tested range)" in doctor.report()


def test_a_missing_package_is_named(monkeypatch):
    versions = install.installed_versions()
    versions.pop("torch")
    versions.pop("scipy")
    monkeypatch.setattr(install, "installed_versions", lambda: versions)
    text = doctor.report()
    assert f"{'torch':<22} {'-':<12} not installed (optional part 'torch')" in text
    assert "- scipy is not installed" in text


def test_what_it_cannot_check_it_says(monkeypatch):
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # import fails
    monkeypatch.setattr(install, "requirements", lambda needs=(): 1 / 0)
    text = doctor.report()
    assert "Could not check:" in text
    assert "the BLAS library and its kernels" in text
    assert "the course's metadata is unreadable" in text
    assert "Probably: nothing checked differs" in text


def test_it_never_fails(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "report", lambda: 1 / 0)
    assert doctor.main() == 0
    assert "could not finish (ZeroDivisionError" in capsys.readouterr().out


@pytest.mark.parametrize("colab", [False, True])
def test_python_m_lib_doctor(colab, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    if colab:
        env["COLAB_RELEASE_TAG"] = "test"
    run = subprocess.run(
        [sys.executable, "-m", "course_setup.doctor"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert f"Colab       {'yes' if colab else 'no'}" in run.stdout
    assert "Will your outputs match" in run.stdout
    assert run.stderr == ""


def test_the_set_up_cell_note_is_silent_where_the_tests_cover_it(monkeypatch, capsys):
    versions = dict(install.installed_versions(), numpy="2.1.3")  # Colab's: tested
    monkeypatch.setattr(install, "installed_versions", lambda: versions)
    doctor.note()
    assert capsys.readouterr().out == ""
    versions["numpy"] = "1.26.4"
    monkeypatch.setattr(doctor, "TESTED_KERNELS", ())
    doctor.note()
    out = capsys.readouterr().out
    assert out.startswith("Note: outputs may differ from the stored ones here (numpy 1.26.4 ")
    assert "BLAS kernels" in out and out.count("\n") == 1
    monkeypatch.setattr(install, "requirements", lambda needs=(): 1 / 0)
    monkeypatch.setattr(doctor, "_blas_rows", lambda could_not: 1 / 0)
    doctor.note()  # never fails
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "pools, said",
    [
        ([{"user_api": "blas", "internal_api": "mkl"}], "BLAS kernels mkl's own (the suite"),
        ([{"user_api": "blas", "internal_api": "openblas"}], "BLAS kernels openblas's own"),
        ([{"user_api": "openmp", "internal_api": "openmp"}], "found no BLAS thread pool"),
    ],
)
def test_a_blas_whose_kernels_the_suite_does_not_check_is_not_called_checked(
    pools, said, monkeypatch
):
    """MKL, Accelerate, an OpenBLAS that names no kernel set, or no BLAS found: the verdict
    must not say "a BLAS kernel set the suite checks"."""
    import threadpoolctl

    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: pools)
    text = doctor.report()
    assert said in text
    assert "Yes:" not in text


def test_an_unreadable_list_of_installed_packages_is_reported_not_raised(monkeypatch):
    monkeypatch.setattr(install, "installed_versions", lambda: 1 / 0)
    text = doctor.report()
    assert "the course's metadata is unreadable (division by zero)" in text
    assert "Probably: nothing checked differs" in text


def test_odd_version_strings(monkeypatch):
    versions = install.installed_versions()
    pin = constraints()["numpy"]
    monkeypatch.setattr(install, "installed_versions", lambda: versions)
    versions["numpy"] = f"{pin}+cpu"  # a build of the pinned release
    assert f"{'numpy':<22} {pin + '+cpu':<12} as pinned" in doctor.report()
    versions["numpy"] = "1.0.dev0"
    assert f"numpy 1.0.dev0 instead of {pin} (outside the tested range)" in doctor.report()
    versions["numpy"] = "not-a-version"  # neither inside nor outside: unknown
    text = doctor.report()
    assert f"numpy not-a-version instead of {pin} (a version string that cannot be read)" in text
    assert "OUTSIDE" not in text


def test_a_numpy_that_breaks_on_import_is_reported(tmp_path):
    """A NumPy built for another platform can raise more than ImportError on import."""
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text("raise RuntimeError('built for another CPU')")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    run = subprocess.run(
        [sys.executable, "-m", "course_setup.doctor"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "- NumPy: built for another CPU" in run.stdout
    assert "Will your outputs match" in run.stdout
