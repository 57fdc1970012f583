"""Helpers for the course "Multi-head attention, built from scratch in Python".

Import the module you need; each one belongs to the notebook that derives it:
``lists`` (01), ``toy`` (01-03), ``timing`` and ``rounding`` (02), ``attention`` (02-03),
``heads`` and ``plots`` (04), ``backprop`` (05), ``tiny`` and ``tasks`` (05-06), ``pruning``
(06), ``bert`` and ``head_types`` (07), ``torch_bridge`` (08, the only module that imports
torch), ``positions`` and ``transformer`` (09), ``blockwise`` and ``kv_cache`` (10),
``induction`` (11); ``checks`` holds the checks that follow each exercise. ``_validate``
holds the checks of their inputs, one call at the top of each function, so that you never
need to open it to follow a computation. What installs the course belongs to no notebook:
it is the package ``course_setup``, beside this one.
"""
