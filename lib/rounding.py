"""How far apart two correct floating-point computations of the same number can be (notebook 02).

Each floating-point operation rounds its exact result by a relative amount of at most the
*unit roundoff* u = eps / 2 (2^-53 in float64, 2^-24 in float32). A result that passes through
``depth`` roundings, each of a partial result at most ``scale`` in magnitude, is off by at most
gamma(depth) * scale, gamma(k) = k u / (1 - k u) (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2002, section 3.1), in every order of operations: a dot product of length k has
depth k and scale sum_i |x_i y_i|, whichever order a BLAS kernel adds in. Two correct
computations differ by at most twice that: :func:`tolerance`.

Counting the depth: one +, -, *, / or sqrt: 1; a sum or dot product of k terms: k; a library
function (exp, log, tanh...): ``FUNCTION_DEPTH``; steps in sequence add up, and an error an
operation magnifies (exp turns an absolute error e into a relative error e) carries its
magnifier in ``scale``. The bound is a worst case (typical errors are about sqrt(depth) u),
the only one that holds on every machine; it ignores u^2 terms, overflow and underflow.
"""

import numpy as np

from . import _validate as valid

FUNCTION_DEPTH = 8
"""Roundings one call of exp, exp2, log, tanh or erf counts for: 4 ULP of at most 2u each."""


def unit_roundoff(dtype) -> float:
    """u = eps / 2: the largest relative change one rounding of ``dtype`` makes."""
    return float(np.finfo(dtype).eps) / 2


def tolerance(dtype, depth: int, scale=1.0):
    """The largest difference two correct computations of one number may show in ``dtype``:
    2 gamma(depth) scale, for a result ``depth`` roundings deep whose partial results are at
    most ``scale`` in magnitude (the module's docstring says how to count them); ``scale``
    may be an array: one tolerance per entry."""
    depth = valid.integer(depth, "depth", low=0)
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
