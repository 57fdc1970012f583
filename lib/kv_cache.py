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

A grouped layer is an :class:`lib.attention.MHAParams` with ``n_kv_heads`` < ``n_heads``
(:func:`lib.attention.init_mha_params` draws one); every multi-head forward of lib runs it.
:func:`gqa_from_mha` makes one from a trained multi-head layer, as Ainslie et al. convert a
checkpoint; :func:`cache_bytes_per_token` gives the cache's size for a model's configuration.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import _validate as valid
from . import attention as A
from . import blockwise as BW

# --------------------------------------------------------------------------- parameters


def gqa_from_mha(params: A.MHAParams, n_kv_heads: int) -> A.MHAParams:
    """A trained multi-head layer with n_kv_heads key/value heads: the key (and value)
    projection of each group of n_heads / n_kv_heads consecutive heads is replaced by the
    mean of the group's projections (weights and biases), as Ainslie et al. (2023) convert a
    checkpoint before training it further. The queries and W_o are kept. With n_kv_heads =
    n_heads nothing changes."""
    A.check_params(params)
    if params.group != 1:
        raise ValueError(
            f"gqa_from_mha pools the key/value heads of a layer that has one per query head; "
            f"this one has n_kv_heads={params.n_kv_heads} for n_heads={params.n_heads}"
        )
    group = valid.kv_heads(params.n_heads, n_kv_heads)
    d_k = params.d_k

    def pooled(a):
        if a is None:
            return None
        heads = a.reshape(a.shape[:-1] + (n_kv_heads, group, d_k))  # head = j * group + i
        return heads.mean(axis=-2).reshape(a.shape[:-1] + (n_kv_heads * d_k,))

    keys_and_values = {name: pooled(getattr(params, name)) for name in ("W_k", "W_v", "b_k", "b_v")}
    return dataclasses.replace(params, **keys_and_values, n_kv_heads=n_kv_heads)


def cache_bytes_per_token(n_layers: int, n_kv_heads: int, d_k: int, bytes_per_number: int = 2):
    """Bytes the KV cache holds per token: a key and a value of n_kv_heads * d_k numbers in
    each of n_layers layers (2 bytes per number in float16/bfloat16)."""
    n_layers = valid.integer(n_layers, "n_layers", low=1)
    n_kv_heads = valid.integer(n_kv_heads, "n_kv_heads", low=1)
    d_k = valid.integer(d_k, "d_k", low=1)
    bytes_per_number = valid.integer(bytes_per_number, "bytes_per_number", low=1)
    return 2 * n_layers * n_kv_heads * d_k * bytes_per_number


# --------------------------------------------------------------------------- decoding


