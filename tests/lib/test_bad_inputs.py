"""Bad input, the same rules for every public entry point: a table of (function, rule) ->
the exception and fragments of its message (or None: the input is accepted, e.g. lists
where arrays are expected).

Every row builds its inputs when it runs and calls the library through its modules'
attributes, so tests/lib/test_validation_mutants.py can run the same table with one
validation call of lib deleted and see a row fail.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from lib import _validate as valid
from lib import attention as A
from lib import backprop as BP
from lib import blockwise as BW
from lib import kv_cache as KV
from lib import lists as L
from lib import positions as POS
from lib import tiny as T


@dataclass(frozen=True)
class Row:
    function: str
    rule: str
    call: Any  # no arguments; raises, or returns for an accepted input
    error: type[Exception] | None  # None: the input is accepted
    fragments: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.function}: {self.rule}"


def failure(row: Row) -> str | None:
    """Why the row does not hold (None when it does)."""
    try:
        row.call()
    except Exception as exc:  # noqa: BLE001 - any other exception is the row failing
        if row.error is None or not isinstance(exc, row.error):
            return f"raised {type(exc).__name__}: {exc}"
        missing = [f for f in row.fragments if f not in str(exc)]
        return f"message {str(exc)!r} lacks {missing}" if missing else None
    return None if row.error is None else f"did not raise {row.error.__name__}"


# --------------------------------------------------------------------------- inputs


def rng():
    return np.random.default_rng(1234)


def params(bias=True, dtype=np.float64, d=8, h=2, **changes) -> A.MHAParams:
    p = A.init_mha_params(d, h, rng(), bias=bias, dtype=dtype)
    return dataclasses.replace(p, **changes) if changes else p


def x(shape=(2, 3, 8), dtype=np.float64, at=None, value=np.nan):
    a = np.random.default_rng(5).normal(size=shape).astype(dtype)
    if at is not None:
        a[at] = value
    return a


def with_value(array_name: str, at, value=np.nan, **kw) -> A.MHAParams:
    """Params whose array is changed in place after being built (as training might)."""
    p = params(**kw)
    getattr(p, array_name)[at] = value
    return p


def huge(shape, value, dtype=np.float32):
    return np.full(shape, value, dtype)


def identity_qk_params() -> A.MHAParams:
    """float32, W_q = W_k = I: a score is q . k / sqrt(d_k) of the inputs themselves."""
    eye = np.eye(8, dtype=np.float32)
    return params(bias=False, dtype=np.float32, W_q=eye, W_k=eye)


def only_key_0() -> np.ndarray:
    mask = np.zeros((3, 3), dtype=bool)
    mask[:, 0] = True
    return mask


def positive_x32():
    return 1.0 + np.random.default_rng(6).uniform(size=(2, 3, 8)).astype(np.float32)


def overflowing_output_params():
    p = params(bias=False, dtype=np.float32)
    p.W_v[:] = np.abs(p.W_v)  # positive head outputs, so each output sums up
    p.W_o[:] = 3e38  # 8 positive terms of about 3e38: finite heads, overflowing output
    return p


# --------------------------------------------------------------------------- forwards

FORWARDS = {
    "multi_head_attention": lambda *a: A.multi_head_attention(*a),
    "multi_head_attention(need_weights=False)": lambda *a: A.multi_head_attention(
        *a, need_weights=False
    ),
    "multi_head_attention_per_head": lambda *a: A.multi_head_attention_per_head(*a),
    "blockwise.multi_head_attention": lambda *a: BW.multi_head_attention(*a),
    "blockwise.multi_head_attention(need_weights=False)": lambda *a: BW.multi_head_attention(
        *a, need_weights=False
    ),
    "backprop.mha_forward": lambda *a: BP.mha_forward(*a),
    "backprop.mha_forward(rope)": lambda *a: BP.mha_forward(*a, rope=POS.RoPE()),
    "backprop.mha_forward(score_bias)": lambda *a: BP.mha_forward(*a, score_bias=0.0),
}

# (rule, arguments (x_q, x_kv, params, mask) built when called, error, fragments)
FORWARD_RULES = [
    ("params not an MHAParams", lambda: (x(), x(), {"W_q": np.eye(8)}, None), ValueError,
     ("params must be an MHAParams", "got dict")),
    ("NaN in x_q", lambda: (x(at=(1, 2, 3)), x(), params(), None), ValueError,
     ("x_q contains NaN or inf (first at index (1, 2, 3), shape (2, 3, 8))",)),
    ("inf in x_kv", lambda: (x(), x((2, 4, 8), at=(0, 1, 2), value=np.inf), params(), None),
     ValueError, ("x_kv contains NaN or inf (first at index (0, 1, 2), shape (2, 4, 8))",)),
    ("NaN in x_q, no keys", lambda: (x(at=(0, 0, 0)), x((2, 0, 8)), params(), None),
     ValueError, ("x_q contains NaN or inf",)),
    ("NaN in a weight", lambda: (x(), x(), with_value("W_v", (0, 1)), None), ValueError,
     ("params.W_v contains NaN or inf (first at index (0, 1), shape (8, 8))",)),
    ("inf in a bias", lambda: (x(), x(), with_value("b_o", 5, np.inf), None), ValueError,
     ("params.b_o contains NaN or inf (first at index (5,), shape (8,))",)),
    ("NaN in W_o, no queries", lambda: (x((2, 0, 8)), x(), with_value("W_o", (2, 2)), None),
     ValueError, ("params.W_o contains NaN or inf",)),
    ("input of one axis", lambda: (np.ones(8), np.ones(8), params(), None), ValueError,
     ("x_q and x_kv must be", "got x_q (8,)")),
    ("inputs of different ranks", lambda: (x(), x()[0], params(), None), ValueError,
     ("x_q and x_kv must be", "x_kv (3, 8)")),
    ("d_model differs", lambda: (x(), x((2, 5, 6)), params(), None), ValueError,
     ("x_kv has d_model=6 (shape (2, 5, 6)) but the parameters have d_model=8",)),
    ("the queries' d_model differs", lambda: (x((2, 3, 6)), x(), params(), None), ValueError,
     ("x_q has d_model=6 (shape (2, 3, 6)) but the parameters have d_model=8",)),
    ("batch sizes differ", lambda: (x(), x((3, 3, 8)), params(), None), ValueError,
     ("different batch sizes: (2, 3, 8) and (3, 3, 8)",)),
    ("complex input", lambda: (x().astype(complex), x(), params(), None), ValueError,
     ("x_q must hold real numbers, got dtype complex128",)),
    ("boolean input", lambda: (x(), x() > 0, params(), None), ValueError,
     ("x_kv must hold real numbers, got booleans",)),
    ("ragged lists", lambda: (x(), [[[1.0] * 8, [1.0] * 7]] * 2, params(), None), ValueError,
     ("x_kv must be a rectangular array of real numbers",)),
    ("lists are converted", lambda: (x().tolist(), x().tolist(), params(), None), None, ()),
    ("additive float mask", lambda: (x(), x(), params(), np.where(A.causal_mask(3), 0, -np.inf)),
     ValueError, ("mask must be boolean, True = may attend, got dtype float64", "`mask == 0`",
                  "`~mask`")),
    ("0/1 mask", lambda: (x(), x(), params(), np.tril(np.ones((3, 3), int))), ValueError,
     ("mask must be boolean", "`mask.astype(bool)`")),
    ("mask that does not broadcast", lambda: (x(), x(), params(), np.ones((2, 3, 4), bool)),
     ValueError, ("mask of shape (2, 3, 4) cannot broadcast", "(2, 2, 3, 3)")),
    ("mask that would grow the scores",
     lambda: (x(), x(), params(), np.ones((1, 1, 1, 3, 3), bool)), ValueError,
     ("mask of shape (1, 1, 1, 3, 3) cannot broadcast",)),
    ("queries overflow",
     lambda: (huge((2, 3, 8), 1e30), x(dtype=np.float32),
              params(dtype=np.float32, bias=False, W_q=huge((8, 8), 1e10)), None),
     ValueError, ("the queries x_q @ W_q overflow float32", "|W_q| = 1e+10")),
    ("keys overflow (with biases)",
     lambda: (x(dtype=np.float32), huge((2, 4, 8), 1e30),
              params(dtype=np.float32, W_k=huge((8, 8), 1e10)), None),
     ValueError, ("the keys x_kv @ W_k + b_k overflow float32", "|x_kv| = 1e+30")),
    ("values overflow", lambda: (positive_x32(), positive_x32(),
                                 params(dtype=np.float32, bias=False, W_v=huge((8, 8), 1e38)),
                                 None),
     ValueError, ("the values x_kv @ W_v overflow float32",)),
    ("values overflow, at keys no query may attend",
     lambda: (x(dtype=np.float32), np.concatenate([np.ones((2, 2, 8), np.float32),
                                                   huge((2, 1, 8), 1e30)], axis=1),
              params(dtype=np.float32, bias=False, W_v=huge((8, 8), 1e10)), only_key_0()),
     ValueError, ("the values x_kv @ W_v overflow float32",)),
    ("scores overflow (to -inf), at pairs no query may attend",
     lambda: (huge((2, 3, 8), 3e19), np.concatenate([np.ones((2, 2, 8), np.float32),
                                                     huge((2, 1, 8), -3e19)], axis=1),
              identity_qk_params(), only_key_0()),
     ValueError, ("the scores q k^T / sqrt(d_k) overflow float32",)),
    ("output overflows", lambda: (positive_x32(), positive_x32(), overflowing_output_params(),
                                  None),
     ValueError, ("the output", "overflow float32", "|W_o| = 3e+38")),
]  # fmt: skip


def huge_values_params(dtype=np.float32):
    """W_q = W_k = a I, with a^2 = 14.95: x = ones gives every score 4 a^2 / sqrt(4) = 29.9, so
    exp(score) is about 1e13; W_v = 1e25 makes every value 8e25. The answer (the values' mean,
    then W_o = I) is 8e25; exp(score) times a value is not a float32 number."""
    a = np.eye(8, dtype=dtype) * np.sqrt(dtype(14.95))
    return params(bias=False, dtype=dtype, W_q=a, W_k=a.copy(), W_v=huge((8, 8), 1e25, dtype),
                  W_o=np.eye(8, dtype=dtype))  # fmt: skip


def as_float64(p):
    return dataclasses.replace(p, **{
        n: getattr(p, n).astype(np.float64) for n in valid.PARAM_NAMES if getattr(p, n) is not None
    })  # fmt: skip


def close_to(want, dtype, tol):
    """A check of a forward's output: its dtype, and within tol of want (relative)."""

    def check(forward, out):
        if out.dtype != dtype:
            raise AssertionError(f"the output is {out.dtype}, not {np.dtype(dtype)}")
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.abs(want).max())

    return check


