"""The course's set-up, apart from the helpers the notebooks teach with (``lib``).

``cell``: what every notebook's set-up cell calls, ``cell.set_up``. ``install``: installing
what the course and a notebook need where it is missing (e.g. Google Colab). ``doctor``:
``python -m course_setup.doctor``, which says whether this environment will reproduce the
stored outputs. Only the standard library is imported, so all of it works before NumPy is
installed.
"""

from . import distribution  # first: it refuses a copy pip did not finish (see there)

__all__ = ["distribution"]
