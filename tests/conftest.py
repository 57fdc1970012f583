"""Shared by every test: the hypothesis profiles, the BLAS kernels in the header, the option
``--nbval-figures`` (tests/figures.py), nbval's kernels started again when one dies before it
answers (tests/nbval_kernels.py), and the tests/ folder on the import path, so that a test in
any group imports the shared helpers (``from tolerances import ...``,
``from helpers import ...``)."""

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))

import figures  # noqa: E402
import nbval_kernels  # noqa: E402
from figures import pytest_addoption  # noqa: E402, F401  (--nbval-figures)

# In CI the examples are derandomised so a run is reproducible; locally they vary. Both print
# a failing example's @reproduce_failure blob, which replays it anywhere (README, "Tests"):
# CI keeps no example database and none is needed.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    print_blob=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    derandomize=False,
    print_blob=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(scope="session", autouse=True)
def one_blas_thread():
    """NumPy's products on one thread in each test process: `make test` runs one worker per
    core, and BLAS threads waiting for a core the other worker holds spin (OpenBLAS's and
    OpenMP's do), which made tests several times slower. Notebook kernels are other
    processes, untouched."""
    with threadpool_limits(1):
        yield


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The same for torch, once a test has imported it (importing it here would slow every
    test process by seconds)."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def pytest_report_header(config):
    """The BLAS kernels this run uses, as OpenBLAS reports them (`make test-matrix` reads
    this line to record which kernels really ran)."""
    import numpy as np
    from threadpoolctl import threadpool_info

    blas = [
        f"{info['internal_api']} {info['version']} {info.get('architecture')}"
        for info in threadpool_info()
        if info["user_api"] == "blas"
    ]
    return f"BLAS kernels: {', '.join(blas) or 'none found'} (NumPy {np.__version__})"


def pytest_configure(config):
    figures.pytest_configure(config)
    if config.pluginmanager.hasplugin("nbval"):  # not in the Colab-like environment
        nbval_kernels.install()
