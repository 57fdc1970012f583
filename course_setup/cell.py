"""What every notebook's set-up cell calls once the course is installed (tools/notebook_links.py
writes the cell)."""

from . import doctor, install


def set_up(needs=()) -> None:
    """A notebook's set-up: install what is missing of what the course and the optional parts
    ``needs`` (``"model"``, ``"torch"``) require, then the doctor's note (one line, only where
    outputs may differ from the stored ones). Prints nothing where everything is in place."""
    install.set_up(needs)
    doctor.note()
