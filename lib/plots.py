"""Figures of attention heads, and the course's one theme (notebook 04 on).

:func:`use_course_theme` gives every figure seaborn's look at :data:`FIGURE_DPI`, with no
text under :data:`SMALLEST_FONT_PT`. Heatmaps use ``imshow``: seaborn's ``heatmap`` redraws
the whole figure for every panel, which made an 8-head grid take seconds.

:func:`show` ends every cell that draws: it shows the figure with its *alt text*, the sentence
that says what the figure shows, for readers who cannot see it (the website puts it in the
image's ``alt``; tests/notebooks/test_figure_alt.py checks that every stored figure has one
that says what it shows, by the rule of ``tools/figure_alt.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from IPython.display import display

FIGURE_DPI = 100
"""Pixels per inch of every figure shown (matplotlib's default for notebooks is 72)."""

SMALLEST_FONT_PT = 7
"""No text in a course figure is smaller: 7 pt at 100 dpi is 9.7 px."""


def show(fig, *, alt: str) -> None:
    """Show ``fig`` under the cell, with ``alt``: what the figure shows (its finding, not
    "a figure"), stored with the image in the notebook and carried into the site's ``alt``.
    Closes the figure, so that the notebook does not show it a second time."""
    if not isinstance(alt, str) or not alt.strip():
        raise ValueError("show(fig, alt=...) needs a sentence saying what the figure shows")
    display(fig, metadata={"image/png": {"alt": alt}})
    plt.close(fig)


def use_course_theme() -> None:
    """Set the course's theme: seaborn's ``whitegrid`` style, colour-blind-safe palette,
    fonts sized for figures of 6-10 inches at :data:`FIGURE_DPI`."""
    sns.set_theme(
        context="notebook",
        style="whitegrid",
        palette="colorblind",
        font_scale=0.8,
        rc={"figure.dpi": FIGURE_DPI, "savefig.dpi": FIGURE_DPI, "axes.titlesize": 10},
    )


def plot_attention(weights, labels: Sequence[str], ax=None, title=None, annotate=False, cbar=True):
    """Heatmap of one head's self-attention weights (n, n): rows are queries, columns keys,
    both labelled by the n tokens' ``labels``."""
    weights = np.asarray(weights)
    if weights.shape != (len(labels), len(labels)):
        raise ValueError(f"weights of shape {weights.shape} do not match {len(labels)} labels")
    if ax is None:
        _, ax = plt.subplots(figsize=(3.6, 3.2))
    _heatmap(ax, weights, cmap="Blues", annotate=annotate, cbar=cbar)
    ax.set_xticks(np.arange(len(labels)), labels=list(labels))
    ax.set_yticks(np.arange(len(labels)), labels=list(labels))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query")
    ax.tick_params(axis="x", labelrotation=90, labelsize=SMALLEST_FONT_PT + 1)
    ax.tick_params(axis="y", labelrotation=0, labelsize=SMALLEST_FONT_PT + 1)
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def plot_heads(weights, labels: Sequence[str], ncols=4, title=None, head_titles=None, size=2.4):
    """A grid with one heatmap per head: weights (heads, n_q, n_k). Returns the figure."""
    weights = np.asarray(weights)
    if weights.ndim != 3:
        raise ValueError(f"expected weights (heads, n_q, n_k), got shape {weights.shape}")
    n_heads = weights.shape[0]
    ncols = min(ncols, n_heads)
    nrows = math.ceil(n_heads / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols, size * nrows), squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h >= n_heads:
            ax.set_visible(False)
            continue
        title_h = head_titles[h] if head_titles else f"head {h}"
        plot_attention(weights[h], labels, ax=ax, cbar=False, title=title_h)
        if h % ncols:
            ax.set_ylabel("")
        if h < n_heads - ncols:
            ax.set_xlabel("")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_head_entropy(entropy, max_entropy=None, ax=None, title=None, ylabel="mean entropy (nats)"):
    """Bar chart of each head's mean attention entropy (nats); optional uniform line."""
    entropy = np.asarray(entropy)
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 2.6))
    ax.bar(np.arange(len(entropy)), entropy, color="tab:blue")
    if max_entropy is not None:
        ax.axhline(max_entropy, color="grey", linestyle="--", label="uniform attention")
        ax.legend(loc="lower right")
    ax.set_xticks(np.arange(len(entropy)))
    ax.set_xlabel("head")
    ax.set_ylabel(ylabel)
    ax.set_title(title or "Attention entropy per head", fontsize=9)
    return ax


def plot_head_similarity(similarity, ax=None, title=None):
    """Heatmap of the (heads, heads) cosine similarity between heads' patterns."""
    similarity = np.asarray(similarity)
    if ax is None:
        _, ax = plt.subplots(figsize=(3.4, 3))
    _heatmap(ax, similarity, cmap="magma_r", annotate=similarity.shape[0] <= 8)
    ticks = np.arange(similarity.shape[0])
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_xlabel("head")
    ax.set_ylabel("head")
    ax.set_title(title or "Head-to-head similarity (cosine)", fontsize=9)
    return ax


def _heatmap(ax, values, cmap: str, annotate: bool, cbar: bool = True) -> None:
    """Values in [0, 1] as coloured cells, optionally with the numbers written in."""
    image = ax.imshow(values, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.grid(False)  # the theme's grid lines would cross the cells
    if annotate:
        centred = {"ha": "center", "va": "center", "fontsize": SMALLEST_FONT_PT}
        for (i, j), value in np.ndenumerate(values):  # light text on dark cells
            ax.text(j, i, f"{value:.2f}", color="white" if value > 0.6 else "black", **centred)
    if cbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