def mixed(x_dtype, param_dtypes):
    """(args, check): x in x_dtype, params with some arrays in float32 (the rest float64); the
    check wants float64 and the forward's answer on float64 copies of the same numbers."""

    def args():
        p = params(h=4)  # d_k = 2: 1/sqrt(d_k) is not a power of two, so float32 rounds it
        p = dataclasses.replace(p, **{n: getattr(p, n).astype(t) for n, t in param_dtypes.items()})
        a = x(dtype=x_dtype)
        return a, a, p, A.causal_mask(3)

    def check(forward, out):
        a, _, p, mask = args()
        a64 = a.astype(np.float64)
        want = forward(a64, a64, as_float64(p), mask)[0]
        close_to(want, np.float64, 1e-12)(forward, out)

    return args, check


ALL_F32 = {n: np.float32 for n in valid.PARAM_NAMES}
WEIGHTS_F32 = {n: np.float32 for n in valid.WEIGHT_NAMES}

# (rule, arguments built when called, a check of (forward, output) that raises when it is wrong)
ACCEPTED_FORWARD_RULES = [
    ("huge values whose weighted mean fits: not an overflow",
     lambda: (np.ones((2, 3, 8), np.float32),) * 2 + (huge_values_params(), None),
     close_to(np.full((2, 3, 8), 8e25), np.float32, 1e-5)),
    ("float32 params, float64 inputs: computed in float64", *mixed(np.float64, ALL_F32)),
    ("float64 biases, float32 inputs and weights: computed in float64",
     *mixed(np.float32, WEIGHTS_F32)),
]  # fmt: skip


def forward_rows():
    for name, forward in FORWARDS.items():
        for rule, args, error, fragments in FORWARD_RULES:
            yield Row(name, rule, lambda f=forward, a=args: f(*a()), error, fragments)
    for name, forward in FORWARDS.items():
        for rule, args, check in ACCEPTED_FORWARD_RULES:
            yield Row(name, rule, lambda f=forward, a=args, c=check: c(f, f(*a())[0]), None)


# --------------------------------------------------------------------------- the rest


def model(**changes):
    m = T.init_tiny_model(5, 7, 8, 2, 4, rng())
    for name, (at, value) in changes.items():
        m.params[name][at] = value
    return m


def ids():
    return np.array([[0, 1, 2, 3], [4, 3, 2, 1]])


def targets():
    return np.array([[1, 2, 3, -1], [0, 1, 2, 3]])


def mha_cache(dtype=np.float64, bias=True):
    _, _, cache = BP.mha_forward(x(dtype=dtype), x(dtype=dtype), params(bias, dtype))
    return cache


def tiny_cache(m):
    _, _, cache = m.forward(ids())
    return cache


def lists_mha(X_q=None, X_kv=None, W=None, n_heads=2, mask=None, **weights):
    r = np.random.default_rng(3)
    X = r.normal(size=(3, 4)).tolist() if X_q is None else X_q
    W = r.uniform(-0.5, 0.5, (4, 4)).tolist() if W is None else W
    Ws = {name: weights.get(name, W) for name in ("W_q", "W_k", "W_v", "W_o")}
    return L.multi_head_attention(X, X if X_kv is None else X_kv, *Ws.values(), n_heads, mask)


