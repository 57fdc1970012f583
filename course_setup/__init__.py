"""The course's set-up, apart from the helpers the notebooks teach with (``lib``).

``install``: what each notebook's set-up cell runs where the course is not installed (e.g.
Google Colab). ``doctor``: ``python -m course_setup.doctor``, which says whether this
environment will reproduce the stored outputs. Importing this package imports nothing, and
``install`` only the standard library, so both work before NumPy is installed.
"""