class Decoder:
    """Autoregressive decoding through one causal attention layer, with a KV cache.

        decoder = KV.Decoder(params, batch=1, max_len=1024)
        out = decoder(x_prompt)   # prefill: (batch, t, d_model) -> (batch, t, d_model)
        out = decoder(x_next)     # then one token at a time: (batch, 1, d_model)

    Each call projects only the new tokens, appends their keys and values to the cache and
    lets each new query attend to every cached key up to its own position: the outputs are
    those of ``multi_head_attention(x, x, params, causal=True)`` on the whole sequence so
    far, row by row. ``params``: an MHAParams (grouped key/value heads or not). The cache is
    preallocated, (batch, n_kv_heads, max_len, d_k) for keys and for values, so appending
    copies only the new rows.

    The cache holds the weights' dtype; tokens of a wider dtype (float64 tokens, float32
    weights) widen it, as NumPy would promote them, until :meth:`reset`. The weights are
    checked and copied (read-only) when the decoder is built, so each step checks only its
    new tokens; a step that fails (bad input, overflow) leaves the cache as it was.
    """

    def __init__(self, params: A.MHAParams, batch: int = 1, max_len: int = 2048):
        A.check_params(params)
        self.batch = valid.integer(batch, "batch", low=1)
        self.max_len = valid.integer(max_len, "max_len", low=1)
        copies = {name: a.copy() for name, a in params.arrays().items()}  # read-only, below
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

    def load(self, keys, values) -> None:
        """Start from given keys and values, each (batch, n_kv_heads, L, d_k) with L at most
        max_len, as if L tokens had been decoded (their queries and outputs never computed):
        for timing a step at a long context without running its prompt. Copied into the
        cache, in its dtype (the weights')."""
        p = self.params
        layout = f"(batch, n_kv_heads, L, d_k) = ({self.batch}, {p.n_kv_heads}, L, {p.d_k})"
        arrays = {
            "keys": valid.real_array(keys, "keys"),
            "values": valid.real_array(values, "values"),
        }
        for name, a in arrays.items():
            if a.ndim != 4 or a.shape[:2] != (self.batch, p.n_kv_heads) or a.shape[3] != p.d_k:
                raise ValueError(f"{name} must be {layout}, got shape {a.shape}")
            valid.finite(a, name)
        keys, values = arrays["keys"], arrays["values"]
        if keys.shape != values.shape:
            raise ValueError(f"keys {keys.shape} and values {values.shape} must have one shape")
        if keys.shape[2] > self.max_len:
            raise ValueError(
                f"the KV cache holds at most max_len={self.max_len} tokens, got {keys.shape[2]}"
            )
        self.reset()
        end = keys.shape[2]
        self._k[:, :, :end], self._v[:, :, :end] = keys, values
        self.length = end
        self._k_norm = valid.largest_row_norm(self._k[:, :, :end])

    def _qkv(self, dtype):
        """:func:`lib.blockwise.fused_qkv` of the weights in ``dtype``, kept for the next step."""
        if dtype not in self._qkv_weights:
            self._qkv_weights[dtype] = BW.fused_qkv(self.params, dtype)
        return self._qkv_weights[dtype]

    def _new_tokens(self, x) -> tuple[np.ndarray, bool]:
        """x_new checked: real, (batch, t, d_model) or (t, d_model) when batch is 1, finite,
        fitting in the cache; returned with a batch axis, and whether it came without one."""
        d_model = self.params.d_model
        x = valid.real_array(x, "x_new")
        layouts = f"(batch, t, d_model) = ({self.batch}, t, {d_model})" + (
            f" or (t, d_model) = (t, {d_model})" if self.batch == 1 else ""
        )
        unbatched = x.ndim == 2 and self.batch == 1
        x3 = x[None] if unbatched else x
        if x3.ndim != 3 or x3.shape[0] != self.batch or x3.shape[2] != d_model:
            raise ValueError(f"x_new must be {layouts}, got shape {x.shape}")
        valid.finite(x3, "x_new")
        if self.length + x3.shape[1] > self.max_len:
            raise ValueError(
                f"the KV cache holds at most max_len={self.max_len} tokens and has "
                f"{self.length}: {x3.shape[1]} more do not fit (build the Decoder with a "
                "larger max_len, or reset() it)"
            )
        return x3, unbatched

    def __call__(self, x_new) -> np.ndarray:
        """The layer's outputs at the new positions, (batch, t, d_model) (or (t, d_model))."""
        p = self.params
        x, unbatched = self._new_tokens(x_new)
        batch, t, d = x.shape
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
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is explained below
            qkv = A.project(x.reshape(batch * t, d), *self._qkv(dtype))  # q scaled
            rows, k_new, v_new = BW.grouped_heads(qkv[:, :d], qkv[:, d:], batch, kv, g)
            cache_k[:, :, start:end] = k_new  # beyond `length` until the step succeeds
            cache_v[:, :, start:end] = v_new
            keys, values = cache_k[:, :, :end], cache_v[:, :, :end]
            q_norm = valid.largest_row_norm(rows)
            k_norm = max(self._k_norm, valid.largest_row_norm(k_new))
            fine = valid.scores_fit(rows, keys, q_norm, k_norm)  # every pair: masked ones too
            if fine and t == 1:  # one new query per head: it may attend to every cached key
                # (keys @ rows^T)^T won only with some kernels: bench/results/*-decode-order.txt
                weights = A.softmax_inplace(rows @ keys.transpose(0, 1, 3, 2))  # (b, kv, g, end)
                heads = (weights @ values).reshape(batch, d)  # (batch, kv, g, d_k) flattened
            elif fine:  # a prompt: causal among the new tokens, queries stacked per group
                plan = BW.make_plan(None, True, t, end, dtype, kv, g)
                out_rows = np.empty((batch, kv, g * t, d_k), dtype)
                fine = BW.attend(rows, keys, values, out_rows, None, plan, norms=(q_norm, k_norm))
                heads = BW.concat_groups(out_rows, g)  # (batch * t, d)
            if fine:
                out = A.project(heads, p.W_o, p.b_o)
        if not (fine and valid.all_finite(out)):
            valid.mha_nonfinite(p, x, x, cache=(keys, values))
        self._k, self._v = cache_k, cache_v
        self.length = end
        self._k_norm = k_norm
        out = out.reshape(batch, t, d)
        return out[0] if unbatched else out
