"""Helpers for the course "Multi-head attention, built from scratch in Python".

Import the module you need; each one belongs to the notebook that derives it:
``lists`` (01), ``toy`` (01-03), ``timing`` and ``rounding`` (02), ``attention`` (02-03),
``heads`` and ``plots`` (04), ``backprop`` (05), ``tiny`` (05-06), ``pruning`` (06), ``bert``
and ``head_types`` (07), ``torch_bridge`` (08, the only module that imports torch),
``positions`` (09), ``blockwise`` and ``kv_cache`` (10); ``checks`` holds the checks that
follow each exercise. Each module's docstring says what it holds.

``import lib`` itself imports nothing else, so that ``lib.install`` (what each notebook's
set-up cell runs where the course is not installed, e.g. Google Colab; standard library only)
works before NumPy or anything else the course needs is installed.
"""
