"""The KV cache, and grouped-query attention, which makes it smaller (notebook 10).

A causal layer that generates one token at a time keeps the earlier tokens' keys and values
in a cache (:class:`Decoder`), so that each step projects only the new token: O(n) work
instead of O(n^2). Grouped-query attention (:class:`GQAParams`) shrinks the cache by sharing
each key/value head among consecutive query heads; one key/value head is multi-query attention.
"""

import dataclasses
import math

import numpy as np

from . import _validate as valid
from . import attention as A

KV_NAMES = ("W_k", "W_v", "b_k", "b_v")  # the arrays of the keys and values


@dataclasses.dataclass(frozen=True)
class GQAParams(A.MHAParams):
    """A grouped-query layer: an :class:`lib.attention.MHAParams` whose W_k and W_v are
    (d_model, n_kv_heads * d_k) (b_k, b_v (n_kv_heads * d_k,)): query head i reads key/value
    head i // group, group = n_heads / n_kv_heads (``torch.repeat_interleave``'s order)."""

    n_kv_heads: int = 1


def init_gqa_params(d_model, n_heads, n_kv_heads, rng, bias=False, dtype=np.float64) -> GQAParams:
    """Random weights, drawn as :func:`lib.attention.init_mha_params` draws them."""
    width = valid.integer(n_kv_heads, "n_kv_heads", low=1) * valid.heads(d_model, n_heads)
    dtype = valid.float_dtype(dtype)
    widths = dict(q=d_model, k=width, v=width, o=d_model)  # of each weight and its bias
    arrays = {f"W_{part}": A.glorot(rng, d_model, w, dtype) for part, w in widths.items()}
    if bias:
        arrays |= {f"b_{part}": rng.normal(0.0, 0.1, w).astype(dtype) for part, w in widths.items()}
    return GQAParams(**arrays, n_heads=n_heads, n_kv_heads=n_kv_heads)


