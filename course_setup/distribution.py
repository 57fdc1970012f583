"""The course's distribution, and a refusal to import a copy of it pip did not finish.

A ``%pip install`` stopped half-way lets the set-up cell go on and import this package while
it is half-written. This module is imported first (``course_setup/__init__.py``): it refuses
then, before any other module of the package is imported, so that none is left in
``sys.modules``, where a half-written one would stay after the cell has installed the course
again.
"""

import os
import site
from importlib import metadata

DISTRIBUTION = "mha-from-scratch-course"
"""The course's distribution name on the package index; its import name is ``lib``."""


def pip_was_stopped() -> bool:
    """Whether this copy was installed by a pip that did not finish: it lies in a
    site-packages folder, but the course's ``.dist-info`` (which pip writes last) is not there."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sites = [os.path.abspath(p) for p in (*site.getsitepackages(), site.getusersitepackages())]
    return package in sites and not any(metadata.distributions(name=DISTRIBUTION))


if pip_was_stopped():
    raise ImportError(
        "the course is only half installed (pip was stopped while installing it): run the "
        "set-up cell (the notebook's first code cell) again"
    )
