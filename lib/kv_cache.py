"""The KV cache, and the layers that make it smaller: multi-query and grouped-query attention
(notebook 10).

A causal layer's output at position i depends on tokens 0..i only, so when a model generates
text one token at a time, the keys and values of the earlier tokens never change. A **KV
cache** keeps them: each new token is projected once, its key and value are appended, and
its query attends to everything cached. The work per generated token is then O(n) instead
of recomputing O(n^2) attention (:class:`Decoder`).

The cache holds 2 x n_kv_heads x d_k numbers per token and layer, and for long contexts it,
not the weights, fills memory. **Multi-query attention** (Shazeer 2019) gives all query heads
one shared key/value head; **grouped-query attention** (Ainslie et al. 2023) gives each group
of n_heads / n_kv_heads query heads one. Query head i reads key/value head i // group (the
order of ``torch.repeat_interleave``, and of SDPA's ``enable_gqa=True``): n_kv_heads =
n_heads is ordinary multi-head attention, n_kv_heads = 1 is multi-query attention.

- :class:`GQAParams`, :func:`init_gqa_params`, :func:`count_params`: the layer's weights;
- :func:`gqa_from_mha`: a trained multi-head layer made grouped by mean-pooling the key and
  value heads of each group (Ainslie et al.'s conversion, before any further training);
- :func:`gqa_attention`: the forward over whole sequences, with the contract of every
  multi-head forward of lib (README, "Conventions");
- :class:`Decoder`: autoregressive decoding with a preallocated KV cache;
- :func:`cache_bytes_per_token`: the cache's size for a model's configuration.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields

import numpy as np

from . import _validate as V
from . import attention as A
from . import blockwise as BW

# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class GQAParams:
    """Weights of one grouped-query attention layer (row vectors: x @ W).

    W_q, W_o: (d_model, d_model), columns h*d_k:(h+1)*d_k of W_q belong to query head h;
    W_k, W_v: (d_model, n_kv_heads * d_k), columns j*d_k:(j+1)*d_k belong to key/value head
    j, which query heads j*group .. (j+1)*group - 1 read (group = n_heads / n_kv_heads);
    b_q, b_o: (d_model,); b_k, b_v: (n_kv_heads * d_k,): all four biases or none.
    Checked when built and frozen, as :class:`lib.attention.MHAParams`.
    """

    W_q: np.ndarray
    W_k: np.ndarray
    W_v: np.ndarray
    W_o: np.ndarray
    n_heads: int
    n_kv_heads: int
    b_q: np.ndarray | None = None
    b_k: np.ndarray | None = None
    b_v: np.ndarray | None = None
    b_o: np.ndarray | None = None

    def __post_init__(self) -> None:
        weights, biases = V.gqa_param_fields(
            {name: getattr(self, name) for name in V.WEIGHT_NAMES},
            {name: getattr(self, name) for name in V.BIAS_NAMES},
            self.n_heads,
            self.n_kv_heads,
        )
        counts = {"n_heads": int(self.n_heads), "n_kv_heads": int(self.n_kv_heads)}
        for name, value in (weights | biases | counts).items():
            object.__setattr__(self, name, value)

    @property
    def d_model(self) -> int:
        return self.W_q.shape[0]

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.n_heads // self.n_kv_heads

    @property
    def has_bias(self) -> bool:
        return self.b_q is not None

    def as_mha(self) -> A.MHAParams:
        """The same layer as an ordinary multi-head layer: each key/value head's columns
        repeated for every query head of its group (repeat_interleave). It computes exactly
        what this layer computes, with n_heads key/value heads' worth of weights and cache."""

        def repeated(a):
            if a is None:
                return None
            heads = a.reshape(a.shape[:-1] + (self.n_kv_heads, self.d_k))
            return np.repeat(heads, self.group, axis=-2).reshape(a.shape[:-1] + (self.d_model,))

        return A.MHAParams(
            self.W_q, repeated(self.W_k), repeated(self.W_v), self.W_o, self.n_heads,
            self.b_q, repeated(self.b_k), repeated(self.b_v), self.b_o,
        )  # fmt: skip


