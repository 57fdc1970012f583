"""The error model behind every tolerance of the test suite.

Each rounding changes a partial result by at most u (the unit roundoff) of its magnitude
(lib/rounding.py). The functions here carry that bound through every step of a computation,
element by element, from the magnitudes of the actual values (to first order in u): each
``*_errors`` function returns values computed in float64 and the bound on their error when
computed once in ``dtype``; a tolerance for comparing two computations is twice that
(``*_tolerances``). Two ways of adding up the roundings:

- WORST: every rounding at its worst and all in the same direction (R.tolerance): holds for
  any inputs and any order of operations, so on every BLAS kernel. The suite's default.
- RANDOM: rounding errors independent and of mean zero (Higham and Mary, "A new approach to
  probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019): an inner
  product of length k is then within lambda sqrt(k) u sum |x_i y_i| with probability at
  least 1 - 2 k exp(-lambda^2 / 2), and independent errors add in quadrature. With
  lambda = 8 that is 1 - 2.5e-14 k. Used where the worst case says nothing: BERT's 384- and
  1536-wide layers (tests/test_bert.py), where it allows more than the values themselves.
  Inputs built so that every rounding goes the same way break it.

Gradients are checked against central differences, whose error is their truncation
(estimated) and the loss's rounding (bounded as above): :func:`gradient_tolerance`.
tests/test_rounding.py checks the model itself.
"""

import math

import numpy as np

from lib import attention as A
from lib import positions as POS
from lib import rounding as R