def nan_module():
    import torch
    from torch import nn

    module = nn.MultiheadAttention(4, 2, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        module.in_proj_weight[1, 2] = float("nan")
    return module


def kdim_module():
    from torch import nn

    return nn.MultiheadAttention(6, 2, kdim=4)


def tb():
    from lib import torch_bridge

    return torch_bridge


def W4():
    return np.eye(4)


def finite_result(fn):
    """Call fn; an output holding NaN or inf is a failure (the input was valid)."""
    out = fn()
    if not np.isfinite(out).all():
        raise AssertionError("the output is not finite")
    return out


def gqa(bias=True, dtype=np.float64, **changes) -> A.MHAParams:
    p = A.init_mha_params(8, 4, rng(), bias=bias, dtype=dtype, n_kv_heads=2)
    return dataclasses.replace(p, **changes) if changes else p


def decoder(p=None, **kw):
    return KV.Decoder(gqa() if p is None else p, **kw)


def stepped(dec, *xs):
    """Run a decoder on each input in turn; returns the last output."""
    out = None
    for a in xs:
        out = dec(a)
    return out


def huge_value_decoder():
    """float32 W_v = 1e37: every value is about 1e37, finite; the output, W_o's weighted
    sums of them, overflows."""
    p = gqa(bias=False, dtype=np.float32)
    p.W_v[:] = 1e37
    p.W_o[:] = 1e3
    return decoder(p)


def score_bias_gradient_shape():
    _, _, cache = BP.mha_forward(x(), x(), params(), score_bias=np.ones(3))  # bias (n_k,)
    assert BP.mha_backward(x(), cache)["score_bias"].shape == (3,)


def tiny_task(n, seq_len, r):
    return T.copy_offsets_task(n, seq_len, 5, (1,), r)


def mixed_core(core):
    """A float32 q with float64 k and v (d_k = 2): the output must be float64 and equal the
    core's answer on float64 copies."""
    r = rng()
    q, k, v = r.normal(size=(3, 2)).astype(np.float32), r.normal(size=(4, 2)), r.normal(size=(4, 3))

    def first(out):
        return out[0] if isinstance(out, tuple) else out

    want = first(core(q.astype(np.float64), k, v))
    close_to(want, np.float64, 1e-12)(core, first(core(q, k, v)))


def masked_overflow_params():
    """One head, d = 2: token 0 = (1, 0) has the query (1e20, 0), token 1 = (0, 1) the key
    (1e20, 0), every other query and key is 0. Only the score of query 0 with key 1, which a
    causal mask hides, overflows float32; every forward refuses it all the same."""
    W_q = np.array([[1e20, 0.0], [0.0, 0.0]], np.float32)
    W_k = np.array([[0.0, 0.0], [1e20, 0.0]], np.float32)
    return A.MHAParams(W_q, W_k, np.eye(2, dtype=np.float32), np.eye(2, dtype=np.float32), 1)


def decoded(p, xs):
    """The outputs of a decoder of p fed each of xs in turn, concatenated."""
    dec = decoder(p)
    return np.concatenate([dec(a) for a in xs], axis=-2)


def huge_values_decoded(one_token_at_a_time: bool):
    p = huge_values_params()
    xs = [np.ones((1, 8), np.float32)] * 3 if one_token_at_a_time else [np.ones((3, 8), np.float32)]
    close_to(np.full((3, 8), 8e25), np.float32, 1e-5)(None, decoded(p, xs))


def mixed_decoded(one_token_at_a_time: bool):
    """float64 tokens into a decoder of float32 weights (d_k = 2)."""
    a = x((3, 8))
    xs = [a[i : i + 1] for i in range(3)] if one_token_at_a_time else [a]
    p = gqa(dtype=np.float32)
    want = decoded(as_float64(p), xs)
    close_to(want, np.float64, 1e-12)(None, decoded(p, xs))


EXPERIMENT = dict(vocab_size=5, n_classes=5, d_model=8, n_heads=2, batch=4, n_eval=4)
E = ValueError
q3 = np.ones((3, 4))
q3_32 = q3.astype(np.float32)  # float32 values: the scores of float32 q and k stay float32
OTHER_ROWS = [
    # scaled_dot_product_attention
    Row("scaled_dot_product_attention", "NaN in k",
        lambda: A.scaled_dot_product_attention(q3, x((5, 4), at=(2, 1)), x((5, 2))), E,
        ("k contains NaN or inf (first at index (2, 1), shape (5, 4))",)),
    Row("scaled_dot_product_attention", "inf in v",
        lambda: A.scaled_dot_product_attention(q3, q3, x((3, 2), at=(0, 0), value=-np.inf)), E,
        ("v contains NaN or inf (first at index (0, 0)",)),
    Row("scaled_dot_product_attention", "one axis",
        lambda: A.scaled_dot_product_attention(np.ones(4), q3, q3), E,
        ("q must be (..., n, d), with at least 2 axes, got shape (4,)",)),
    Row("scaled_dot_product_attention", "d_k differs",
        lambda: A.scaled_dot_product_attention(q3, np.ones((3, 5)), q3), E,
        ("q and k must share d_k >= 1 (last axis): q is (3, 4), k is (3, 5)",)),
    Row("scaled_dot_product_attention", "d_k = 0",
        lambda: A.scaled_dot_product_attention(np.ones((3, 0)), np.ones((3, 0)), q3), E,
        ("must share d_k >= 1",)),
    Row("scaled_dot_product_attention", "numbers of keys differ",
        lambda: A.scaled_dot_product_attention(q3, q3, np.ones((4, 2))), E,
        ("k and v must have the same number of keys (axis -2): k is (3, 4), v is (4, 2)",)),
    Row("scaled_dot_product_attention", "batch axes differ",
        lambda: A.scaled_dot_product_attention(np.ones((2, 3, 4)), np.ones((5, 3, 4)),
                                               np.ones((5, 3, 1))), E,
        ("leading (batch) axes of q, k, v must broadcast together",)),
    Row("scaled_dot_product_attention", "additive float mask",
        lambda: A.scaled_dot_product_attention(q3, q3, q3, np.zeros((3, 3))), E,
        ("mask must be boolean, True = may attend", "`mask == 0`")),
    Row("scaled_dot_product_attention", "mask that does not broadcast",
        lambda: A.scaled_dot_product_attention(q3, q3, q3, np.ones((4, 4), bool)), E,
        ("mask of shape (4, 4) cannot broadcast to the attention scores' shape (3, 3)",)),
    Row("scaled_dot_product_attention", "scores overflow",
        lambda: A.scaled_dot_product_attention(huge((2, 4), 1e20), huge((3, 4), 1e20), q3_32), E,
        ("the scores q k^T / sqrt(d_k) overflow float32",)),
    Row("scaled_dot_product_attention", "complex input",
        lambda: A.scaled_dot_product_attention(q3 * 1j, q3, q3), E,
        ("q must hold real numbers",)),
    Row("scaled_dot_product_attention", "float32 q, float64 k and v: computed in float64",
        lambda: mixed_core(A.scaled_dot_product_attention), None),
    Row("scaled_dot_product_attention", "lists are converted",
        lambda: A.scaled_dot_product_attention(q3.tolist(), q3.tolist(), q3.tolist()), None),
    # softmax
    Row("softmax", "NaN", lambda: A.softmax(x((2, 3), at=(1, 2))), E,
        ("softmax input contains NaN or +inf (first at index (1, 2), shape (2, 3))",)),
    Row("softmax", "+inf", lambda: A.softmax([0.0, np.inf]), E, ("NaN or +inf",)),
    Row("softmax", "booleans", lambda: A.softmax(np.ones(3, bool)), E,
        ("softmax input must hold real numbers, got booleans",)),
    Row("softmax", "-inf (masked) and lists are accepted", lambda: A.softmax([0.0, -np.inf]),
        None),
    # masks
    Row("causal_mask", "negative", lambda: A.causal_mask(-1), E,
        ("n_q must be an integer >= 0, got -1",)),
    Row("causal_mask", "bool", lambda: A.causal_mask(3, True), E,
        ("n_k must be an integer >= 0, got True (bool)",)),
    Row("causal_mask", "float", lambda: A.causal_mask(3.0), E, ("got 3.0 (float)",)),
    Row("padding_mask", "negative n_k", lambda: A.padding_mask([1], -1), E,
        ("n_k must be an integer >= 0, got -1",)),
    Row("padding_mask", "float lengths", lambda: A.padding_mask([1.5], 3), E, ("integers",)),
    # heads
    Row("split_heads", "rank", lambda: A.split_heads(np.ones((2, 6)), 2), E,
        ("x must be (batch, seq, d_model), got shape (2, 6)",)),
    Row("split_heads", "bool head count", lambda: A.split_heads(np.ones((1, 2, 6)), True), E,
        ("n_heads must be an integer >= 1, got True (bool)",)),
    Row("split_heads", "indivisible", lambda: A.split_heads(np.ones((1, 2, 6)), 4), E,
        ("d_model=6 is not divisible by n_heads=4; valid head counts for d_model=6 are "
         "[1, 2, 3, 6]",)),
    Row("merge_heads", "rank", lambda: A.merge_heads(np.ones((2, 6))), E,
        ("x must be (batch, heads, seq, d_k), got shape (2, 6)",)),
    # MHAParams and init_mha_params
    Row("MHAParams", "some biases missing",
        lambda: A.MHAParams(W4(), W4(), W4(), W4(), 2, np.zeros(4), None, np.zeros(4),
                            np.zeros(4)), E,
        ("MHAParams takes all four biases or none, got b_q, b_v, b_o without b_k",
         "pass zeros for a bias")),
    Row("MHAParams", "bool head count", lambda: A.MHAParams(W4(), W4(), W4(), W4(), True), E,
        ("n_heads must be an integer >= 1, got True (bool)",)),
    Row("MHAParams", "float head count", lambda: A.MHAParams(W4(), W4(), W4(), W4(), 2.0), E,
        ("n_heads must be an integer >= 1, got 2.0 (float)",)),
    Row("MHAParams", "no heads", lambda: A.MHAParams(W4(), W4(), W4(), W4(), 0), E,
        ("n_heads must be an integer >= 1, got 0",)),
    Row("MHAParams", "indivisible", lambda: A.MHAParams(W4(), W4(), W4(), W4(), 3), E,
        ("valid head counts for d_model=4 are [1, 2, 4]",)),
    Row("MHAParams", "d_model = 0",
        lambda: A.MHAParams(*[np.zeros((0, 0))] * 4, n_heads=1), E,
        ("d_model must be an integer >= 1, got 0",)),
    Row("MHAParams", "not square", lambda: A.MHAParams(W4(), W4(), W4(), np.ones((4, 3)), 2),
        E, ("W_o must be (d_model, d_model) = (4, 4), got (4, 3)",)),
    Row("MHAParams", "bias shape",
        lambda: A.MHAParams(W4(), W4(), W4(), W4(), 2, *[np.zeros(4)] * 3, np.zeros(3)), E,
        ("b_o must have shape (d_model,) = (4,), got (3,)",)),
    Row("MHAParams", "strings", lambda: A.MHAParams([["a"] * 4] * 4, W4(), W4(), W4(), 2), E,
        ("W_q must hold real numbers, got dtype <U1",)),
    Row("MHAParams", "lists are converted",
        lambda: A.multi_head_attention(x((1, 2, 4)), x((1, 2, 4)),
                                       A.MHAParams(*[W4().tolist()] * 4, 2)), None),
    Row("MHAParams", "changed copy checked again",
        lambda: dataclasses.replace(params(), b_q=None), E, ("all four biases or none",)),
    Row("init_mha_params", "d_model = 0", lambda: A.init_mha_params(0, 1, rng()), E,
        ("d_model must be an integer >= 1, got 0",)),
    Row("init_mha_params", "float head count", lambda: A.init_mha_params(8, 2.5, rng()), E,
        ("n_heads must be an integer >= 1, got 2.5 (float)",)),
    Row("init_mha_params", "integer dtype", lambda: A.init_mha_params(8, 2, rng(), dtype=int),
        E, ("dtype must be a floating-point dtype",)),
    # backprop
    Row("backprop.mha_forward", "head_mask shape",
        lambda: BP.mha_forward(x(), x(), params(), None, np.ones(3)), E,
        ("head_mask must have shape (heads,) = (2,) or (batch, heads) = (2, 2), got (3,)",)),
    Row("backprop.mha_forward", "NaN in head_mask",
        lambda: BP.mha_forward(x(), x(), params(), None, [1.0, np.nan]), E,
        ("head_mask contains NaN or inf (first at index (1,)",)),
    Row("backprop.mha_forward", "head_mask as a list",
        lambda: BP.mha_forward(x(), x(), params(), None, [1.0, 0.5]), None),
    Row("backprop.mha_backward", "NaN in d_out",
        lambda: BP.mha_backward(x(at=(0, 2, 1)), mha_cache()), E,
        ("d_out contains NaN or inf (first at index (0, 2, 1)",)),
    Row("backprop.mha_backward", "d_out shape",
        lambda: BP.mha_backward(np.ones((2, 2, 8)), mha_cache()), E,
        ("d_out must have the output's shape (2, 3, 8), got (2, 2, 8)",)),
    Row("backprop.mha_backward", "d_out as lists", lambda: BP.mha_backward(
        x().tolist(), mha_cache()), None),
    Row("backprop.mha_backward", "gradients overflow",
        lambda: BP.mha_backward(huge((2, 3, 8), 3e38), mha_cache(np.float32)), E,
        ("the gradient of", "overflow float32")),
    Row("backprop.softmax_backward", "NaN in weights",
        lambda: BP.softmax_backward(x((2, 3), at=(0, 1)), np.ones((2, 3))), E,
        ("weights contains NaN or inf (first at index (0, 1)",)),
    Row("backprop.softmax_backward", "inf in d_weights",
        lambda: BP.softmax_backward(np.ones((2, 3)), x((2, 3), at=(1, 1), value=np.inf)), E,
        ("d_weights contains NaN or inf (first at index (1, 1)",)),
    Row("backprop.softmax_backward", "lists are converted",
        lambda: BP.softmax_backward([[0.5, 0.5]], [[1.0, 0.0]]), None),
    # tiny
    Row("tiny.init_tiny_model", "float head count",
        lambda: T.init_tiny_model(5, 7, 8, 2.0, 4, rng()), E,
        ("n_heads must be an integer >= 1, got 2.0 (float)",)),
    Row("tiny.init_tiny_model", "indivisible", lambda: T.init_tiny_model(5, 7, 6, 4, 4, rng()),
        E, ("valid head counts for d_model=6 are [1, 2, 3, 6]",)),
    Row("tiny.init_tiny_model", "bool vocabulary",
        lambda: T.init_tiny_model(True, 7, 8, 2, 4, rng()), E,
        ("vocab_size must be an integer >= 1, got True (bool)",)),
    Row("tiny.init_tiny_model", "no classes", lambda: T.init_tiny_model(5, 7, 8, 2, 0, rng()),
        E, ("n_classes must be an integer >= 1, got 0",)),
    Row("tiny.init_tiny_model", "integer dtype",
        lambda: T.init_tiny_model(5, 7, 8, 2, 4, rng(), dtype=int), E,
        ("dtype must be a floating-point dtype",)),
    Row("tiny.TinyModel.forward", "NaN in an embedding",
        lambda: model(tok_emb=((4, 1), np.nan)).forward(ids()), E,
        ("tok_emb contains NaN or inf (first at index (4, 1), shape (5, 8))",)),
    Row("tiny.TinyModel.forward", "NaN in an attention weight",
        lambda: model(W_k=((0, 0), np.nan)).forward(ids()), E,
        ("params.W_k contains NaN or inf",)),
    Row("tiny.TinyModel.forward", "logits overflow",
        lambda: model(W_out=(slice(None), 1e308)).forward(ids()), E,
        ("the logits a @ W_out + b_out overflow float64",)),
    Row("tiny.TinyModel.backward", "NaN in d_logits",
        lambda: (lambda m: m.backward(x((2, 4, 1, 4), at=(1, 1, 0, 1)), tiny_cache(m)))(model()),
        E, ("d_logits contains NaN or inf (first at index (1, 1, 0, 1)",)),
    Row("tiny.TinyModel.backward", "d_logits as lists",
        lambda: (lambda m: m.backward(x((2, 4, 1, 4)).tolist(), tiny_cache(m)))(model()), None),
    Row("tiny.TinyModel.backward", "gradients of the readout overflow",
        lambda: (lambda m: m.backward(np.full((2, 4, 1, 4), 1e308), tiny_cache(m)))(
            model(W_out=(slice(None), 1e-12))), E,
        ("the gradient of W_out (from d_out) overflow float64",)),
    Row("tiny.cross_entropy", "NaN in logits",
        lambda: T.cross_entropy(x((2, 4, 3), at=(0, 0, 2)), np.zeros((2, 4), int)), E,
        ("logits contains NaN or inf (first at index (0, 0, 2)",)),
    Row("tiny.cross_entropy", "logits as lists",
        lambda: T.cross_entropy(x((2, 4, 3)).tolist(), np.zeros((2, 4), int)), None),
    Row("tiny.TinyModel.loss_and_grads", "a valid batch", lambda: model().loss_and_grads(
        ids(), targets()), None),
    Row("tiny.repeating_pattern_task", "bool count",
        lambda: T.repeating_pattern_task(True, 6, 5, 2, rng()), E,
        ("n_seqs must be an integer >= 1, got True (bool)",)),
    Row("tiny.repeating_pattern_task", "one token", lambda: T.repeating_pattern_task(
        4, 6, 1, 2, rng()), E, ("vocab_size must be an integer >= 2, got 1",)),
    Row("tiny.copy_offsets_task", "too short",
        lambda: T.copy_offsets_task(4, 1, 5, (1,), rng()), E,
        ("seq_len must be an integer >= 2, got 1",)),
    Row("tiny.last_marked_task", "every token marked",
        lambda: T.last_marked_task(4, 6, 5, 5, rng()), E,
        ("n_marked must be below vocab_size=5 (some tokens unmarked), got 5",)),
    Row("tiny.last_marked_task", "no token marked",
        lambda: T.last_marked_task(4, 6, 5, 0, rng()), E,
        ("n_marked must be an integer >= 1, got 0",)),
    # tiny: position schemes (notebook 09)
    Row("tiny.init_tiny_model", "unknown position scheme",
        lambda: T.init_tiny_model(5, 7, 8, 2, 4, rng(), positions="rotary"), E,
        ("positions must be one of 'none', 'learned', 'sinusoidal', 'rope', 'alibi', "
         "got 'rotary'",)),
    Row("tiny.init_tiny_model", "RoPE with an odd d_k",
        lambda: T.init_tiny_model(5, 7, 6, 2, 4, rng(), positions="rope"), E,
        ("d_k must be even (RoPE turns pairs of coordinates), got 3",)),
    Row("tiny.TinyModel.forward", "unknown position scheme",
        lambda: T.TinyModel(model().params, 2, positions="relative").forward(ids()), E,
        ("positions must be one of", "got 'relative'")),
    Row("tiny.TinyModel.forward", "RoPE: longer than max_len is fine",
        lambda: T.init_tiny_model(5, 3, 8, 2, 4, rng(), positions="rope").forward(ids()), None),
    Row("tiny.position_experiment", "no steps",
        lambda: T.position_experiment(tiny_task, ("none",), (0,), 0, 4, (4,), **EXPERIMENT), E,
        ("n_steps must be an integer >= 1, got 0",)),
    Row("tiny.position_experiment", "train_len 1",
        lambda: T.position_experiment(tiny_task, ("none",), (0,), 1, 1, (4,), **EXPERIMENT), E,
        ("train_len must be an integer >= 2, got 1",)),
    Row("tiny.position_experiment", "float test length",
        lambda: T.position_experiment(tiny_task, ("none",), (0,), 1, 4, (8.0,), **EXPERIMENT), E,
        ("test length must be an integer >= 2, got 8.0 (float)",)),
    Row("tiny.position_experiment", "test length below train_len",
        lambda: T.position_experiment(tiny_task, ("none",), (0,), 1, 4, (3,), **EXPERIMENT), E,
        ("test lengths must be >= train_len=4, got 3",)),
    # positions
    Row("positions.sinusoidal_table", "negative length", lambda: POS.sinusoidal_table(-1, 4), E,
        ("n must be an integer >= 0, got -1",)),
    Row("positions.sinusoidal_table", "float length", lambda: POS.sinusoidal_table(2.5, 4), E,
        ("n must be an integer >= 0, got 2.5 (float)",)),
    Row("positions.sinusoidal_table", "d_model = 0", lambda: POS.sinusoidal_table(3, 0), E,
        ("d_model must be an integer >= 1, got 0",)),
    Row("positions.sinusoidal_table", "odd d_model", lambda: POS.sinusoidal_table(3, 7), E,
        ("d_model must be even (sin and cos come in pairs), got 7",)),
    Row("positions.sinusoidal_table", "negative base",
        lambda: POS.sinusoidal_table(3, 4, base=-1.0), E,
        ("base must be a finite number > 1, got -1.0",)),
    Row("positions.sinusoidal_table", "subnormal base (its frequencies overflow)",
        lambda: POS.sinusoidal_table(3, 64, base=5e-324), E,
        ("base must be a finite number > 1", "got 5e-324")),
    Row("positions.sinusoidal_table", "base 1", lambda: POS.sinusoidal_table(3, 4, base=1.0), E,
        ("base must be a finite number > 1, got 1.0",)),
    Row("positions.sinusoidal_table", "integer dtype",
        lambda: POS.sinusoidal_table(3, 4, dtype=int), E, ("dtype must be a floating-point",)),
    Row("positions.sinusoidal_shift", "float shift", lambda: POS.sinusoidal_shift(1.5, 4), E,
        ("k must be an integer, got 1.5 (float)",)),
    Row("positions.sinusoidal_shift", "bool shift", lambda: POS.sinusoidal_shift(True, 4), E,
        ("k must be an integer, got True (bool)",)),
    Row("positions.sinusoidal_shift", "d_model = 0", lambda: POS.sinusoidal_shift(1, 0), E,
        ("d_model must be an integer >= 1, got 0",)),
    Row("positions.sinusoidal_shift", "odd d_model", lambda: POS.sinusoidal_shift(1, 5), E,
        ("d_model must be even (sin and cos come in pairs), got 5",)),
    Row("positions.sinusoidal_shift", "base 0", lambda: POS.sinusoidal_shift(1, 4, 0.0), E,
        ("base must be a finite number > 1, got 0.0",)),
    Row("positions.sinusoidal_shift", "base below 1",
        lambda: POS.sinusoidal_shift(1, 4, 0.5), E, ("base must be a finite number > 1, got 0.5",)),
    Row("positions.sinusoidal_shift", "negative shifts are fine",
        lambda: POS.sinusoidal_shift(-3, 4), None),
    Row("positions.RoPE", "negative base", lambda: POS.RoPE(-1.0), E,
        ("base must be a finite number > 1, got -1.0",)),
    Row("positions.RoPE", "base as a string", lambda: POS.RoPE("10000"), E,
        ("base must be a number > 1, got '10000' (str)",)),
    Row("positions.RoPE", "subnormal base", lambda: POS.RoPE(1e-310), E,
        ("base must be a finite number > 1, got 1e-310",)),
    Row("positions.RoPE", "unknown layout", lambda: POS.RoPE(layout="split"), E,
        ("layout must be one of 'half', 'interleaved', got 'split'",)),
    Row("positions.rope_rotate", "one axis", lambda: POS.rope_rotate(np.ones(4), [0]), E,
        ("x must be (..., n, d_k), with at least 2 axes, got shape (4,)",)),
    Row("positions.rope_rotate", "odd d_k", lambda: POS.rope_rotate(np.ones((2, 3)), [0, 1]), E,
        ("d_k must be even (RoPE turns pairs of coordinates), got 3",)),
    Row("positions.rope_rotate", "float positions",
        lambda: POS.rope_rotate(np.ones((2, 4)), [0.0, 1.5]), E,
        ("positions must be a 1-D array of integers, got float64 (2,)",)),
    Row("positions.rope_rotate", "positions of the wrong length",
        lambda: POS.rope_rotate(np.ones((2, 4)), [0, 1, 2]), E,
        ("positions has 3 entries but there are 2 tokens (axis -2)",)),
    Row("positions.rope_rotate", "NaN in x",
        lambda: POS.rope_rotate(x((2, 3, 4), at=(1, 2, 0)), np.arange(3)), E,
        ("x contains NaN or inf (first at index (1, 2, 0), shape (2, 3, 4))",)),
    Row("positions.rope_rotate", "complex x",
        lambda: POS.rope_rotate(np.ones((2, 4)) * 1j, [0, 1]), E,
        ("x must hold real numbers, got dtype complex128",)),
    Row("positions.rope_rotate", "unknown layout",
        lambda: POS.rope_rotate(np.ones((2, 4)), [0, 1], layout="neox"), E,
        ("layout must be one of 'half', 'interleaved'",)),
    Row("positions.rope_rotate", "subnormal base (its frequencies overflow)",
        lambda: POS.rope_rotate(np.ones((2, 64)), [0, 1], base=5e-324), E,
        ("base must be a finite number > 1", "got 5e-324")),
    Row("positions.rope_rotate", "turned pairs that overflow",
        lambda: POS.rope_rotate(huge((2, 2), 3e38), [0, 1]), E,
        ("x turned by RoPE overflow float32", "|x| = 3e+38")),
    Row("positions.rope_rotate", "boolean positions",
        lambda: POS.rope_rotate(np.ones((2, 4)), [True, False]), E,
        ("positions must be a 1-D array of integers, got bool (2,)",)),
    Row("positions.rope_rotate", "no tokens: positions an empty list",
        lambda: POS.rope_rotate(np.ones((0, 4)), []), None),
    Row("positions.rope_rotate", "lists are converted",
        lambda: POS.rope_rotate([[1.0, 2.0], [3.0, 4.0]], [0, 1]), None),
    Row("positions.alibi_slopes", "no heads", lambda: POS.alibi_slopes(0), E,
        ("n_heads must be an integer >= 1, got 0",)),
    Row("positions.alibi_slopes", "float head count", lambda: POS.alibi_slopes(4.0), E,
        ("n_heads must be an integer >= 1, got 4.0 (float)",)),
    Row("positions.alibi_bias", "negative n_q", lambda: POS.alibi_bias(-1, 3, [0.5]), E,
        ("n_q must be an integer >= 0, got -1",)),
    Row("positions.alibi_bias", "float n_k", lambda: POS.alibi_bias(2, 2.5, [0.5]), E,
        ("n_k must be an integer >= 0, got 2.5 (float)",)),
    Row("positions.alibi_bias", "slopes of two axes",
        lambda: POS.alibi_bias(2, 3, np.ones((2, 1))), E,
        ("slopes must be (heads,), got shape (2, 1)",)),
    Row("positions.alibi_bias", "NaN slope", lambda: POS.alibi_bias(2, 3, [0.5, np.nan]), E,
        ("slopes contains NaN or inf (first at index (1,), shape (2,))",)),
    Row("positions.alibi_bias", "string slopes", lambda: POS.alibi_bias(2, 3, ["a"]), E,
        ("slopes must hold real numbers, got dtype <U1",)),
    Row("positions.alibi_bias", "a bias that overflows",
        lambda: POS.alibi_bias(3, 3, huge((1,), 3e38)), E,
        ("ALiBi's bias -slopes * |i - j| overflow float32", "|slopes| = 3e+38")),
    Row("positions.query_positions", "negative n_q", lambda: POS.query_positions(-1, 3), E,
        ("n_q must be an integer >= 0, got -1",)),
    Row("positions.query_positions", "float n_k", lambda: POS.query_positions(2, 3.0), E,
        ("n_k must be an integer >= 0, got 3.0 (float)",)),
    Row("positions.query_positions", "bool n_q", lambda: POS.query_positions(True, 3), E,
        ("n_q must be an integer >= 0, got True (bool)",)),
    Row("positions.query_positions", "more queries than keys",
        lambda: POS.query_positions(3, 1), None),
    Row("positions.alibi_bias", "lists are converted",
        lambda: POS.alibi_bias(2, 3, [0.5, 0.25]), None),
    # backprop: positions
    Row("backprop.mha_forward", "rope not a RoPE",
        lambda: BP.mha_forward(x(), x(), params(), rope="half"), E,
        ("rope must be a lib.positions.RoPE, got str",)),
    Row("backprop.mha_forward", "RoPE with an odd d_k",
        lambda: BP.mha_forward(x((2, 3, 6)), x((2, 3, 6)), params(d=6, h=2), rope=POS.RoPE()), E,
        ("d_k must be even (RoPE turns pairs of coordinates), got 3",)),
    Row("backprop.mha_forward", "score_bias that would grow the scores",
        lambda: BP.mha_forward(x(), x(), params(), score_bias=np.zeros((1, 1, 1, 3, 3))), E,
        ("score_bias of shape (1, 1, 1, 3, 3) cannot broadcast to the attention scores' "
         "shape (2, 2, 3, 3) (batch, heads, n_q, n_k)",)),
    Row("backprop.mha_forward", "NaN in score_bias",
        lambda: BP.mha_forward(x(), x(), params(), score_bias=x((3, 3), at=(2, 1))), E,
        ("score_bias contains NaN or inf (first at index (2, 1), shape (3, 3))",)),
    Row("backprop.mha_forward", "boolean score_bias",
        lambda: BP.mha_forward(x(), x(), params(), score_bias=np.ones((3, 3), bool)), E,
        ("score_bias must hold real numbers, got booleans",)),
    Row("backprop.mha_forward", "scores + score_bias overflow",
        lambda: BP.mha_forward(huge((2, 3, 8), 1e18), huge((2, 3, 8), 1e18),
                              identity_qk_params(), score_bias=huge((3, 3), 3.4e38)), E,
        ("the scores q k^T / sqrt(d_k) + score_bias overflow float32",)),
    Row("backprop.mha_forward", "turned scores overflow",
        lambda: BP.mha_forward(huge((2, 3, 8), 1e18), huge((2, 3, 8), 1e18),
                              identity_qk_params(), rope=POS.RoPE(),
                              score_bias=huge((3, 3), 3.4e38)), E,
        ("the scores q k^T / sqrt(d_k) turned by RoPE + score_bias overflow float32",)),
    Row("backprop.mha_backward", "score_bias's gradient has its shape",
        lambda: score_bias_gradient_shape(), None),
    # lists
    Row("lists.softmax", "NaN", lambda: L.softmax([0.0, float("nan")]), E,
        ("softmax input contains NaN or +inf (first at index (1,), shape (2,))",)),
    Row("lists.softmax", "bool", lambda: L.softmax([1.0, True]), E,
        ("softmax input must hold real numbers, got True (bool) at index (1,)",)),
    Row("lists.softmax", "not a list", lambda: L.softmax(np.zeros(3)), E,
        ("softmax input must be a list of numbers, got ndarray",)),
    Row("lists.attention", "additive float mask",
        lambda: L.attention([[1.0]], [[1.0], [2.0]], [[1.0], [2.0]], [[0.0, float("-inf")]]), E,
        ("mask must be boolean, True = may attend, got 0.0 (float) at index (0, 0)",
         "[[x == 0 for x in row] for row in mask]")),
    Row("lists.attention", "0/1 mask", lambda: L.attention([[1.0]], [[1.0]], [[1.0]], [[1]]),
        E, ("mask must be boolean", "[[x == 1 for x in row] for row in mask]")),
    Row("lists.attention", "NaN in Q",
        lambda: L.attention([[1.0], [float("nan")]], [[1.0]], [[1.0]]), E,
        ("Q contains NaN or inf (first at index (1, 0), shape (2, 1))",)),
    Row("lists.attention", "inf in K", lambda: L.attention([[1.0]], [[float("-inf")]], [[1.0]]),
        E, ("K contains NaN or inf (first at index (0, 0), shape (1, 1))",)),
    Row("lists.attention", "NaN in V", lambda: L.attention([[1.0]], [[1.0]], [[float("nan")]]),
        E, ("V contains NaN or inf (first at index (0, 0), shape (1, 1))",)),
    Row("lists.attention", "a NumPy array", lambda: L.attention(np.ones((1, 1)), [[1.0]],
                                                                [[1.0]]), E,
        ("Q must be a list of rows (lists), got a NumPy array: pass Q.tolist()",)),
    Row("lists.attention", "strings", lambda: L.attention([["a"]], [[1.0]], [[1.0]]), E,
        ("Q must hold real numbers, got 'a' (str) at index (0, 0)",)),
    Row("lists.attention", "d_k differs",
        lambda: L.attention([[1.0, 2.0]], [[1.0]], [[1.0]]), E,
        ("Q and K must share d_k >= 1 (last axis): Q is (1, 2), K is (1, 1)",)),
    Row("lists.attention", "numbers of keys differ",
        lambda: L.attention([[1.0]], [[1.0]], [[1.0], [2.0]]), E,
        ("K and V must have the same number of keys (axis -2): K is (1, 1), V is (2, 1)",)),
    Row("lists.attention", "mask shape",
        lambda: L.attention([[1.0]], [[1.0]], [[1.0]], [[True, True]]), E,
        ("mask of shape (1, 2) does not match the attention scores' shape (1, 1)",)),
    Row("lists.attention", "ragged", lambda: L.attention([[1.0], [1.0, 2.0]], [[1.0]], [[1.0]]),
        E, ("Q is ragged: row 0 has 1 entries but row 1 has 2",)),
    Row("lists.attention", "scores overflow",
        lambda: L.attention([[1e200]], [[1e200]], [[1.0]]), E,
        ("the scores q k^T / sqrt(d_k) overflow float64",)),
    Row("lists.attention", "queries without keys", lambda: L.attention([[1.0]], [], []), E,
        ("got queries but no keys",)),
    Row("lists.multi_head_attention", "no heads", lambda: lists_mha(n_heads=0), E,
        ("n_heads must be an integer >= 1, got 0",)),
    Row("lists.multi_head_attention", "float head count", lambda: lists_mha(n_heads=2.0), E,
        ("n_heads must be an integer >= 1, got 2.0 (float)",)),
    Row("lists.multi_head_attention", "indivisible", lambda: lists_mha(n_heads=3), E,
        ("d_model=4 is not divisible by n_heads=3",)),
    Row("lists.multi_head_attention", "not square", lambda: lists_mha(W_o=[[1.0] * 3] * 4), E,
        ("W_o must be (d_model, d_model) = (4, 4), got (4, 3)",)),
    Row("lists.multi_head_attention", "d_model differs", lambda: lists_mha(X_kv=[[1.0] * 5]),
        E, ("X_kv has d_model=5 (shape (1, 5)) but the parameters have d_model=4",)),
    Row("lists.multi_head_attention", "additive float mask",
        lambda: lists_mha(mask=[[0.0] * 3] * 3), E,
        ("mask must be boolean, True = may attend",)),
    Row("lists.multi_head_attention", "mask shape", lambda: lists_mha(mask=[[True] * 2] * 3), E,
        ("mask of shape (3, 2) does not match the attention scores' shape (3, 3)",)),
    Row("lists.multi_head_attention", "NaN in a weight",
        lambda: lists_mha(W_k=[[1.0] * 4] * 3 + [[1.0, 1.0, float("inf"), 1.0]]), E,
        ("W_k contains NaN or inf (first at index (3, 2), shape (4, 4))",)),
    Row("lists.multi_head_attention", "NaN in an input",
        lambda: lists_mha(X_q=[[1.0, float("nan"), 1.0, 1.0]]), E,
        ("X_q contains NaN or inf (first at index (0, 1), shape (1, 4))",)),
    Row("lists.multi_head_attention", "NaN in the keys' input",
        lambda: lists_mha(X_kv=[[1.0, 1.0, 1.0, float("nan")]]), E,
        ("X_kv contains NaN or inf (first at index (0, 3), shape (1, 4))",)),
    Row("lists.multi_head_attention", "a NumPy array", lambda: lists_mha(X_q=np.ones((3, 4))),
        E, ("X_q must be a list of rows (lists), got a NumPy array: pass X_q.tolist()",)),
    Row("lists.multi_head_attention", "queries overflow",
        lambda: lists_mha(X_q=[[1e200] * 4], W_q=[[1e200] * 4] * 4), E,
        ("overflow float64", "scale them down")),
    Row("lists.multi_head_attention", "scores overflow",
        lambda: lists_mha(X_q=[[1e160] * 4], X_kv=[[1e160] * 4], W=W4().tolist()), E,
        ("the scores q k^T / sqrt(d_k) overflow float64",)),
    Row("lists.multi_head_attention", "output overflows",
        lambda: lists_mha(X_q=[[1.0] * 4], X_kv=[[1.0] * 4], W=W4().tolist(),
                          W_o=[[1.5e308] * 4] * 4), E,
        ("the output", "overflow float64")),
    Row("lists.causal_mask", "negative", lambda: L.causal_mask(-1), E,
        ("n must be an integer >= 0, got -1",)),
    Row("lists.split_columns", "no parts", lambda: L.split_columns([[1.0, 2.0]], 0), E,
        ("n_parts must be an integer >= 1, got 0",)),
    Row("lists.shape", "ragged", lambda: L.matmul([[1.0], [1.0, 2.0]], [[1.0]]), E,
        ("is ragged",)),
    # blockwise
    Row("blockwise.attention", "NaN in q",
        lambda: BW.attention(x((3, 4), at=(1, 2)), q3, q3), E,
        ("q contains NaN or inf (first at index (1, 2), shape (3, 4))",)),
    Row("blockwise.attention", "one axis", lambda: BW.attention(np.ones(4), q3, q3), E,
        ("q must be (..., n, d), with at least 2 axes, got shape (4,)",)),
    Row("blockwise.attention", "d_k differs", lambda: BW.attention(q3, np.ones((3, 5)), q3), E,
        ("q and k must share d_k >= 1 (last axis): q is (3, 4), k is (3, 5)",)),
    Row("blockwise.attention", "numbers of keys differ",
        lambda: BW.attention(q3, q3, np.ones((4, 2))), E,
        ("k and v must have the same number of keys (axis -2)",)),
    Row("blockwise.attention", "batch axes differ",
        lambda: BW.attention(np.ones((2, 3, 4)), np.ones((5, 3, 4)), np.ones((5, 3, 1))), E,
        ("leading (batch) axes of q, k, v must broadcast together",)),
    Row("blockwise.attention", "additive float mask",
        lambda: BW.attention(q3, q3, q3, np.zeros((3, 3))), E,
        ("mask must be boolean, True = may attend", "`mask == 0`")),
    Row("blockwise.attention", "mask that does not broadcast",
        lambda: BW.attention(q3, q3, q3, np.ones((4, 4), bool)), E,
        ("mask of shape (4, 4) cannot broadcast to the attention scores' shape (3, 3)",)),
    Row("blockwise.attention", "scores overflow",
        lambda: BW.attention(huge((2, 4), 1e20), huge((3, 4), 1e20), q3_32), E,
        ("the scores q k^T / sqrt(d_k) overflow float32",)),
    Row("blockwise.attention", "huge values are not an overflow",
        lambda: finite_result(lambda: BW.attention(
            np.ones((3, 4), np.float32), np.ones((3, 4), np.float32), huge((3, 2), 3e38))),
        None),
    Row("blockwise.attention", "float32 q, float64 k and v: computed in float64",
        lambda: mixed_core(BW.attention), None),
    Row("blockwise.attention", "lists are converted",
        lambda: BW.attention(q3.tolist(), q3.tolist(), q3.tolist(), causal=True), None),
    Row("blockwise.online_softmax_attention", "NaN in v",
        lambda: BW.online_softmax_attention(q3, q3, x((3, 2), at=(2, 0))), E,
        ("v contains NaN or inf (first at index (2, 0)",)),
    Row("blockwise.online_softmax_attention", "block of 0",
        lambda: BW.online_softmax_attention(q3, q3, q3, block_k=0), E,
        ("block_k must be an integer >= 1, got 0",)),
    Row("blockwise.online_softmax_attention", "float block",
        lambda: BW.online_softmax_attention(q3, q3, q3, block_q=2.0), E,
        ("block_q must be an integer >= 1, got 2.0 (float)",)),
    Row("blockwise.online_softmax_attention", "0/1 mask",
        lambda: BW.online_softmax_attention(q3, q3, q3, np.tril(np.ones((3, 3), int))), E,
        ("mask must be boolean", "`mask.astype(bool)`")),
    Row("blockwise.online_softmax_attention", "scores overflow",
        lambda: BW.online_softmax_attention(huge((2, 4), 1e20), huge((3, 4), 1e20), q3_32), E,
        ("the scores q k^T / sqrt(d_k) overflow float32",)),
    Row("blockwise.online_softmax_attention", "float32 q, float64 k and v: computed in float64",
        lambda: mixed_core(BW.online_softmax_attention), None),
    Row("blockwise.online_softmax_attention", "huge values are not an overflow",
        lambda: finite_result(lambda: BW.online_softmax_attention(
            np.ones((3, 4), np.float32), np.ones((3, 4), np.float32), huge((3, 2), 3e38))),
        None),
    # kv_cache: grouped-query parameters
    Row("MHAParams (grouped)", "kv heads do not divide the heads",
        lambda: A.MHAParams(W4(), np.ones((4, 3)), np.ones((4, 3)), W4(), 4, n_kv_heads=3), E,
        ("n_kv_heads=3 does not divide n_heads=4", "valid key/value head counts for n_heads=4 "
         "are [1, 2, 4]")),
    Row("MHAParams (grouped)", "bool kv head count",
        lambda: A.MHAParams(W4(), np.ones((4, 1)), np.ones((4, 1)), W4(), 4, n_kv_heads=True), E,
        ("n_kv_heads must be an integer >= 1, got True (bool)",)),
    Row("MHAParams (grouped)", "W_k of the wrong width",
        lambda: A.MHAParams(W4(), W4(), np.ones((4, 2)), W4(), 4, n_kv_heads=2), E,
        ("W_k must be (d_model, n_kv_heads * d_k) = (4, 2), got (4, 4)",)),
    Row("MHAParams (grouped)", "W_q not square",
        lambda: A.MHAParams(np.ones((4, 2)), *[np.ones((4, 2))] * 2, W4(), 4, n_kv_heads=2), E,
        ("W_q must be (d_model, d_model) = (4, 4), got (4, 2)",)),
    Row("MHAParams (grouped)", "some biases missing",
        lambda: dataclasses.replace(gqa(), b_v=None), E,
        ("MHAParams takes all four biases or none, got b_q, b_k, b_o without b_v",)),
    Row("MHAParams (grouped)", "b_k of the query width",
        lambda: dataclasses.replace(gqa(), b_k=np.zeros(8)), E,
        ("b_k must have shape (n_kv_heads * d_k,) = (4,), got (8,)",)),
    Row("MHAParams (grouped)", "strings", lambda: dataclasses.replace(gqa(), W_o=[["a"] * 8] * 8),
        E, ("W_o must hold real numbers",)),
    Row("init_mha_params (grouped)", "indivisible",
        lambda: A.init_mha_params(8, 4, rng(), n_kv_heads=3), E, ("n_kv_heads=3 does not divide",)),
    Row("init_mha_params (grouped)", "heads do not divide d_model",
        lambda: A.init_mha_params(6, 4, rng(), n_kv_heads=2), E, ("d_model=6 is not divisible",)),
    Row("init_mha_params (grouped)", "float d_model",
        lambda: A.init_mha_params(8.0, 4, rng(), n_kv_heads=2), E,
        ("d_model must be an integer >= 1, got 8.0 (float)",)),
    Row("init_mha_params (grouped)", "float head count",
        lambda: A.init_mha_params(8, 2.5, rng(), n_kv_heads=1), E,
        ("n_heads must be an integer >= 1, got 2.5 (float)",)),
    Row("init_mha_params (grouped)", "float kv head count",
        lambda: A.init_mha_params(8, 4, rng(), n_kv_heads=2.0), E,
        ("n_kv_heads must be an integer >= 1, got 2.0 (float)",)),
    Row("init_mha_params (grouped)", "integer dtype",
        lambda: A.init_mha_params(8, 4, rng(), dtype=int, n_kv_heads=2), E,
        ("dtype must be a floating-point dtype",)),
    Row("kv_cache.gqa_from_mha", "params not an MHAParams",
        lambda: KV.gqa_from_mha({"W_q": 1}, 2), E, ("params must be an MHAParams",)),
    Row("kv_cache.gqa_from_mha", "a layer already grouped",
        lambda: KV.gqa_from_mha(gqa(), 1), E,
        ("pools the key/value heads of a layer that has one per query head",
         "n_kv_heads=2 for n_heads=4")),
    Row("kv_cache.gqa_from_mha", "NaN in a weight",
        lambda: KV.gqa_from_mha(with_value("W_k", (3, 3)), 1), E,
        ("params.W_k contains NaN or inf (first at index (3, 3)",)),
    Row("kv_cache.gqa_from_mha", "indivisible", lambda: KV.gqa_from_mha(params(), 3), E,
        ("n_kv_heads=3 does not divide n_heads=2",)),
    Row("kv_cache.cache_bytes_per_token", "no layers",
        lambda: KV.cache_bytes_per_token(0, 8, 128), E, ("n_layers must be an integer >= 1",)),
    Row("kv_cache.cache_bytes_per_token", "bool kv heads",
        lambda: KV.cache_bytes_per_token(32, True, 128), E,
        ("n_kv_heads must be an integer >= 1, got True (bool)",)),
    Row("kv_cache.cache_bytes_per_token", "no bytes",
        lambda: KV.cache_bytes_per_token(32, 8, 128, 0), E,
        ("bytes_per_number must be an integer >= 1, got 0",)),
    Row("kv_cache.cache_bytes_per_token", "float d_k",
        lambda: KV.cache_bytes_per_token(32, 8, 128.0), E, ("d_k must be an integer >= 1",)),
    # kv_cache: decoding
    Row("kv_cache.Decoder", "params of another kind", lambda: KV.Decoder({"W_q": 1}), E,
        ("params must be an MHAParams", "got dict")),
    Row("kv_cache.Decoder", "NaN in a weight (GQA)",
        lambda: KV.Decoder((lambda p: (p.W_v.__setitem__((1, 1), np.nan), p)[1])(gqa())), E,
        ("params.W_v contains NaN or inf (first at index (1, 1)",)),
    Row("kv_cache.Decoder", "NaN in a weight (MHA)",
        lambda: KV.Decoder(with_value("b_k", 2)), E,
        ("params.b_k contains NaN or inf (first at index (2,)",)),
    Row("kv_cache.Decoder", "no room", lambda: decoder(max_len=0), E,
        ("max_len must be an integer >= 1, got 0",)),
    Row("kv_cache.Decoder", "float batch", lambda: decoder(batch=2.0), E,
        ("batch must be an integer >= 1, got 2.0 (float)",)),
    Row("kv_cache.Decoder.__call__", "a score the causal mask hides overflows, in a prompt",
        lambda: decoded(masked_overflow_params(), [np.eye(2, dtype=np.float32)]), E,
        ("the scores q k^T / sqrt(d_k) overflow float32",)),
    Row("kv_cache.Decoder.__call__", "NaN in x_new",
        lambda: decoder()(x((1, 2, 8), at=(0, 1, 5))), E,
        ("x_new contains NaN or inf (first at index (0, 1, 5), shape (1, 2, 8))",)),
    Row("kv_cache.Decoder.__call__", "d_model differs",
        lambda: decoder()(np.ones((1, 6))), E,
        ("x_new must be (batch, t, d_model) = (1, t, 8) or (t, d_model) = (t, 8), got shape "
         "(1, 6)",)),
    Row("kv_cache.Decoder.__call__", "batch differs",
        lambda: decoder(batch=2)(np.ones((3, 1, 8))), E,
        ("x_new must be (batch, t, d_model) = (2, t, 8), got shape (3, 1, 8)",)),
    Row("kv_cache.Decoder.__call__", "booleans", lambda: decoder()(np.ones((1, 8), bool)), E,
        ("x_new must hold real numbers, got booleans",)),
    Row("kv_cache.Decoder.__call__", "the cache is full",
        lambda: stepped(decoder(max_len=3), np.ones((2, 8)), np.ones((2, 8))), E,
        ("the KV cache holds at most max_len=3 tokens and has 2: 2 more do not fit",)),
    Row("kv_cache.Decoder.__call__", "queries overflow",
        lambda: decoder(gqa(dtype=np.float32, W_q=huge((8, 8), 1e30)))(huge((1, 8), 1e30)), E,
        ("the queries x_new @ W_q + b_q overflow float32", "|W_q| = 1e+30")),
    Row("kv_cache.Decoder.__call__", "values overflow",
        lambda: decoder(gqa(dtype=np.float32, bias=False, W_v=huge((8, 4), 1e30)))(
            huge((1, 8), 1e30)), E, ("the values x_new @ W_v overflow float32",)),
    Row("kv_cache.Decoder.__call__", "scores overflow",
        lambda: decoder(gqa(dtype=np.float32, bias=False, W_q=huge((8, 8), 1e19),
                            W_k=huge((8, 4), 1e19)))(np.ones((1, 8), np.float32)), E,
        ("the scores q k^T / sqrt(d_k) overflow float32",)),
    Row("kv_cache.Decoder.__call__", "every score of a token overflows to -inf (weights 0)",
        lambda: decoder(gqa(dtype=np.float32, bias=False, W_q=huge((8, 8), 1e19),
                            W_k=huge((8, 4), -1e19)))(np.ones((1, 8), np.float32)), E,
        ("the scores q k^T / sqrt(d_k) overflow float32",)),
    Row("kv_cache.Decoder.__call__", "output overflows",
        lambda: huge_value_decoder()(np.ones((1, 8), np.float32)), E,
        ("the output", "overflow float32", "|W_o| = 1e+03")),
    Row("kv_cache.Decoder.__call__", "huge values whose weighted mean fits, as a prompt",
        lambda: huge_values_decoded(False), None),
    Row("kv_cache.Decoder.__call__", "huge values whose weighted mean fits, token by token",
        lambda: huge_values_decoded(True), None),
    Row("kv_cache.Decoder.__call__", "float64 prompt, float32 weights: computed in float64",
        lambda: mixed_decoded(False), None),
    Row("kv_cache.Decoder.__call__", "float64 tokens, float32 weights: computed in float64",
        lambda: mixed_decoded(True), None),
    Row("kv_cache.Decoder.__call__", "a prompt, then a token, as lists",
        lambda: stepped(decoder(), np.ones((3, 8)).tolist(), [[0.5] * 8]), None),
    Row("kv_cache.Decoder.__call__", "no new token", lambda: decoder()(np.ones((0, 8))), None),
    Row("kv_cache.Decoder.load", "boolean keys",
        lambda: decoder().load(np.ones((1, 2, 3, 2), bool), np.ones((1, 2, 3, 2))), E,
        ("keys must hold real numbers, got booleans",)),
    Row("kv_cache.Decoder.load", "boolean values",
        lambda: decoder().load(np.ones((1, 2, 3, 2)), np.ones((1, 2, 3, 2), bool)), E,
        ("values must hold real numbers, got booleans",)),
    Row("kv_cache.Decoder.load", "NaN in the keys",
        lambda: decoder().load(x((1, 2, 3, 2), at=(0, 1, 2, 0)), np.ones((1, 2, 3, 2))), E,
        ("keys contains NaN or inf (first at index (0, 1, 2, 0)",)),
    # torch_bridge
    Row("torch_bridge.pack_in_proj", "params not an MHAParams",
        lambda: tb().pack_in_proj({"W_q": 1}), E, ("params must be an MHAParams",)),
    Row("torch_bridge.pack_in_proj", "NaN in a weight",
        lambda: tb().pack_in_proj(with_value("W_k", (1, 1))), E,
        ("params.W_k contains NaN or inf (first at index (1, 1)",)),
    Row("torch_bridge.to_torch_attn_mask", "additive float mask",
        lambda: tb().to_torch_attn_mask(np.zeros((3, 3))), E,
        ("mask must be boolean, True = may attend", "`mask == 0`")),
    Row("torch_bridge.to_torch_attn_mask", "lists of booleans are converted",
        lambda: tb().to_torch_attn_mask([[True, False]]), None),
    Row("torch_bridge.to_torch_mha", "NaN in a bias",
        lambda: tb().to_torch_mha(with_value("b_q", 3)), E,
        ("params.b_q contains NaN or inf (first at index (3,)",)),
    Row("torch_bridge.from_torch_mha", "NaN in the module",
        lambda: tb().from_torch_mha(nan_module()), E,
        ("params.W_q contains NaN or inf (first at index (2, 1)",)),
    Row("torch_bridge.from_torch_mha", "separate key/value projections",
        lambda: tb().from_torch_mha(kdim_module()), E, ("packed in_proj_weight",)),
]  # fmt: skip

ROWS = list(forward_rows()) + OTHER_ROWS


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input(row):
    problem = failure(row)
    assert problem is None, f"{row.id}: {problem}"


def test_every_public_forward_and_rule_is_in_the_table():
    functions = {row.function for row in ROWS}
    for name in (
        "multi_head_attention", "multi_head_attention_per_head", "blockwise.multi_head_attention",
        "backprop.mha_forward", "backprop.mha_backward", "scaled_dot_product_attention",
        "softmax", "lists.attention", "lists.multi_head_attention", "tiny.TinyModel.forward",
        "tiny.TinyModel.backward", "torch_bridge.to_torch_mha", "torch_bridge.from_torch_mha",
        "torch_bridge.pack_in_proj", "torch_bridge.to_torch_attn_mask", "MHAParams",
        "blockwise.attention", "blockwise.online_softmax_attention", "MHAParams (grouped)",
        "init_mha_params (grouped)", "kv_cache.gqa_from_mha",
        "kv_cache.Decoder", "kv_cache.Decoder.__call__", "kv_cache.cache_bytes_per_token",
        "backprop.mha_forward(rope)", "backprop.mha_forward(score_bias)",
        "positions.sinusoidal_table", "positions.sinusoidal_shift", "positions.RoPE",
        "positions.rope_rotate", "positions.alibi_slopes", "positions.alibi_bias",
        "positions.query_positions",
        "tiny.last_marked_task", "tiny.position_experiment",
    ):  # fmt: skip
        assert name in functions, name
    assert len({row.id for row in ROWS}) == len(ROWS)