def init_gqa_params(
    d_model: int, n_heads: int, n_kv_heads: int, rng, bias: bool = False, dtype=np.float64
) -> GQAParams:
    """Random weights, uniform in +-sqrt(6 / (d_in + d_out)) (Glorot/Xavier), as
    :func:`lib.attention.init_mha_params`; biases from N(0, 0.1) with ``bias=True``."""
    d_k = V.heads(d_model, n_heads)
    V.kv_heads(n_heads, n_kv_heads)
    dtype = V.float_dtype(dtype)
    width = n_kv_heads * d_k

    def weight(d_out):
        limit = math.sqrt(6.0 / (d_model + d_out))
        return rng.uniform(-limit, limit, size=(d_model, d_out)).astype(dtype)

    def vector(size):
        return rng.normal(0.0, 0.1, size=size).astype(dtype) if bias else None

    return GQAParams(
        weight(d_model), weight(width), weight(width), weight(d_model), n_heads, n_kv_heads,
        vector(d_model), vector(width), vector(width), vector(d_model),
    )  # fmt: skip


def count_params(params) -> int:
    """Learnable numbers of an MHAParams or a GQAParams: 2 d^2 + 2 d (n_kv_heads d_k), plus
    the biases, 2 d + 2 n_kv_heads d_k."""
    return sum(
        getattr(params, f.name).size
        for f in fields(params)
        if f.name not in ("n_heads", "n_kv_heads") and getattr(params, f.name) is not None
    )


def gqa_from_mha(params: A.MHAParams, n_kv_heads: int) -> GQAParams:
    """A trained multi-head layer with n_kv_heads key/value heads: the key (and value)
    projection of each group of n_heads / n_kv_heads consecutive heads is replaced by the
    mean of the group's projections (weights and biases), as Ainslie et al. (2023) convert a
    checkpoint before training it further. The queries and W_o are kept. With n_kv_heads =
    n_heads nothing changes."""
    V.params(params)
    group = V.kv_heads(params.n_heads, n_kv_heads)
    d_k = params.d_k

    def pooled(a):
        if a is None:
            return None
        heads = a.reshape(a.shape[:-1] + (n_kv_heads, group, d_k))  # head = j * group + i
        return heads.mean(axis=-2).reshape(a.shape[:-1] + (n_kv_heads * d_k,))

    return GQAParams(
        params.W_q, pooled(params.W_k), pooled(params.W_v), params.W_o, params.n_heads,
        n_kv_heads, params.b_q, pooled(params.b_k), pooled(params.b_v), params.b_o,
    )  # fmt: skip


def cache_bytes_per_token(n_layers: int, n_kv_heads: int, d_k: int, bytes_per_number: int = 2):
    """Bytes the KV cache holds per token: a key and a value of n_kv_heads * d_k numbers in
    each of n_layers layers (2 bytes per number in float16/bfloat16)."""
    n_layers = V.count(n_layers, "n_layers")
    n_kv_heads = V.count(n_kv_heads, "n_kv_heads")
    d_k = V.count(d_k, "d_k")
    bytes_per_number = V.count(bytes_per_number, "bytes_per_number")
    return 2 * n_layers * n_kv_heads * d_k * bytes_per_number


# --------------------------------------------------------------------------- the forward


def _project(x_q, x_kv, p: GQAParams, fuse: bool):
    """q (batch, n_q, heads, d_k), pre-scaled by 1/sqrt(d_k); k, v (batch, kv heads, n_k, d_k),
    all views of the projections (one matmul for self-attention)."""
    batch, n_q, d = x_q.shape
    n_k = x_kv.shape[1]
    kv, d_k = p.n_kv_heads, p.d_k
    scale = 1.0 / math.sqrt(d_k)  # a Python float keeps float32 in float32
    b_q = None if p.b_q is None else p.b_q * scale
    b_kv = None if p.b_k is None else np.concatenate([p.b_k, p.b_v])
    W_kv = np.concatenate([p.W_k, p.W_v], axis=1)
    if fuse:
        W = np.concatenate([p.W_q * scale, W_kv], axis=1)
        b = None if b_q is None else np.concatenate([b_q, b_kv])
        qkv = A.project(x_q.reshape(batch * n_q, d), W, b)
        q, kv_part = qkv[:, :d], qkv[:, d:]
    else:
        q = A.project(x_q.reshape(batch * n_q, d), p.W_q * scale, b_q)
        kv_part = A.project(x_kv.reshape(batch * n_k, d), W_kv, b_kv)
    kv_part = kv_part.reshape(batch, n_k, 2, kv, d_k)
    k = kv_part[:, :, 0].transpose(0, 2, 1, 3)
    v = kv_part[:, :, 1].transpose(0, 2, 1, 3)
    return q.reshape(batch, n_q, p.n_heads, d_k), k, v


