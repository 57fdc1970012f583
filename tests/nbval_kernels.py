"""nbval starts a notebook's kernel again when the kernel dies before it answers.

The kernel manager picks free ports and the kernel binds them a second later; a kernel
started meanwhile by the other test worker can take one first, and this kernel dies of
"Address already in use" (a known race of Jupyter's, which ``tools/grade.py`` meets the same
way). nbval starts each notebook's kernel once and throws the kernel's stderr away, so a
notebook then fails at its first cell with "Kernel died before replying to kernel_info" and
no reason. Such a kernel has run none of the notebook's code, so a new one, with new ports,
changes nothing a test checks. Each new start is reported as a warning with the dead
kernel's last line of stderr, which names the cause. Tests that run a notebook themselves,
with nbclient, do the same through :func:`execute_notebook`.
"""

from __future__ import annotations

import atexit
import tempfile
import warnings

ATTEMPTS = 3


def _last_line(stderr) -> str:
    stderr.seek(0)
    lines = [line.strip() for line in stderr.read().splitlines() if line.strip()]
    return lines[-1] if lines else "nothing on stderr"


def install() -> None:
    """Wrap ``nbval.kernel.start_new_kernel``, which nbval calls once per notebook."""
    from nbval import kernel

    start = kernel.start_new_kernel
    if getattr(start, "starts_again", False):  # installed already
        return

    def start_new_kernel(*args, **kwargs):
        for attempt in range(1, ATTEMPTS + 1):
            stderr = tempfile.TemporaryFile(mode="w+")  # the kernel's, kept to say why it died
            try:
                return start(*args, **(kwargs | {"stderr": stderr}))
            except RuntimeError as exc:
                if "died" not in str(exc):  # e.g. a kernel too slow to answer: not this race
                    raise
                why = _last_line(stderr)
                if attempt == ATTEMPTS:
                    raise RuntimeError(
                        f"{exc} ({ATTEMPTS} tries; the last kernel: {why})"
                    ) from None
                message = f"a notebook's kernel died before it answered ({why})"
                warnings.warn(f"{message}; nbval started a new one", stacklevel=2)

    start_new_kernel.starts_again = True
    kernel.start_new_kernel = start_new_kernel


def execute_notebook(nb, **options) -> None:
    """``NotebookClient(nb, kernel_name="python3", **options).execute()``, with a new kernel
    when the kernel dies before it answers (nbclient keeps no stderr, so the warning cannot
    say why; the notebook has run none of its cells then)."""
    from nbclient import NotebookClient

    for attempt in range(1, ATTEMPTS + 1):
        client = NotebookClient(nb, kernel_name="python3", **options)
        try:
            client.execute()
            return
        except RuntimeError as exc:
            if "died before replying" not in str(exc) or attempt == ATTEMPTS:
                raise  # a kernel dying while it runs a cell is not this race
            atexit.unregister(client._cleanup_kernel)  # cleaned up already: it would fail at exit
            warnings.warn(f"{exc}: started a new kernel", stacklevel=2)


def pytest_configure(config):  # as a plugin of its own: python -m pytest -p nbval_kernels
    install()