def repeat_kv_heads(p: GQAParams) -> A.MHAParams:
    """The ordinary multi-head layer a grouped one is: each key/value head's columns of W_k
    and W_v (and b_k, b_v) repeated for every query head of its group."""
    valid.params(p)

    def repeated(a):  # (..., n_kv_heads * d_k) -> (..., n_heads * d_k)
        heads = a.reshape(a.shape[:-1] + (-1, p.d_k))  # (..., n_kv_heads, d_k)
        return np.repeat(heads, p.n_heads // heads.shape[-2], axis=-2).reshape(a.shape[:-1] + (-1,))

    arrays = {name: repeated(a) if name in KV_NAMES else a for name, a in p.arrays().items()}
    return A.MHAParams(**arrays, n_heads=p.n_heads)


def grouped_query_attention(
    x_q, x_kv, params: GQAParams, mask=None, *, causal=False, need_weights=True
):
    """Grouped-query attention: :func:`lib.attention.multi_head_attention` (arguments and
    results as there) of :func:`repeat_kv_heads`; the saving, a smaller KV cache, is the
    :class:`Decoder`'s."""
    return A.multi_head_attention(
        x_q, x_kv, repeat_kv_heads(params), mask, causal=causal, need_weights=need_weights
    )


def gqa_from_mha(params: A.MHAParams, n_kv_heads: int) -> GQAParams:
    """A trained multi-head layer made grouped-query: each group's key (and value) projections,
    weights and biases, replaced by their mean, as Ainslie et al. (2023) convert a checkpoint
    before training it further. The queries and W_o are kept."""
    need = "gqa_from_mha pools the key/value heads of a layer that has one per query head"
    valid.params(params, ungrouped=need)
    group = valid.kv_heads(params.n_heads, n_kv_heads)

    def pooled(a):  # (..., n_heads * d_k) -> (..., n_kv_heads * d_k); head j * group + i
        heads = a.reshape(a.shape[:-1] + (n_kv_heads, group, params.d_k))
        return heads.mean(axis=-2).reshape(a.shape[:-1] + (-1,))

    arrays = {name: pooled(a) if name in KV_NAMES else a for name, a in params.arrays().items()}
    return GQAParams(**arrays, n_heads=params.n_heads, n_kv_heads=n_kv_heads)


def cache_bytes_per_token(n_layers: int, n_kv_heads: int, d_k: int, bytes_per_number: int = 2):
    """Bytes the KV cache holds per token: a key and a value of n_kv_heads * d_k numbers in
    each of n_layers layers (2 bytes per number in float16/bfloat16)."""
    n_layers = valid.integer(n_layers, "n_layers", low=1)
    n_kv_heads = valid.integer(n_kv_heads, "n_kv_heads", low=1)
    d_k = valid.integer(d_k, "d_k", low=1)
    bytes_per_number = valid.integer(bytes_per_number, "bytes_per_number", low=1)
    return 2 * n_layers * n_kv_heads * d_k * bytes_per_number


class Decoder:
    """Autoregressive decoding through one causal attention layer, with a KV cache.

        decoder = KV.Decoder(params, batch=1, max_len=1024)
        out = decoder(x_prompt)   # prefill: (batch, t, d_model) -> (batch, t, d_model)
        out = decoder(x_next)     # then one token at a time: (batch, 1, d_model)

    The outputs are those of ``multi_head_attention(x, x, params, causal=True)`` on the whole
    sequence so far, row by row. ``params`` (an MHAParams or a :class:`GQAParams`) is copied;
    the cache, (batch, n_kv_heads, max_len, d_k) for keys and for values, is preallocated in
    the weights' dtype. A step that fails leaves it as it was.
    """

    def __init__(self, params: A.MHAParams, batch: int = 1, max_len: int = 2048):
        valid.params(params)
        self.batch = valid.integer(batch, "batch", low=1)
        self.max_len = valid.integer(max_len, "max_len", low=1)
        copies = {name: a.copy() for name, a in params.arrays().items()}
        for a in copies.values():
            a.flags.writeable = False  # changing params afterwards changes nothing here
        self.params = dataclasses.replace(params, **copies)
        self.n_kv_heads = getattr(params, "n_kv_heads", params.n_heads)
        self.dtype = np.result_type(*copies.values())
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
        """Forget every cached token (the arrays are kept, in the weights' dtype)."""
        self.length = 0
        if self._k is None or self._k.dtype != self.dtype:
            shape = (self.batch, self.n_kv_heads, self.max_len, self.params.d_k)
            self._k = np.zeros(shape, self.dtype)
            self._v = np.zeros(shape, self.dtype)

    def load(self, keys, values) -> None:
        """Start from given keys and values, each (batch, n_kv_heads, L, d_k), as if L tokens
        had been decoded: for timing a step at a long context without running its prompt."""
        keys, values = _cache_contents(keys, values, self._k.shape)
        self.reset()
        self.length = keys.shape[2]
        self._k[:, :, : self.length], self._v[:, :, : self.length] = keys, values

    def __call__(self, x_new) -> np.ndarray:
        """The layer's outputs at the new positions, (batch, t, d_model) (or (t, d_model))."""
        p, kv = self.params, self.n_kv_heads
        x, unbatched = _new_tokens(x_new, self.batch, p.d_model, self.length, self.max_len)
        batch, t, d = x.shape
        start, end = self.length, self.length + t
        group = p.n_heads // kv
        dtype = np.result_type(x, self._k)  # NumPy's promotion of the tokens and the cache
        cache_k, cache_v = self._k.astype(dtype, copy=False), self._v.astype(dtype, copy=False)
        x = x.astype(dtype, copy=False)
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
            q = A.project(x, p.W_q, p.b_q) * (1.0 / math.sqrt(p.d_k))  # (batch, t, d), scaled
            k = A.project(x, p.W_k, p.b_k).reshape(batch, t, kv, p.d_k)
            v = A.project(x, p.W_v, p.b_v).reshape(batch, t, kv, p.d_k)
            cache_k[:, :, start:end] = k.transpose(0, 2, 1, 3)  # kept only if the step succeeds
            cache_v[:, :, start:end] = v.transpose(0, 2, 1, 3)
            keys, values = cache_k[:, :, :end], cache_v[:, :, :end]  # (batch, kv, end, d_k)
            # Each key/value head's group of queries stacked as rows (head i, token s at row
            # i * t + s), so that one product reads the cached keys once for all of them.
            rows = q.reshape(batch, t, kv, group, p.d_k).transpose(0, 2, 3, 1, 4)
            rows = rows.reshape(batch, kv, group * t, p.d_k)
            scores = rows @ keys.transpose(0, 1, 3, 2)  # (batch, kv, group * t, end)
            mask = np.tile(A.causal_mask(t, end), (group, 1)) if t > 1 else None
            heads = A.masked_softmax(scores, mask) @ values  # (batch, kv, group * t, d_k)
            heads = heads.reshape(batch, kv, group, t, p.d_k).transpose(0, 3, 1, 2, 4)
            out = A.project(heads.reshape(batch, t, d), p.W_o, p.b_o)  # (batch, t, d_model)
        valid.finite_output(out, {"x_new": x, "keys": keys, "values": values} | p.arrays())
        self._k, self._v, self.length = cache_k, cache_v, end
        return out[0] if unbatched else out


def _new_tokens(x, batch: int, d_model: int, length: int, max_len: int):
    """A decoder's new tokens: real, finite, (batch, t, d_model) or (t, d_model) when batch
    is 1, fitting in the cache; returned with a batch axis, and whether it came without."""
    shapes = [(batch, None, d_model)] + ([(None, d_model)] if batch == 1 else [])
    layouts = f"(batch, t, d_model) = ({batch}, t, {d_model})"
    layouts += f" or (t, d_model) = (t, {d_model})" if batch == 1 else ""
    x = valid.array(x, "x_new", shapes, layouts)
    if length + x.shape[-2] > max_len:
        raise ValueError(
            f"the KV cache holds at most max_len={max_len} tokens and has {length}: "
            f"{x.shape[-2]} more do not fit (build the Decoder with a larger max_len, or "
            "reset() it)"
        )
    return (x[None], True) if x.ndim == 2 else (x, False)


def _cache_contents(keys, values, cache_shape: tuple):
    """Keys and values to load into a cache of ``cache_shape`` (batch, n_kv_heads, max_len,
    d_k): real, finite, one shape (batch, n_kv_heads, L, d_k) with L <= max_len."""
    batch, n_kv, max_len, d_k = cache_shape
    shape = (batch, n_kv, None, d_k)  # L: any number of tokens, checked below
    layout = f"(batch, n_kv_heads, L, d_k) = ({batch}, {n_kv}, L, {d_k})"
    keys = valid.array(keys, "keys", [shape], layout)
    values = valid.array(values, "values", [shape], layout)
    if keys.shape != values.shape:
        raise ValueError(f"keys {keys.shape} and values {values.shape} must have one shape")
    if keys.shape[2] > max_len:
        raise ValueError(
            f"the KV cache holds at most max_len={max_len} tokens, got {keys.shape[2]}"
        )
    return keys, values