def assert_within(got, want, tol, name=""):
    """|got - want| <= tol element by element (tol and a scalar want broadcast), with the
    worst offender named."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if want.ndim == 0:
        want = np.broadcast_to(want, got.shape)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    gap = np.abs(got - want)
    over = gap > tol
    if over.any():
        i = np.unravel_index(np.argmax(np.where(over, gap - tol, -np.inf)), gap.shape)
        t = np.broadcast_to(tol, gap.shape)[i]
        raise AssertionError(
            f"{name}: {int(over.sum())} of {gap.size} entries differ by more than the derived "
            f"tolerance; at {tuple(map(int, i))}: {got[i]!r} vs {want[i]!r}, "
            f"gap {gap[i]:.3g} > {t:.3g}"
        )


class WorstCase:
    """Roundings at their worst, all in one direction: what R.tolerance bounds."""

    def rounding(self, dtype, depth, scale=1.0):
        """One computation ``depth`` roundings deep on partial results of size ``scale``."""
        return R.tolerance(dtype, depth, scale) / 2

    def spread(self, a, b):
        """The errors a matrix product carries: a holds errors and b magnitudes (|operand|),
        or the other way round."""
        return a @ b

    def add(self, *errors):
        """Errors from different sources, together."""
        return sum(errors)

    def mean(self, errors, axis=-1):
        """The error of a mean of numbers with these errors."""
        return np.mean(errors, axis=axis, keepdims=True)


class RandomErrors(WorstCase):
    """Rounding errors independent and of mean zero (Higham and Mary 2019, see above)."""

    LAMBDA = 8.0

    def rounding(self, dtype, depth, scale=1.0):
        return self.LAMBDA * math.sqrt(depth) * R.unit_roundoff(dtype) * np.asarray(scale)

    def spread(self, a, b):
        return np.sqrt((a * a) @ (b * b))

    def add(self, *errors):
        return np.sqrt(sum(np.square(e) for e in errors))

    def mean(self, errors, axis=-1):
        return np.sqrt(np.sum(np.square(errors), axis=axis, keepdims=True)) / np.shape(errors)[axis]


WORST, RANDOM = WorstCase(), RandomErrors()


def projection_errors(dtype, x, W, b=None, dx=0.0, errors=WORST):
    """x @ W + b in float64 and the bound on its error when computed in ``dtype`` from x known
    to within dx: dx through |W|, plus d_in products and sums and the bias (d_in + 1
    roundings) on partial sums bounded by |x| @ |W| + |b|."""
    W = np.asarray(W, np.float64)
    b = np.zeros(W.shape[1]) if b is None else np.asarray(b, np.float64)
    x = np.asarray(x, np.float64)
    value = x @ W + b
    bound = np.abs(x) @ np.abs(W) + np.abs(b)
    carried = errors.spread(np.broadcast_to(dx, x.shape), np.abs(W))
    return value, errors.add(carried, errors.rounding(dtype, W.shape[0] + 1, bound))


def rope_errors(dtype, t, dt, positions, rope, errors=WORST):
    """RoPE's turn of t (..., n, d_k) at ``positions`` and its error bound: each coordinate
    becomes a cos + b sin of its pair (a, b): the pair's errors, and on |a| + |b| three
    roundings, cos and sin (R.FUNCTION_DEPTH each, and the cast to ``dtype``: 1), and the
    angle p theta (a power, a division and a product: R.FUNCTION_DEPTH + 2 roundings
    relative to the angle, which the cos and sin carry as an absolute error)."""
    d_k = t.shape[-1]
    cos, sin = rope.cos_sin(positions, d_k, np.float64)
    P = np.abs(rope.partners(d_k))  # coordinate -> its partner
    pair = np.abs(t) + np.abs(t) @ P
    angle = np.abs(np.asarray(positions, np.float64))[:, None] * np.max(
        POS.frequencies(d_k, rope.base), initial=0.0
    )
    steps = errors.rounding(dtype, 3 + 2 * R.FUNCTION_DEPTH + 1)
    steps = steps + errors.rounding(dtype, R.FUNCTION_DEPTH + 2, angle)
    dt = np.broadcast_to(dt, t.shape)
    return rope.rotate(t, cos, sin), errors.add(dt, dt @ P, pair * steps)


def attention_errors(
    dtype, q, k, v, mask=None, dq=0.0, dk=0.0, dv=0.0, score_bias=None, errors=WORST
):
    """Bounds on the rounding errors of one computation, in ``dtype``, of scaled dot-product
    attention on q, k (..., n, d_k) and v (..., n_k, d_v), float64 values whose own errors are
    at most dq, dk, dv (0 for exact inputs): (weights, their errors, outputs, their errors).

    The scores s = (q / sqrt(d_k)) . k carry the inputs' errors through the dot product,
    plus its d_k roundings and 4 more (the scale computed and applied, a factor log2(e) where
    exp2 is used) on |q| . |k| / sqrt(d_k). A score bias (ALiBi's) is rounded once where it
    is made and once where it is added: 2 roundings on |s| + |bias|. The rest is
    :func:`softmax_errors`.
    """
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    d_k = q.shape[-1]
    dq, dk = np.broadcast_to(dq, q.shape), np.broadcast_to(dk, k.shape)
    c = 1 / math.sqrt(d_k)
    absq, absk = np.abs(q), np.swapaxes(np.abs(k), -1, -2)
    s = c * (q @ np.swapaxes(k, -1, -2))
    from_k = np.swapaxes(errors.spread(dk, np.swapaxes(absq, -1, -2)), -1, -2)
    ds = c * errors.add(errors.spread(dq, absk), from_k)
    ds = errors.add(ds, errors.rounding(dtype, d_k + 4, c * (absq @ absk)))
    if score_bias is not None:
        bias = np.asarray(score_bias, np.float64)
        s, ds = s + bias, errors.add(ds, errors.rounding(dtype, 2, np.abs(s) + np.abs(bias)))
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    return softmax_errors(dtype, s, v, ds, dv, errors)


def softmax_errors(dtype, s, v, ds=0.0, dv=0.0, errors=WORST):
    """(weights, their errors, outputs, their errors) of softmax(s) @ v computed in ``dtype``,
    for scores s (-inf: masked) and values v (None: weights only) whose own errors are at most
    ds and dv.

    - weights w_j = exp(s_j - m) / sum_i exp(s_i - m): an error e in every score changes
      each weight by a relative 2e; s - m rounds on |s - m| <= 2 max|s|, and the online
      softmax's rescalings exp(m_old - m_new) have rounded arguments that add up to at most
      2 max|s| (6 max|s| in all); exp, the n_k-term sum and the division round
      R.FUNCTION_DEPTH + n_k + 1 times, and an online softmax with up to n_k blocks adds
      R.FUNCTION_DEPTH + 1 per rescaling; an exp that underflows is off by at most the
      smallest normal number;
    - outputs sum_j w_j v_j: the weights' and the values' errors, and n_k + 3 roundings on
      sum_j w_j |v_j| (the sum, and the division by the sum of exp when a kernel divides
      after P @ V, as lib.blockwise does).
    """
    dtype = np.dtype(dtype)
    s = np.asarray(s, np.float64)
    n_k = s.shape[-1]
    allowed = np.isfinite(s)
    ds = np.broadcast_to(ds, s.shape)
    top = np.max(s, axis=-1, keepdims=True, where=allowed, initial=-np.inf)
    e = np.exp(s - np.where(np.isfinite(top), top, 0.0), where=allowed, out=np.zeros_like(s))
    total = e.sum(axis=-1, keepdims=True)
    w = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    row = np.max(ds, axis=-1, keepdims=True, where=allowed, initial=0.0)
    reach = np.max(np.abs(s), axis=-1, keepdims=True, where=allowed, initial=0.0)
    steps = R.FUNCTION_DEPTH + n_k + 1 + n_k * (R.FUNCTION_DEPTH + 1)
    relative = 2 * row + errors.rounding(dtype, 6, reach) + errors.rounding(dtype, steps)
    dw = w * relative + np.where(allowed, np.finfo(dtype).tiny, 0.0)
    if v is None:  # the weights alone
        return w, dw, None, None
    v = np.asarray(v, np.float64)
    dv, absv = np.broadcast_to(dv, v.shape), np.abs(v)
    dout = errors.add(errors.spread(dw, absv), errors.spread(w, dv))
    dout = errors.add(dout, errors.rounding(dtype, n_k + 3, w @ absv))
    return w, dw, w @ v, dout


def sdpa_tolerances(dtype, q, k, v, mask=None):
    """(weights, output) tolerances, element by element, for two computations of scaled
    dot-product attention on q, k, v in ``dtype``: twice :func:`attention_errors`."""
    _, dw, _, dout = attention_errors(dtype, q, k, v, mask)
    return 2 * dw, 2 * dout


def softmax_tolerances(dtype, s, v=None, ds=0.0):
    """(weights, output) tolerances, element by element, for two computations of
    softmax(s) @ v in ``dtype`` from scores s (-inf: masked) known to within ds: twice
    :func:`softmax_errors`; with v None, the weights' alone."""
    _, dw, _, dout = softmax_errors(dtype, s, v, ds)
    return 2 * dw if v is None else (2 * dw, 2 * dout)


def weight_statistics_tolerance(w):
    """Tolerance of a statistic of attention weights w (float64) that lies in [0, 1] (head
    scores, normalised entropies, averages over heads, queries and sequences), computed two
    ways: each weight enters it at most once, through at most R.FUNCTION_DEPTH + 2 roundings
    (its log, a product, a sum), and a division and a log normalise it (R.FUNCTION_DEPTH + 1),
    each worth at most u of 1."""
    return R.tolerance(np.float64, np.size(w) * (R.FUNCTION_DEPTH + 2) + R.FUNCTION_DEPTH + 1)


def weights_sum_tolerance(dtype, w_tol):
    """Tolerance of the row sums of attention weights (which should be 1) computed in
    ``dtype``, each weight within ``w_tol``: their errors, and n roundings on a sum of 1."""
    return np.sum(w_tol, axis=-1) + R.tolerance(dtype, np.shape(w_tol)[-1])


def mha_errors(
    dtype,
    x_q,
    x_kv,
    params,
    mask=None,
    *,
    dx_q=0.0,
    dx_kv=0.0,
    head_mask=None,
    rope=None,
    score_bias=None,
    errors=WORST,
):
    """(weights, their errors, output, its errors) of one computation, in ``dtype``, of
    multi-head attention (an MHAParams, grouped key/value heads or not) on x_q
    (..., n_q, d_model) and x_kv (..., n_k, d_model) known to within dx_q and dx_kv, with
    lib.backprop.mha_forward's options: a head mask, RoPE (a lib.positions.RoPE) or a score
    bias.

    The projections (:func:`projection_errors`), per head, RoPE's turn (:func:`rope_errors`,
    queries at the last n_q of the key positions), :func:`attention_errors`, the head mask
    (each head's output times its entry: the error times |entry|, plus one rounding), then
    W_o: :func:`projection_errors` of the concatenated heads.
    """
    x_q, x_kv = (np.asarray(x, np.float64) for x in (x_q, x_kv))
    h = params.n_heads
    d_k = params.W_q.shape[1] // h
    group = h // (params.W_k.shape[1] // d_k)

    def heads(t):  # (..., n, heads * d_k) -> (..., heads, n, d_k)
        return np.swapaxes(t.reshape(t.shape[:-1] + (t.shape[-1] // d_k, d_k)), -2, -3)

    def merge(t):  # (..., heads, n, d_k) -> (..., n, heads * d_k)
        return np.swapaxes(t, -2, -3).reshape(t.shape[:-3] + (t.shape[-2], h * d_k))

    def project(x, dx, W, b, repeat=1):
        value, error = projection_errors(dtype, x, W, b, dx, errors)
        return np.repeat(heads(value), repeat, axis=-3), np.repeat(heads(error), repeat, axis=-3)

    q, dq = project(x_q, dx_q, params.W_q, params.b_q)
    k, dk = project(x_kv, dx_kv, params.W_k, params.b_k, group)
    v, dv = project(x_kv, dx_kv, params.W_v, params.b_v, group)
    if rope is not None:
        n_q, n_k = q.shape[-2], k.shape[-2]
        q, dq = rope_errors(dtype, q, dq, POS.query_positions(n_q, n_k), rope, errors)
        k, dk = rope_errors(dtype, k, dk, np.arange(n_k), rope, errors)
    w, dw, o, do = attention_errors(dtype, q, k, v, mask, dq, dk, dv, score_bias, errors)
    if head_mask is not None:
        m = np.asarray(head_mask, np.float64)
        m = m[:, None, None] if m.ndim == 1 else m[..., None, None]  # (..., heads, 1, 1)
        o, do = o * m, errors.add(np.abs(m) * do, errors.rounding(dtype, 1, np.abs(o * m)))
    out, dout = projection_errors(dtype, merge(o), params.W_o, params.b_o, merge(do), errors)
    return w, dw, out, dout


def mha_tolerances(dtype, x_q, x_kv, params, mask=None, **options):
    """(weights, output) tolerances, element by element, for two computations of multi-head
    attention in ``dtype`` on the same inputs: twice :func:`mha_errors` (same options)."""
    _, dw, _, dout = mha_errors(dtype, x_q, x_kv, params, mask, **options)
    return 2 * dw, 2 * dout


def loss_error(dout, out, upstream):
    """The error of one computation of the loss sum(out * upstream) in float64, out known to
    within dout: sum |upstream| dout, plus the products and the sum (size + 1 roundings) on
    sum |out upstream|."""
    terms = np.abs(np.asarray(out, np.float64) * upstream)
    return float(
        (np.abs(upstream) * dout).sum() + R.tolerance(np.float64, terms.size + 1, terms.sum()) / 2
    )


def cross_entropy_error(logits, dlogits, targets) -> float:
    """The error of one float64 evaluation of lib.tiny's cross-entropy (the mean over scored
    answers of logsumexp(z) - z_target) from logits z known to within dlogits: each answer
    moves by at most twice its largest logit error, and rounds (the max shifted off, exp, an
    n-term sum, log, a subtraction: 2 R.FUNCTION_DEPTH + n + 3 roundings) on at most
    2 max|z| + log n; the mean adds one rounding per answer and a division."""
    z, dz = np.asarray(logits, np.float64), np.asarray(dlogits, np.float64)
    scored = np.asarray(targets) != -1
    n = z.shape[-1]
    top = np.abs(z).max(axis=-1)
    each = (
        2 * dz.max(axis=-1)
        + R.tolerance(np.float64, 2 * R.FUNCTION_DEPTH + n + 3, 2 * top + math.log(n)) / 2
    )
    count = int(scored.sum())
    mean_abs = float((2 * top + math.log(n))[scored].mean())
    return float(each[scored].mean()) + R.tolerance(np.float64, count + 1, mean_abs) / 2


def tiny_logits_errors(model, ids, head_mask=None):
    """lib.tiny's logits for ``model`` on ``ids`` (float64) and their error bound, one
    computation: its inputs (a table lookup, exact, plus the positions: learned, one
    addition; sinusoidal, the table's sin and cos, R.FUNCTION_DEPTH each with their angles'
    R.FUNCTION_DEPTH + 2 roundings, and the addition), :func:`mha_errors` with the model's
    positions, and the readout (:func:`projection_errors`); shaped (batch, n, slots, classes)."""
    p = {name: np.asarray(value, np.float64) for name, value in model.params.items()}
    ids = np.asarray(ids)
    n = ids.shape[-1]
    x, dx = p["tok_emb"][ids], 0.0
    options = {"head_mask": head_mask}
    if model.positions == "learned":
        x = x + p["pos_emb"][:n]
        dx = R.tolerance(np.float64, 1, np.abs(x)) / 2
    elif model.positions == "sinusoidal":
        table = POS.sinusoidal_table(n, x.shape[-1])
        angle = np.arange(n)[:, None] * np.ones(x.shape[-1])
        table_error = (
            R.tolerance(np.float64, R.FUNCTION_DEPTH, 1.0) / 2
            + R.tolerance(np.float64, R.FUNCTION_DEPTH + 2, angle) / 2
        )
        x = x + table
        dx = table_error + R.tolerance(np.float64, 1, np.abs(x)) / 2
    elif model.positions == "rope":
        options["rope"] = POS.RoPE()
    elif model.positions == "alibi":
        options["score_bias"] = POS.alibi_bias(n, n, POS.alibi_slopes(model.n_heads))
    *_, a, da = mha_errors(
        np.float64, x, x, model.mha_params(), A.causal_mask(n), dx_q=dx, dx_kv=dx, **options
    )
    logits, dlogits = projection_errors(np.float64, a, p["W_out"], p["b_out"], da)
    shape = ids.shape + (model.n_slots, -1)
    return logits.reshape(shape), dlogits.reshape(shape)


def tiny_loss_error(model, ids, targets, head_mask=None) -> float:
    """The error of one float64 evaluation of lib.tiny's loss: :func:`tiny_logits_errors`,
    then :func:`cross_entropy_error`."""
    logits, dlogits = tiny_logits_errors(model, ids, head_mask)
    targets = np.asarray(targets).reshape(logits.shape[:-1])
    return cross_entropy_error(logits, dlogits, targets)


# --------------------------------------------------------------------------- gradients

EPS = 1e-6


def numeric_gradient(loss, array: np.ndarray, step: float = EPS) -> np.ndarray:
    """Central differences of loss() with respect to every entry of ``array`` (in place)."""
    grad = np.zeros_like(array)
    for index in np.ndindex(array.shape):
        old = array[index]
        array[index] = old + step
        up = loss()
        array[index] = old - step
        down = loss()
        array[index] = old
        grad[index] = (up - down) / (2 * step)
    return grad


def gradient_tolerance(loss, array: np.ndarray, error: float) -> tuple[np.ndarray, np.ndarray]:
    """(central differences with step h = EPS, their tolerance per entry) for the gradient of
    loss() (float64) with respect to ``array``, the loss computed to within ``error``.

    - Truncation: D(h) = f' + c h^2 + O(h^4), so D(h) - f' is (D(2h) - D(h)) / 3 to within
      O(h^4) (Richardson); it is counted twice.
    - Rounding: two evaluations, each within ``error``, divided by 2h: error / h, counted
      twice; the analytic gradient's own rounding, about u |gradient|, is far below that
      (error is at least u |loss| and 1 / h = 1e6).
    """
    d1 = numeric_gradient(loss, array, EPS)
    d2 = numeric_gradient(loss, array, 2 * EPS)
    return d1, 2 * np.abs(d2 - d1) / 3 + 2 * error / EPS


def assert_gradient(analytic, loss, array, error, name=""):
    """The analytic gradient equals central differences of loss() in ``array`` within
    :func:`gradient_tolerance`."""
    numeric, tol = gradient_tolerance(loss, array, error)
    assert_within(analytic, numeric, tol, name)
    return numeric, tol