def _grouped_rows(a: np.ndarray, n_kv_heads: int, group: int, n_q: int) -> np.ndarray:
    """An array of (batch|1, heads|1, n_q|1, ...) laid out as (batch|1, kv heads, group * n_q,
    ...): row i * n_q + t of key/value head j is query t of head j * group + i."""
    if group == 1:
        return a
    full = np.broadcast_to(a, (a.shape[0], n_kv_heads * group, n_q) + a.shape[3:])
    return full.reshape((a.shape[0], n_kv_heads, group * n_q) + a.shape[3:])


def gqa_attention(
    x_q, x_kv, params: GQAParams, mask=None, *, need_weights: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """Grouped-query attention: query head h attends with key/value head h // group.

    The same arguments, results and errors as :func:`lib.attention.multi_head_attention`
    (weights: (batch, n_heads, n_q, n_k)); equal to it on ``params.as_mha()``. The group's
    queries are stacked into one matrix per key/value head, so each key block is read once
    for the whole group (lib's blocked kernel, :func:`lib.blockwise.attend_in_blocks`).
    """
    self_attention = x_q is x_kv
    V.gqa_params(params)
    x_q, x_kv, unbatched = V.mha_inputs(x_q, x_kv, params.d_model)
    V.finite_inputs(x_q, x_kv)
    mask = A.batched_mask(mask, x_q, x_kv, params.n_heads)
    x_q, x_kv, params = V.promoted(x_q, x_kv, params)  # one dtype for every step
    batch, n_q, d = x_q.shape
    n_k = x_kv.shape[1]
    h, kv, g, d_k = params.n_heads, params.n_kv_heads, params.group, params.d_k
    dtype = x_q.dtype
    if batch * n_q * n_k == 0:  # every query attends to nothing: the output is b_o
        out = np.zeros((batch, n_q, d), dtype) + (0 if params.b_o is None else params.b_o)
        weights = np.zeros((batch, h, n_q, n_k), dtype) if need_weights else None
    else:
        weights = BW.new_weights((batch, h, n_q, n_k), dtype) if need_weights else None
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is explained below
            q, k, v = _project(x_q, x_kv, params, fuse=self_attention)
            rows = q.reshape(batch, n_q, kv, g, d_k).transpose(0, 2, 3, 1, 4)
            rows = rows.reshape(batch, kv, g * n_q, d_k)  # the group's queries, stacked
            heads = np.empty((batch, kv, g * n_q, d_k), dtype)
            w_rows = None if weights is None else weights.reshape(batch, kv, g * n_q, n_k)
            m_rows = None if mask is None else _grouped_rows(mask, kv, g, n_q)
            fine = BW.attend(rows, k, v, heads, w_rows, m_rows)
            concat = heads.reshape(batch, kv, g, n_q, d_k).transpose(0, 3, 1, 2, 4)
            out = A.project(concat.reshape(batch * n_q, d), params.W_o, params.b_o)
        if not (fine and V.all_finite(out)):
            V.mha_nonfinite(x_q, x_kv, params.as_mha())
        out = out.reshape(batch, n_q, d)
    if unbatched:
        return out[0], None if weights is None else weights[0]
    return out, weights


# --------------------------------------------------------------------------- decoding


class Decoder:
    """Autoregressive decoding through one causal attention layer, with a KV cache.

        decoder = KV.Decoder(params, batch=1, max_len=1024)
        out = decoder(x_prompt)   # prefill: (batch, t, d_model) -> (batch, t, d_model)
        out = decoder(x_next)     # then one token at a time: (batch, 1, d_model)

    Each call projects only the new tokens, appends their keys and values to the cache and
    lets each new query attend to every cached key up to its own position: the outputs are
    those of ``multi_head_attention(x, x, params, causal_mask(n))`` (or of
    :func:`gqa_attention`) on the whole sequence so far, row by row. ``params``: an
    MHAParams or a GQAParams. The cache is preallocated, (batch, n_kv_heads, max_len, d_k)
    for keys and for values, so appending copies only the new rows.

    The cache holds the weights' dtype; tokens of a wider dtype (float64 tokens, float32
    weights) widen it, as NumPy would promote them, until :meth:`reset`. The weights are
    checked and copied (read-only) when the decoder is built, so each step checks only its
    new tokens; a step that fails (bad input, overflow) leaves the cache as it was.
    """

    def __init__(self, params, batch: int = 1, max_len: int = 2048):
        if isinstance(params, A.MHAParams):  # checked there; the same arrays, groups of one
            params = gqa_from_mha(params, params.n_heads)
        V.gqa_params(params)
        self.batch = V.count(batch, "batch")
        self.max_len = V.count(max_len, "max_len")
        names = [name for name in V.PARAM_NAMES if getattr(params, name) is not None]
        copies = {name: getattr(params, name).copy() for name in names}  # read-only, below
        for a in copies.values():
            a.flags.writeable = False
        self.params = dataclasses.replace(params, **copies)  # changing params changes nothing
        self.dtype = np.result_type(*copies.values())
        self._qkv_weights = {}  # dtype -> [W_q / sqrt(d_k) | W_k | W_v] and its bias
        self._k = self._v = None
        self.reset()

    @property
    def keys(self) -> np.ndarray:
        """The cached keys, (batch, n_kv_heads, length, d_k) (a view)."""
        return self._k[:, :, : self.length]

    @property
    def values(self) -> np.ndarray:
        """The cached values, (batch, n_kv_heads, length, d_k) (a view)."""
        return self._v[:, :, : self.length]

    @property
    def cache_bytes(self) -> int:
        """Bytes of the cache in use: keys and values of ``length`` tokens."""
        return self.keys.nbytes + self.values.nbytes

    def reset(self) -> None:
        """Forget every cached token (the arrays are kept for the next sequence, in the
        weights' dtype)."""
        self.length = 0
        self._k_norm = 0.0  # the largest |key| in the cache
        if self._k is None or self._k.dtype != self.dtype:
            shape = (self.batch, self.params.n_kv_heads, self.max_len, self.params.d_k)
            self._k = np.zeros(shape, self.dtype)
            self._v = np.zeros(shape, self.dtype)

    def _qkv(self, dtype):
        """[W_q / sqrt(d_k) | W_k | W_v] and [b_q / sqrt(d_k) | b_k | b_v] in ``dtype`` (kept):
        one matmul gives the new tokens' scaled queries, keys and values."""
        if dtype not in self._qkv_weights:
            p = self.params
            scale = 1.0 / math.sqrt(p.d_k)  # applied in ``dtype``: a Python float keeps it

            def joined(q, k, v):
                both = np.concatenate([q.astype(dtype) * scale, k, v], axis=-1)
                return both.astype(dtype, copy=False)

            b = None if p.b_q is None else joined(p.b_q, p.b_k, p.b_v)
            self._qkv_weights[dtype] = joined(p.W_q, p.W_k, p.W_v), b
        return self._qkv_weights[dtype]

    def __call__(self, x_new) -> np.ndarray:
        """The layer's outputs at the new positions, (batch, t, d_model) (or (t, d_model))."""
        p = self.params
        x, unbatched = V.decoder_input(x_new, self.batch, p.d_model)
        batch, t, d = x.shape
        V.cache_room(self.length, t, self.max_len)
        dtype = np.result_type(x, self._k)  # NumPy's promotion of the tokens and the cache
        if t == 0:
            out = np.zeros((batch, 0, d), dtype)
            return out[0] if unbatched else out
        cache_k, cache_v = self._k, self._v
        if dtype != cache_k.dtype:  # wider tokens: a wider copy, kept if the step succeeds
            cache_k, cache_v = cache_k.astype(dtype), cache_v.astype(dtype)
        x = x.astype(dtype, copy=False)
        start, end = self.length, self.length + t
        kv, g, d_k = p.n_kv_heads, p.group, p.d_k
        width = kv * d_k
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is explained below
            qkv = A.project(x.reshape(batch * t, d), *self._qkv(dtype))  # q scaled
            if not V.all_finite(qkv):
                self._explain(x, qkv, None, None)
            rows = qkv[:, :d].reshape(batch, t, kv, g, d_k).transpose(0, 2, 3, 1, 4)
            rows = rows.reshape(batch, kv, g * t, d_k)  # the group's new queries, stacked
            k_new = qkv[:, d : d + width].reshape(batch, t, kv, d_k).transpose(0, 2, 1, 3)
            cache_k[:, :, start:end] = k_new  # beyond `length` until the step succeeds
            cache_v[:, :, start:end] = (
                qkv[:, d + width :].reshape(batch, t, kv, d_k).transpose(0, 2, 1, 3)
            )
            keys, values = cache_k[:, :, :end], cache_v[:, :, :end]
            q_norm = V.largest_row_norm(rows)
            k_norm = max(self._k_norm, V.largest_row_norm(k_new))
            if not V.scores_fit(rows, keys, q_norm, k_norm):
                self._explain(x, qkv, rows, keys)
            small = q_norm * k_norm <= BW.SAFE_SCORE.get(dtype, 0)
            if t == 1:  # one new query per head: it may attend to every cached key
                S = rows @ keys.transpose(0, 1, 3, 2)  # (batch, kv, g, end)
                if not small:
                    S -= S.max(axis=-1, keepdims=True)
                np.exp(S, out=S)
                # Normalised before P @ V (the weights' row is as short as the keys): a sum of
                # exp(score) * v could overflow where the weighted mean of v does not.
                S /= S.sum(axis=-1, keepdims=True)
                heads = (S @ values).reshape(batch, d)  # (batch, kv, g, d_k) flattened
            else:  # a prompt: causal among the new tokens, queries stacked per group
                reach = np.tile(np.arange(start + 1, end + 1), g)[None, None, :]
                out_rows = np.empty((batch, kv, g * t, d_k), dtype)
                plan = BW.MaskPlan(reach)
                BW.attend_in_blocks(rows, keys, values, out_rows, None, plan, small=small)
                heads = out_rows.reshape(batch, kv, g, t, d_k).transpose(0, 3, 1, 2, 4)
                heads = heads.reshape(batch * t, d)
            out = A.project(heads, p.W_o, p.b_o)
        if not V.all_finite(out):
            self._explain(x, qkv, rows, keys, values)
        self._k, self._v = cache_k, cache_v
        self.length = end
        self._k_norm = k_norm
        out = out.reshape(batch, t, d)
        return out[0] if unbatched else out

    def _explain(self, x, qkv, q, keys, values=None) -> None:
        """Raise the ValueError naming the first stage whose finite operands overflowed."""
        p = self.params
        if q is None:  # the projections
            d, width = p.d_model, p.n_kv_heads * p.d_k
            parts = {"q": qkv[:, :d], "k": qkv[:, d : d + width], "v": qkv[:, d + width :]}
            for part, y in parts.items():
                if not V.all_finite(y):
                    W, b = getattr(p, "W_" + part), getattr(p, "b_" + part)
                    names = {"x_new": x, f"W_{part}": W} | ({} if b is None else {f"b_{part}": b})
                    raise V.overflow(V.stage(part, "x_new", b is not None), x.dtype, names)
        if values is None:  # the scores
            raise V.overflow(V.SCORES, x.dtype, {"q": q, "k": keys})
        names = {"v": values, "W_o": p.W_o}
        raise V.overflow(V.OUTPUT, x.dtype, names | ({} if p.b_o is None else {"b_o": p.b_o}))
