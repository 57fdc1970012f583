"""Helpers for the course "Multi-head attention, built from scratch in Python".

Import the module you need; each one belongs to the notebook that derives it:
``lists`` (01), ``toy`` (01-03), ``timing`` and ``rounding`` (02), ``attention`` (02-03),
``heads`` and ``plots`` (04), ``backprop`` (05), ``tiny`` and ``tasks`` (05-06), ``pruning``
(06), ``bert`` and ``head_types`` (07), ``torch_bridge`` (08, the only module that imports
torch), ``positions`` (09), ``blockwise`` and ``kv_cache`` (10); ``checks`` holds the checks that
follow each exercise. Each module's docstring says what it holds; ``_validate`` holds the
checks of their inputs, one call at the top of each function, so that you never need to
open it to follow a computation.

What installs the course and checks a learner's environment belongs to no notebook, so it
is not here: see the package ``course_setup`` beside this one.
"""
