"""Bad input, each rule once, on the public entry point a learner calls: tables of entry
point -> {(fragments of) the ValueError's message: a call that must raise it}, and of inputs
that must be accepted. The multi-head forwards share one guard (lib._validate.mha_inputs)
and one check of their output: every rule of the guard is here for
lib.attention.multi_head_attention, and each other forward gets one input the guard refuses
and one output that overflows, to show that it goes through both.

Every row builds its inputs when it runs and calls lib through its modules' attributes, so
that tests/lib/test_validation_mutants.py can run the table with one check of lib deleted.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from lib import attention as A
from lib import backprop as BP
from lib import blockwise as BW
from lib import kv_cache as KV
from lib import positions as POS
from lib import tasks as TASKS
from lib import tiny as T
from lib import torch_bridge as TB


@dataclass(frozen=True)
class Row:
    function: str
    call: Any  # no arguments; raises, or returns for an accepted input
    fragments: tuple[str, ...]  # of the ValueError's message; () = accepted
    rule: str = ""  # accepted inputs: what they are

    @property
    def id(self) -> str:
        return f"{self.function}: {self.rule or ' ... '.join(self.fragments)}"


def failure(row: Row) -> str | None:
    """Why the row does not hold (None when it does)."""
    try:
        row.call()
    except Exception as exc:  # noqa: BLE001 - any other exception is the row failing
        if not row.fragments or not isinstance(exc, ValueError):
            return f"raised {type(exc).__name__}: {exc}"
        missing = [f for f in row.fragments if f not in str(exc)]
        return f"message {str(exc)!r} lacks {missing}" if missing else None
    return "did not raise ValueError" if row.fragments else None


# --------------------------------------------------------------------------- inputs


def rng():
    return np.random.default_rng(1234)


def params(bias=True, dtype=np.float64, d=8, h=2, **changes) -> A.MHAParams:
    p = A.init_mha_params(d, h, rng(), bias=bias, dtype=dtype)
    return dataclasses.replace(p, **changes) if changes else p


def params32(**changes) -> A.MHAParams:
    return params(bias=False, dtype=np.float32, **changes)


def gqa(bias=True, dtype=np.float64, **changes) -> KV.GQAParams:
    """8 features, 4 query heads, 2 key/value heads of 2."""
    p = KV.init_gqa_params(8, 4, 2, rng(), bias=bias, dtype=dtype)
    return dataclasses.replace(p, **changes) if changes else p


def square(n_heads=2, **arrays) -> A.MHAParams:
    """MHAParams of d_model = 4: the identity for every weight not given."""
    return A.MHAParams(
        **{name: np.eye(4) for name in ("W_q", "W_k", "W_v", "W_o")} | arrays, n_heads=n_heads
    )


def x(shape=(2, 3, 8), dtype=np.float64, at=None, value=np.nan):
    a = np.random.default_rng(5).normal(size=shape).astype(dtype)
    if at is not None:
        a[at] = value
    return a


def nan_in(name: str, at) -> A.MHAParams:
    """params() with a NaN put into one array after it was built (as training might)."""
    p = params()
    getattr(p, name)[at] = np.nan
    return p


def huge(shape, value, dtype=np.float32):
    return np.full(shape, value, dtype)


def mha(x_q=None, x_kv=None, p=None, mask=None, forward=None):
    """A multi-head forward (lib.attention's unless ``forward``) of the inputs given, and of
    x(), x(), params() for those not given."""
    forward = forward or A.multi_head_attention
    return forward(x() if x_q is None else x_q, x() if x_kv is None else x_kv, p or params(), mask)


def bp(*args, **kw):
    return BP.mha_forward(x(), x(), params(), *args, **kw)


def back(d_out, dtype=np.float64):
    cache = BP.mha_forward(x(dtype=dtype), x(dtype=dtype), params(dtype=dtype))[2]
    return BP.mha_backward(d_out, cache)


def sdpa(q=None, k=None, v=None, mask=None):
    q, k, v = (np.ones((3, 4)) if a is None else a for a in (q, k, v))
    return A.scaled_dot_product_attention(q, k, v, mask)


def online(mask=None, **kw):
    ones = np.ones((3, 4))
    return BW.online_softmax_attention(ones, ones, ones, mask, **kw)


def scores32(forward=None):
    """An attention core of float32 q and k whose scores overflow."""
    forward = forward or A.scaled_dot_product_attention
    return forward(huge((2, 4), 1e20), huge((3, 4), 1e20), huge((3, 4), 1.0))


def with_key_2(value, dtype=np.float32):
    """x_kv (2, 3, 8): keys 0 and 1 ones, key 2 ``value``."""
    return np.concatenate([np.ones((2, 2, 8), dtype), huge((2, 1, 8), value, dtype)], axis=1)


def scores_overflow(mask=None):
    """W_q = W_k = I (float32) and inputs whose score with key 2 overflows to -inf."""
    eye = np.eye(8, dtype=np.float32)
    return mha(huge((2, 3, 8), 3e19), with_key_2(-3e19), params32(W_q=eye, W_k=eye), mask)


def output_overflows(forward=None):
    """Finite heads, positive (W_v >= 0), summed by W_o = 3e38 into an output that is not."""
    p = params32()
    p.W_v[:] = np.abs(p.W_v)
    p.W_o[:] = 3e38
    x32 = 1.0 + np.random.default_rng(6).uniform(size=(2, 3, 8)).astype(np.float32)
    return mha(x32, x32, p, None, forward)


def score_bias_overflows():
    """Scores of 2e36 (float32, W_q = W_k = I), plus a score bias of 3.4e38."""
    eye = np.eye(8, dtype=np.float32)
    x18 = huge((2, 3, 8), 1e18)
    return BP.mha_forward(x18, x18, params32(W_q=eye, W_k=eye), score_bias=huge((3, 3), 3.4e38))


def decoded(*xs, p=None, **kw):
    """The outputs of a Decoder of p (default gqa()) fed each of xs in turn, concatenated."""
    decoder = KV.Decoder(gqa() if p is None else p, **kw)
    return np.concatenate([decoder(a) for a in xs], axis=-2)


def masked_overflow():
    """One head, d = 2: token 0 = (1, 0) has the query (1e20, 0), token 1 = (0, 1) the key
    (1e20, 0), every other query and key is 0. Only the score of query 0 with key 1, which the
    causal mask hides, overflows float32."""
    W_q = np.array([[1e20, 0.0], [0.0, 0.0]], np.float32)
    W_k = np.array([[0.0, 0.0], [1e20, 0.0]], np.float32)
    eye = np.eye(2, dtype=np.float32)
    return decoded(eye, p=A.MHAParams(W_q, W_k, eye, eye, 1))


def load(keys=(1, 2, 3, 2), values=(1, 2, 3, 2)):
    """Decoder.load (ones of the shapes given) into a cache of (1, 2, 5, 2)."""
    keys, values = (np.ones(a) if isinstance(a, tuple) else a for a in (keys, values))
    KV.Decoder(gqa(), max_len=5).load(keys, values)


def tiny(**changes):
    sizes = dict(vocab_size=5, max_len=7, d_model=8, n_heads=2, n_classes=4)
    return T.init_tiny_model(**sizes | changes, rng=rng())


def model(**changes):
    """tiny() with entries of its arrays set: name=(where, value)."""
    m = tiny()
    for name, (at, value) in changes.items():
        m.params[name][at] = value
    return m


def backward(d_logits, m=None):
    m = m or model()
    return m.backward(d_logits, m.forward(IDS)[2])


def experiment(n_steps=1, train_len=4, test_lens=(4,)):
    def task(n, seq_len, r):
        return TASKS.copy_offsets_task(n, seq_len, 5, (1,), r)

    sizes = dict(vocab_size=5, n_classes=5, d_model=8, n_heads=2, batch=4, n_eval=4)
    return T.position_experiment(task, ("none",), (0,), n_steps, train_len, test_lens, **sizes)


def torch_mha(nan=False, **kw):
    """An nn.MultiheadAttention(6, 2), with a NaN in its in_proj_weight at (1, 2)."""
    import torch

    module = torch.nn.MultiheadAttention(6, 2, dtype=torch.float64, **kw)
    if nan:
        module.in_proj_weight.data[1, 2] = float("nan")
    return module


def rot(x, positions=(0, 1)):
    return POS.rope_rotate(x, positions)


OVERFLOW32 = "numbers in the output overflow float32"
Z = np.zeros(4)
IDS = np.array([[0, 1, 2, 3], [4, 3, 2, 1]])
ONLY_KEY_0 = np.arange(3) == 0  # (n_k,): every query may attend to key 0 only

# --------------------------------------------------------------------------- the table

REFUSED = {  # entry point -> {fragment(s) of the ValueError's message: a call that raises it}
    "multi_head_attention": {  # every rule of the forwards' shared guard
        ("params must be an MHAParams", "got dict"): lambda: mha(p={"W_q": np.eye(8)}),
        (
            "params has grouped key/value heads (n_kv_heads=2 for n_heads=4): run it with "
            "lib.kv_cache.grouped_query_attention"
        ): lambda: mha(p=gqa()),
        "x_q contains NaN or inf (first at index (1, 2, 3)": lambda: mha(x(at=(1, 2, 3))),
        "x_kv contains NaN or inf (first at index (0, 1, 2), shape (2, 4, 8))": lambda: mha(
            x_kv=x((2, 4, 8), at=(0, 1, 2), value=np.inf)
        ),
        "params.W_v contains NaN or inf (first at index (0, 1), shape (8, 8))": lambda: mha(
            p=nan_in("W_v", (0, 1))
        ),
        "params.W_o contains NaN or inf": lambda: mha(x((2, 0, 8)), p=nan_in("W_o", (2, 2))),
        "x_q and x_kv must be both (batch, n, d_model) or both (n, d_model), got x_q (8,)": (
            lambda: mha(np.ones(8), np.ones(8))
        ),
        ("x_kv has d_model=6 (shape (2, 5, 6))", "have d_model=8"): lambda: mha(x_kv=x((2, 5, 6))),
        "different batch sizes: (2, 3, 8) and (3, 3, 8)": lambda: mha(x_kv=x((3, 3, 8))),
        "x_q must hold real numbers, got dtype complex128": lambda: mha(x().astype(complex)),
        "x_kv must hold real numbers, got booleans": lambda: mha(x_kv=x() > 0),
        "x_kv must be a rectangular array of real numbers": lambda: mha(x_kv=[[1.0] * 8, [1.0]]),
        (
            "mask must be boolean, True = may attend, got dtype int64",
            "`mask == 0`",
            "`~mask`",
            "`mask.astype(bool)`",
        ): lambda: mha(mask=np.tril(np.ones((3, 3), int))),
        (
            "mask of shape (2, 3, 4) cannot broadcast to the attention scores' shape "
            "(2, 2, 3, 3) (batch, heads, n_q, n_k)"
        ): lambda: mha(mask=np.ones((2, 3, 4), bool)),
        "(1, 1, 1, 3, 3) cannot broadcast": lambda: mha(mask=np.ones((1, 1, 1, 3, 3), bool)),
        (
            OVERFLOW32 + " (largest |x_q| = 1e+30 at (0, 0, 0); largest |x_kv| = ",
            "largest |W_q| = 1e+10 at (0, 0)",
            "): scale them down, or compute in float64",
        ): lambda: mha(
            huge((2, 3, 8), 1e30), x(dtype=np.float32), params32(W_q=huge((8, 8), 1e10))
        ),
        OVERFLOW32 + " (largest |x_q| = 3e+19": scores_overflow,  # to -inf, where no mask hides it
    },
    "blockwise.multi_head_attention": {  # skipped, yet an error: the reference weighs them by 0
        OVERFLOW32 + " (largest |x_q|": lambda: BW.multi_head_attention(
            x(dtype=np.float32), with_key_2(1e30), params32(W_v=huge((8, 8), 1e10)), ONLY_KEY_0
        ),
    },
    "backprop.mha_forward": {
        "x_q and x_kv must be (batch, n, d_model), got x_q (3, 8) and x_kv (3, 8)": lambda: (
            BP.mha_forward(x()[0], x()[0], params())
        ),
        "head_mask must be (heads,) = (2,) or (batch, heads) = (2, 2), got shape (3,)": (
            lambda: bp(None, np.ones(3))
        ),
        "head_mask contains NaN or inf (first at index (1,)": lambda: bp(None, [1.0, np.nan]),
        "head_mask contains NaN or inf (first at index (1,), shape (2,))": lambda: BP.mha_forward(
            x(dtype=np.float32), x(dtype=np.float32), params32(), None, [1, 1e300]
        ),
        "rope must be a lib.positions.RoPE, got str": lambda: bp(rope="half"),
        "d_k must be even (RoPE turns pairs of coordinates), got 3": lambda: BP.mha_forward(
            x((2, 3, 6)), x((2, 3, 6)), params(d=6), rope=POS.RoPE()
        ),
        (
            "score_bias of shape (1, 1, 1, 3, 3) cannot broadcast to the attention scores' "
            "shape (2, 2, 3, 3) (batch, heads, n_q, n_k)"
        ): lambda: bp(score_bias=np.zeros((1, 1, 1, 3, 3))),
        "score_bias contains NaN or inf (first at index (2, 1), shape (3, 3))": lambda: bp(
            score_bias=x((3, 3), at=(2, 1))
        ),
        "score_bias must hold real numbers, got booleans": lambda: bp(score_bias=x((3, 3)) > 0),
        (OVERFLOW32, "largest |score_bias| = 3.4e+38"): score_bias_overflows,
    },
    "backprop.mha_backward": {
        "d_out contains NaN or inf (first at index (0, 2, 1)": lambda: back(x(at=(0, 2, 1))),
        "d_out must be the output's shape (2, 3, 8), got shape (2, 2, 8)": lambda: back(x()[:, :2]),
        ("the gradient of", "overflow float32"): lambda: back(huge((2, 3, 8), 3e38), np.float32),
    },
    "backprop.softmax_backward": {
        "weights contains NaN or inf (first at index (0, 1)": lambda: BP.softmax_backward(
            x((2, 3), at=(0, 1)), np.ones((2, 3))
        ),
        "d_weights contains NaN or inf (first at index (1, 1)": lambda: BP.softmax_backward(
            np.ones((2, 3)), x((2, 3), at=(1, 1), value=np.inf)
        ),
        "d_weights must be (2, 3), the shape of weights, got shape (3, 2)": lambda: (
            BP.softmax_backward(np.ones((2, 3)) / 3, np.ones((3, 2)))
        ),
    },
    "kv_cache.grouped_query_attention": {
        ("GQAParams", "got dict"): lambda: KV.grouped_query_attention(x(), x(), {"W_q": 1}),
    },
    "kv_cache.GQAParams": {
        (
            "n_kv_heads=3 does not divide n_heads=4",
            "valid key/value head counts for n_heads=4 are [1, 2, 4]",
        ): lambda: KV.GQAParams(*[np.ones((4, 3))] * 4, 4, n_kv_heads=3),
        "n_kv_heads must be an integer >= 1, got True (bool)": lambda: KV.GQAParams(
            *[np.ones((4, 4))] * 4, 4, n_kv_heads=True
        ),
        "W_k must be (d_model, n_kv_heads * d_k) = (4, 2), got (4, 4)": lambda: KV.GQAParams(
            *[np.ones((4, 4))] * 4, 4, n_kv_heads=2
        ),
        "b_k must have shape (n_kv_heads * d_k,) = (4,), got (8,)": lambda: gqa(b_k=np.zeros(8)),
    },
    "kv_cache.init_gqa_params": {
        "n_kv_heads must be an integer >= 1, got 2.0 (float)": lambda: KV.init_gqa_params(
            8, 4, 2.0, rng()
        ),
        "d_model must be an integer >= 1, got 0": lambda: KV.init_gqa_params(0, 4, 2, rng()),
        "dtype must be a floating-point": lambda: KV.init_gqa_params(8, 4, 2, rng(), dtype=int),
    },
    "kv_cache.gqa_from_mha": {
        "params must be an MHAParams": lambda: KV.gqa_from_mha({"W_q": 1}, 2),
        (
            "pools the key/value heads of a layer that has one per query head",
            "n_kv_heads=2 for n_heads=4",
        ): lambda: KV.gqa_from_mha(gqa(), 1),
        "n_kv_heads=3 does not divide n_heads=2": lambda: KV.gqa_from_mha(params(), 3),
    },
    "kv_cache.cache_bytes_per_token": {
        "n_layers must be an integer >= 1, got 0": lambda: KV.cache_bytes_per_token(0, 8, 128),
        "n_kv_heads must be an integer >= 1, got True": lambda: KV.cache_bytes_per_token(
            32, True, 128
        ),
        "d_k must be an integer >= 1, got 128.0": lambda: KV.cache_bytes_per_token(32, 8, 128.0),
        "bytes_per_number must be an integer >= 1": lambda: KV.cache_bytes_per_token(32, 8, 8, 0),
    },
    "kv_cache.Decoder": {
        ("params must be an MHAParams", "got dict"): lambda: KV.Decoder({"W_q": 1}),
        "max_len must be an integer >= 1, got 0": lambda: KV.Decoder(gqa(), max_len=0),
        "batch must be an integer >= 1, got 2.0 (float)": lambda: KV.Decoder(gqa(), batch=2.0),
    },
    "kv_cache.Decoder.__call__": {
        "x_new contains NaN or inf (first at index (0, 1, 5), shape (1, 2, 8))": lambda: decoded(
            x((1, 2, 8), at=(0, 1, 5))
        ),
        (
            "x_new must be (batch, t, d_model) = (1, t, 8) or (t, d_model) = (t, 8), "
            "got shape (1, 6)"
        ): lambda: decoded(np.ones((1, 6))),
        "x_new must hold real numbers, got booleans": lambda: decoded(np.ones((1, 8), bool)),
        "at most max_len=3 tokens and has 2: 2 more do not fit": lambda: decoded(
            np.ones((2, 8)), np.ones((2, 8)), max_len=3
        ),
        (OVERFLOW32, "largest |W_o| = 1e+03"): lambda: decoded(
            np.ones((1, 8), np.float32),
            p=gqa(False, np.float32, W_v=huge((8, 4), 1e37), W_o=huge((8, 8), 1e3)),
        ),
        OVERFLOW32 + " (largest |x_new| = 1": lambda: decoded(  # every score -inf: no weight
            np.ones((1, 8), np.float32),
            p=gqa(False, np.float32, W_q=huge((8, 8), 1e19), W_k=huge((8, 4), -1e19)),
        ),
    },
    "kv_cache.Decoder.load": {
        "keys must hold real numbers, got booleans": lambda: load(np.ones((1, 2, 3, 2), bool)),
        "values must be (batch, n_kv_heads, L, d_k) = (1, 2, L, 2), got shape (1, 2, 3)": (
            lambda: load(values=(1, 2, 3))
        ),
        "keys (1, 2, 3, 2) and values (1, 2, 4, 2) must have one shape": lambda: load(
            values=(1, 2, 4, 2)
        ),
        "holds at most max_len=5 tokens, got 6": lambda: load((1, 2, 6, 2), (1, 2, 6, 2)),
        "values contains NaN or inf (first at index (0, 1, 2, 0)": lambda: load(
            values=x((1, 2, 3, 2), at=(0, 1, 2, 0))
        ),
    },
    "scaled_dot_product_attention": {  # every rule of the attention cores' shared guard
        "k contains NaN or inf (first at index (2, 1)": lambda: sdpa(k=x((3, 4), at=(2, 1))),
        "q must be (..., n, d), with at least 2 axes, got shape (4,)": lambda: sdpa(np.ones(4)),
        ("q and k must share d_k >= 1 (last axis)", "k is (3, 5)"): lambda: sdpa(k=np.ones((3, 5))),
        "must share d_k >= 1": lambda: sdpa(np.ones((3, 0)), np.ones((3, 0))),
        ("k and v must have the same number of keys", "v is (4, 2)"): lambda: sdpa(v=x((4, 2))),
        (
            "the leading (batch) axes of q, k, v must broadcast together",
            "q is (2, 3, 4), k is (5, 3, 4)",
        ): lambda: sdpa(np.ones((2, 3, 4)), np.ones((5, 3, 4)), np.ones((5, 3, 1))),
        "mask must be boolean, True = may attend, got dtype float64": lambda: sdpa(mask=np.eye(3)),
        "mask of shape (4, 4) cannot broadcast to the attention scores' shape (3, 3)": lambda: sdpa(
            mask=np.ones((4, 4), bool)
        ),
        OVERFLOW32 + " (largest |q| = 1e+20 at (0, 0); largest |k|": scores32,
    },
    "blockwise.attention": {
        "q contains NaN or inf (first at index (1, 2)": lambda: BW.attention(
            x((3, 4), at=(1, 2)), np.ones((3, 4)), np.ones((3, 4))
        ),
        OVERFLOW32 + " (largest |q| = 1e+20": lambda: scores32(BW.attention),
    },
    "blockwise.online_softmax_attention": {
        ("mask must be boolean", "`mask.astype(bool)`"): lambda: online(np.eye(3, dtype=int)),
        "block_q must be an integer >= 1, got 2.0 (float)": lambda: online(block_q=2.0),
        "block_k must be an integer >= 1, got 0": lambda: online(block_k=0),
        OVERFLOW32 + " (largest |q| = 1e+20": lambda: scores32(BW.online_softmax_attention),
    },
    "softmax": {
        "softmax input contains NaN or +inf (first at index (1, 2), shape (2, 3))": lambda: (
            A.softmax(x((2, 3), at=(1, 2), value=np.inf))
        ),
        "softmax input must hold real numbers, got booleans": lambda: A.softmax(np.ones(3, bool)),
    },
    "causal_mask": {
        "n_q must be an integer >= 0, got -1": lambda: A.causal_mask(-1),
        "n_k must be an integer >= 0, got True (bool)": lambda: A.causal_mask(3, True),
    },
    "padding_mask": {
        "n_k must be an integer >= 0, got -1": lambda: A.padding_mask([1], -1),
        "lengths must be a 1-D array of integers, got float64": lambda: A.padding_mask([1.5], 3),
        "lengths must lie in [0, n_k=5], got [6, -1]": lambda: A.padding_mask([4, 6, -1], 5),
    },
    "split_heads": {
        "x must be (batch, seq, d_model), got shape (4, 4)": lambda: A.split_heads(np.eye(4), 2),
        (
            "d_model=6 is not divisible by n_heads=4; valid head counts for d_model=6 are "
            "[1, 2, 3, 6]"
        ): lambda: A.split_heads(np.ones((1, 2, 6)), 4),
    },
    "merge_heads": {
        "x must be (batch, heads, seq, d_k), got shape (4, 4)": lambda: A.merge_heads(np.eye(4)),
    },
    "MHAParams": {
        (
            "MHAParams takes all four biases or none, got b_q, b_v, b_o without b_k",
            "pass zeros for a bias",
        ): lambda: square(b_q=Z, b_v=Z, b_o=Z),
        "n_heads must be an integer >= 1, got True (bool)": lambda: square(True),
        "valid head counts for d_model=4 are [1, 2, 4]": lambda: square(3),
        "d_model must be an integer >= 1, got 0": lambda: A.MHAParams(*[np.ones((0, 0))] * 4, 1),
        "W_o must be (d_model, d_model) = (4, 4), got (4, 3)": lambda: square(W_o=np.ones((4, 3))),
        "b_o must have shape (d_model,) = (4,), got (3,)": lambda: square(
            b_q=Z, b_k=Z, b_v=Z, b_o=np.zeros(3)
        ),
        "W_q must hold real numbers, got dtype <U1": lambda: square(W_q=[["a"] * 4] * 4),
        "all four biases or none": lambda: dataclasses.replace(params(), b_q=None),  # a copy
    },
    "init_mha_params": {
        "d_model must be an integer >= 1, got 0": lambda: A.init_mha_params(0, 1, rng()),
        "dtype must be a floating-point dtype (float32, float64), got int64": lambda: (
            A.init_mha_params(8, 2, rng(), dtype=int)
        ),
    },
    "torch_bridge.to_torch_mha": {
        "params.b_q contains NaN or inf (first at index (3,)": lambda: TB.to_torch_mha(
            nan_in("b_q", 3)
        ),
    },
    "torch_bridge.to_torch_attn_mask": {
        ("mask must be boolean, True = may attend", "`mask == 0`"): lambda: TB.to_torch_attn_mask(
            np.zeros((3, 3))
        ),
    },
    "torch_bridge.from_torch_mha": {
        "params.W_q contains NaN or inf (first at index (2, 1)": lambda: TB.from_torch_mha(
            torch_mha(nan=True)
        ),
        "packed in_proj_weight": lambda: TB.from_torch_mha(torch_mha(kdim=4)),
    },
    "tiny.init_tiny_model": {
        "valid head counts for d_model=6 are [1, 2, 3, 6]": lambda: tiny(d_model=6, n_heads=4),
        "n_classes must be an integer >= 1, got 0": lambda: tiny(n_classes=0),
        (
            "positions must be one of 'none', 'learned', 'sinusoidal', 'rope', 'alibi', "
            "got 'rotary'"
        ): lambda: tiny(positions="rotary"),
        "d_k must be even (RoPE turns pairs of coordinates), got 3": lambda: tiny(
            d_model=6, positions="rope"
        ),
    },
    "tiny.TinyModel.forward": {
        "tok_emb contains NaN or inf (first at index (4, 1), shape (5, 8))": lambda: model(
            tok_emb=((4, 1), np.nan)
        ).forward(IDS),
        "the logits a @ W_out + b_out overflow float64": lambda: model(W_out=(..., 1e308)).forward(
            IDS
        ),
        ("positions must be one of", "got 'relative'"): lambda: T.TinyModel(
            model().params, 2, positions="relative"
        ).forward(IDS),
        "token ids must be in 0..4, got values from 0 to 5": lambda: model().forward([[0, 5]]),
        "sequences of length 8 are longer than the model's max_len=7": lambda: model().forward(
            np.zeros((1, 8), int)
        ),
        "ids must be integers of shape (batch, n), got float64 (1, 3)": lambda: model().forward(
            np.zeros((1, 3))
        ),
    },
    "tiny.TinyModel.backward": {
        "d_logits contains NaN or inf (first at index (1, 1, 0, 1)": lambda: backward(
            x((2, 4, 1, 4), at=(1, 1, 0, 1))
        ),
        "the gradient of W_out (from d_out) overflow float64": lambda: backward(
            huge((2, 4, 1, 4), 1e308, np.float64), model(W_out=(..., 1e-12))
        ),
    },
    "tiny.cross_entropy": {
        "logits contains NaN or inf (first at index (0, 0, 2)": lambda: T.cross_entropy(
            x((2, 4, 3), at=(0, 0, 2)), np.zeros((2, 4), int)
        ),
        ("targets must have shape (2, 3)", "got (2, 4)"): lambda: T.cross_entropy(
            np.zeros((2, 3, 4)), np.zeros((2, 4), int)
        ),
        "targets must be in 0..3": lambda: T.cross_entropy(np.zeros((2, 3, 4)), np.full((2, 3), 4)),
        "all targets are -1": lambda: T.cross_entropy(np.zeros((2, 3, 4)), np.full((2, 3), -1)),
    },
    "tiny.Adam.step": {
        "gradient of w has shape (2,), parameter (3,)": lambda: T.Adam().step(
            {"w": np.zeros(3)}, {"w": np.zeros(2)}
        ),
    },
    "tiny.position_experiment": {
        "n_steps must be an integer >= 1, got 0": lambda: experiment(n_steps=0),
        "train_len must be an integer >= 2, got 1": lambda: experiment(train_len=1),
        "test length must be an integer >= 2, got 8.0 (float)": lambda: experiment(
            test_lens=(8.0,)
        ),
        "test lengths must be >= train_len=4, got 3": lambda: experiment(test_lens=(3,)),
    },
    "tasks.repeating_pattern_task": {
        "n_seqs must be an integer >= 1, got True (bool)": lambda: TASKS.repeating_pattern_task(
            True, 6, 5, 2, rng()
        ),
        "vocab_size must be an integer >= 2, got 1": lambda: TASKS.repeating_pattern_task(
            4, 6, 1, 2, rng()
        ),
        "period must be in 1..seq_len-1": lambda: TASKS.repeating_pattern_task(4, 6, 5, 6, rng()),
    },
    "tasks.copy_offsets_task": {
        "seq_len must be an integer >= 2, got 1": lambda: TASKS.copy_offsets_task(
            4, 1, 5, (1,), rng()
        ),
        "offsets must be different numbers in 1..seq_len-1 = 1..5, got (1, 1)": lambda: (
            TASKS.copy_offsets_task(4, 6, 5, (1, 1), rng())
        ),
        "1..5, got (0, 2)": lambda: TASKS.copy_offsets_task(4, 6, 5, (0, 2), rng()),
    },
    "tasks.last_marked_task": {
        "n_marked must be below vocab_size=5 (some tokens unmarked), got 5": lambda: (
            TASKS.last_marked_task(4, 6, 5, 5, rng())
        ),
        "n_marked must be an integer >= 1, got 0": lambda: TASKS.last_marked_task(
            4, 6, 5, 0, rng()
        ),
    },
    "positions.query_positions": {
        "n_q must be an integer >= 0, got -1": lambda: POS.query_positions(-1, 3),
    },
    "positions.sinusoidal_table": {
        "n must be an integer >= 0, got 2.5 (float)": lambda: POS.sinusoidal_table(2.5, 4),
        "d_model must be an integer >= 1, got 0": lambda: POS.sinusoidal_table(3, 0),
        ("d_model must be even (sin and cos come in pairs)", "got 7"): lambda: POS.sinusoidal_table(
            3, 7
        ),
        "base must be a finite number > 1, got 1.0": lambda: POS.sinusoidal_table(3, 4, 1.0),
        "dtype must be a floating-point": lambda: POS.sinusoidal_table(3, 4, dtype=int),
    },
    "positions.sinusoidal_shift": {
        "k must be an integer, got True (bool)": lambda: POS.sinusoidal_shift(True, 4),
        "d_model must be an integer >= 1, got 0": lambda: POS.sinusoidal_shift(1, 0),
        ("d_model must be even", "got 5"): lambda: POS.sinusoidal_shift(1, 5),
        "base must be a finite number > 1, got 0.5": lambda: POS.sinusoidal_shift(1, 4, 0.5),
    },
    "positions.RoPE": {
        "base must be a finite number > 1, got '10000'": lambda: POS.RoPE("10000"),
        "base must be a finite number > 1, got 1e-310": lambda: POS.RoPE(1e-310),  # subnormal
        "layout must be one of 'half', 'interleaved', got 'split'": lambda: POS.RoPE(1e4, "split"),
    },
    "positions.rope_rotate": {
        "x must be (..., n, d_k), with at least 2 axes, got shape (4,)": lambda: rot(
            np.ones(4), [0]
        ),
        "d_k must be even (RoPE turns pairs of coordinates), got 3": lambda: rot(np.ones((2, 3))),
        "positions must be a 1-D array of integers, got float64 (2,)": lambda: rot(
            np.ones((2, 4)), [0.0, 1.5]
        ),
        "positions has 3 entries but there are 2 tokens (axis -2)": lambda: rot(
            np.ones((2, 4)), [0, 1, 2]
        ),
        "x contains NaN or inf (first at index (1, 2, 0), shape (2, 3, 4))": lambda: rot(
            x((2, 3, 4), at=(1, 2, 0)), np.arange(3)
        ),
        "x must hold real numbers, got dtype complex128": lambda: rot(np.ones((2, 4)) * 1j),
        ("x turned by RoPE overflow float32", "|x| = 3e+38"): lambda: rot(huge((2, 2), 3e38)),
    },
    "positions.alibi_slopes": {
        "n_heads must be an integer >= 1, got 0": lambda: POS.alibi_slopes(0),
    },
    "positions.alibi_bias": {
        "n_k must be an integer >= 0, got 2.5 (float)": lambda: POS.alibi_bias(2, 2.5, [0.5]),
        "slopes must be (heads,), got shape (2, 1)": lambda: POS.alibi_bias(2, 3, np.ones((2, 1))),
        "slopes contains NaN or inf (first at index (1,), shape (2,))": lambda: POS.alibi_bias(
            2, 3, [0.5, np.nan]
        ),
        "slopes must hold real numbers, got dtype <U1": lambda: POS.alibi_bias(2, 3, ["a"]),
        ("ALiBi's bias -slopes * |i - j| overflow float32", "|slopes| = 3e+38"): lambda: (
            POS.alibi_bias(3, 3, huge((1,), 3e38))
        ),
    },
}

ACCEPTED = {  # entry point -> {an input that is not an error: a call that must return}
    "multi_head_attention": {
        "lists": lambda: mha(x().tolist(), x().tolist()),
        "a score the mask hides overflows": lambda: scores_overflow(ONLY_KEY_0),
    },
    "MHAParams": {
        "lists": lambda: mha(x((1, 2, 4)), x((1, 2, 4)), A.MHAParams(*[np.eye(4).tolist()] * 4, 2))
    },
    "backprop.mha_forward": {"head_mask as a list": lambda: bp(None, [1.0, 0.5])},
    "backprop.mha_backward": {"d_out as lists": lambda: back(x().tolist())},
    "backprop.softmax_backward": {"lists": lambda: BP.softmax_backward([[0.5, 0.5]], [[1.0, 0.0]])},
    "kv_cache.Decoder.load": {"lists": lambda: load(*[np.ones((1, 2, 3, 2)).tolist()] * 2)},
    "kv_cache.Decoder.__call__": {
        "a prompt, then a token, as lists": lambda: decoded([[1.0] * 8] * 3, [[0.5] * 8]),
        "no new token": lambda: decoded(np.ones((0, 8))),
        "a score the causal mask hides overflows": masked_overflow,
    },
    "scaled_dot_product_attention": {
        "lists": lambda: sdpa(*[[[1.0] * 4] * 3] * 3),
    },
    "softmax": {"-inf (a masked key) in a list": lambda: A.softmax([0.0, -np.inf])},
    "torch_bridge.to_torch_attn_mask": {
        "lists of booleans": lambda: TB.to_torch_attn_mask([[True, False]]),
    },
    "tiny.TinyModel.forward": {
        "RoPE, longer than max_len": lambda: tiny(max_len=3, positions="rope").forward(IDS),
    },
    "tiny.TinyModel.backward": {"d_logits as lists": lambda: backward(x((2, 4, 1, 4)).tolist())},
    "tiny.cross_entropy": {
        "logits as lists": lambda: T.cross_entropy(x((2, 4, 3)).tolist(), np.zeros((2, 4), int)),
    },
    "positions.query_positions": {"more queries than keys": lambda: POS.query_positions(3, 1)},
    "positions.sinusoidal_shift": {"a negative shift": lambda: POS.sinusoidal_shift(-3, 4)},
    "positions.rope_rotate": {
        "no tokens, positions an empty list": lambda: rot(np.ones((0, 4)), []),
        "lists": lambda: rot([[1.0, 2.0], [3.0, 4.0]]),
    },
    "positions.alibi_bias": {"lists": lambda: POS.alibi_bias(2, 3, [0.5, 0.25])},
}

# The other multi-head forwards: one input the shared guard refuses and an output that
# overflows, through each of them.
FORWARDS = {
    "multi_head_attention_per_head": lambda *a: A.multi_head_attention_per_head(*a),
    "blockwise.multi_head_attention": lambda *a: BW.multi_head_attention(*a),
    "backprop.mha_forward": lambda *a: BP.mha_forward(*a),
    "kv_cache.grouped_query_attention": lambda *a: KV.grouped_query_attention(*a),
}
ROUTED = {
    "mask of shape (2, 3, 4) cannot broadcast": lambda f: mha(
        mask=np.ones((2, 3, 4)) > 0, forward=f
    ),
    (OVERFLOW32, "largest |W_o| = 3e+38"): output_overflows,
}
for _name, _forward in FORWARDS.items():
    for _fragments, _call in ROUTED.items():
        REFUSED.setdefault(_name, {})[_fragments] = lambda c=_call, f=_forward: c(f)

ROWS = [
    Row(function, call, (fragments,) if isinstance(fragments, str) else fragments)
    for function, rows in REFUSED.items()
    for fragments, call in rows.items()
] + [
    Row(function, call, (), rule)
    for function, rows in ACCEPTED.items()
    for rule, call in rows.items()
]


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input(row):
    problem = failure(row)
    assert problem is None, f"{row.id}: {problem}"
