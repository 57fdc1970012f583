"""The tasks the tiny model learns (notebooks 05, 06, 09, 10): sequences of random tokens,
and at each position the answer a head must fetch. Each task returns (ids, targets), targets
-1 (:data:`IGNORE`) where nothing is to be predicted: those positions count neither in the
loss nor in the accuracy."""

import numpy as np

from . import _validate as valid

IGNORE = -1  # target value of a position that is not scored


def repeating_pattern_task(
    n_seqs: int, seq_len: int, vocab_size: int, period: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Notebook 05's first task: a random pattern of ``period`` tokens, repeated; the target
    at i is the next token, x[i + 1] = x[i + 1 - period], which one head looking ``period - 1``
    back finds. Before the pattern has been seen (i < period - 1) the target is -1."""
    _check_task_args(n_seqs, seq_len, vocab_size)
    if not 1 <= period < seq_len:
        raise ValueError(f"period must be in 1..seq_len-1 = 1..{seq_len - 1}, got {period}")
    patterns = rng.integers(0, vocab_size, size=(n_seqs, period))
    full = np.tile(patterns, seq_len // period + 1)[:, : seq_len + 1]  # (n_seqs, seq_len + 1)
    ids, targets = full[:, :-1].copy(), full[:, 1:].copy()
    targets[:, : period - 1] = IGNORE
    return ids, targets


def copy_offsets_task(
    n_seqs: int, seq_len: int, vocab_size: int, offsets: tuple[int, ...], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Random tokens; at position i, answer every x[i - o] for o in ``offsets``, each in its
    own slot: targets (n_seqs, seq_len, len(offsets)), -1 where i < max(offsets)."""
    _check_task_args(n_seqs, seq_len, vocab_size)
    offsets = tuple(int(o) for o in offsets)
    in_range = all(1 <= o < seq_len for o in offsets)
    if not offsets or not in_range or len(set(offsets)) != len(offsets):
        raise ValueError(
            f"offsets must be different numbers in 1..seq_len-1 = 1..{seq_len - 1}, got {offsets}"
        )
    ids = rng.integers(0, vocab_size, size=(n_seqs, seq_len))
    targets = np.full((n_seqs, seq_len, len(offsets)), IGNORE, dtype=ids.dtype)
    start = max(offsets)
    for slot, o in enumerate(offsets):
        targets[:, start:, slot] = ids[:, start - o : seq_len - o]
    return ids, targets


def last_marked_task(
    n_seqs: int, seq_len: int, vocab_size: int, n_marked: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Notebook 09's second task: at i, the latest *marked* token (one of the last ``n_marked``
    ids) at or before i, found by what it is, never by a fixed offset; -1 before the first."""
    _check_task_args(n_seqs, seq_len, vocab_size)
    n_marked = valid.integer(n_marked, "n_marked", low=1)
    if n_marked >= vocab_size:
        raise ValueError(
            f"n_marked must be below vocab_size={vocab_size} (some tokens unmarked), got {n_marked}"
        )
    ids = rng.integers(0, vocab_size, size=(n_seqs, seq_len))
    where = np.where(ids >= vocab_size - n_marked, np.arange(seq_len), -1)  # (n_seqs, seq_len)
    last = np.maximum.accumulate(where, axis=1)  # position of the latest marked token so far
    found = np.take_along_axis(ids, np.maximum(last, 0), axis=1)
    return ids, np.where(last >= 0, found, IGNORE)


def _check_task_args(n_seqs: int, seq_len: int, vocab_size: int) -> None:
    valid.integer(n_seqs, "n_seqs", low=1)
    valid.integer(seq_len, "seq_len", low=2)
    valid.integer(vocab_size, "vocab_size", low=2)
