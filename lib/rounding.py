"""How far apart two correct floating-point computations of the same number can be (notebook 02).

Every floating-point operation rounds its exact result to the nearest number the dtype can
hold, which changes it by a relative amount of at most the *unit roundoff*
u = eps / 2 (2^-53, about 1.1e-16, in float64; 2^-24, about 6.0e-8, in float32). A result
that passes through ``depth`` such roundings one after another, each of a partial result no
larger in magnitude than ``scale``, is off by at most

    gamma(depth) * scale,   gamma(k) = k u / (1 - k u),

the standard bound of forward error analysis (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., 2002, section 3.1). It holds in every order of operations: a dot
product of length k has depth k and scale sum_i |x_i y_i|, whether it is added up left to
right, in pairs or in the blocks of any BLAS kernel, with or without fused multiply-adds.
Two correct computations are each within that bound of the exact value, so they differ by
at most twice it: that is :func:`tolerance`.

Counting the depth:

- one addition, subtraction, multiplication, division or square root: 1;
- a sum of k terms, or a dot product of length k: k;
- a library function such as ``exp``, ``exp2``, ``log`` or ``tanh``: ``FUNCTION_DEPTH``
  (NumPy validates its float32 ``exp``, ``exp2`` and ``log`` within 3, 2 and 4 ULP, and
  float64 within 1 ULP; one ULP is at most 2u);
- steps in sequence add up; an error that an operation magnifies (``exp`` turns an absolute
  error e of its argument into a relative error of about e) is counted with its magnifier
  in ``scale``.

The bound ignores terms of order u^2 and assumes no overflow or underflow. It is a worst
case: typical errors are far smaller (about sqrt(depth) u), but the worst case is the only
bound that holds on every machine, whatever order a BLAS adds in.
"""

from __future__ import annotations

import numpy as np

FUNCTION_DEPTH = 8
"""Roundings one call of exp, exp2, log, tanh or erf counts for: 4 ULP of at most 2u each."""


def unit_roundoff(dtype) -> float:
    """u = eps / 2: the largest relative change one rounding of ``dtype`` makes."""
    return float(np.finfo(dtype).eps) / 2


def tolerance(dtype, depth: int, scale=1.0):
    """The largest difference two correct computations of one number may show in ``dtype``:
    2 gamma(depth) scale, for a result ``depth`` roundings deep whose partial results are at
    most ``scale`` in magnitude (see the module's docstring for how to count them). ``scale``
    may be an array: one tolerance per entry."""
    if not (isinstance(depth, int | np.integer) and depth >= 0):
        raise ValueError(f"depth must be an integer >= 0, got {depth!r}")
    scale = np.asarray(scale, dtype=np.float64)
    if not (np.isfinite(scale).all() and (scale >= 0).all()):
        raise ValueError(f"scale must be finite and >= 0, got {scale!r}")
    k_u = depth * unit_roundoff(dtype)
    if k_u >= 0.5:
        raise ValueError(
            f"a depth of {depth} in {np.dtype(dtype).name} may lose every digit "
            f"(depth * u = {k_u:.2g}): compute in float64"
        )
    gap = 2 * k_u / (1 - k_u) * scale
    return float(gap) if gap.ndim == 0 else gap
