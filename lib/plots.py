"""Figures of attention heads, the course's one theme, and :func:`show`, which every cell
that draws ends with. Heatmaps use ``imshow``: seaborn's ``heatmap`` is slow on grids of heads."""

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display
from matplotlib.colors import get_named_colors_mapping

FIGURE_DPI = 100  # pixels per inch of every figure shown (matplotlib's default for notebooks: 72)
SMALLEST_FONT_PT = 7  # no text in a course figure is smaller: 7 pt at 100 dpi is 9.7 px
_ARROW = {"arrowstyle": "-|>", "color": "0.3"}  # the diagrams' arrows: grey, a filled head
PALETTE = "#0173b2 #de8f05 #029e73 #d55e00 #cc78bc #ca9161 #fbafe4 #949494 #ece133 #56b4e9".split()


def show(fig, *, alt: str) -> None:
    """Show ``fig`` under the cell with its alt text ``alt``: what it shows (its finding, not
    "a figure"), for readers who cannot see it; then close it, so that it is not shown twice."""
    if not isinstance(alt, str) or not alt.strip():
        raise ValueError("show(fig, alt=...) needs a sentence saying what the figure shows")
    display(fig, metadata={"image/png": {"alt": alt}})
    plt.close(fig)


def use_course_theme() -> None:
    """What seaborn's ``set_theme`` sets (whitegrid, :data:`PALETTE`, fonts at 0.8), at
    :data:`FIGURE_DPI`, without importing seaborn: a second most notebooks need not spend."""
    rc = dict.fromkeys(["text.color", "axes.labelcolor", "xtick.color", "ytick.color"], ".15")
    rc |= dict.fromkeys(["axes.edgecolor", "grid.color"], ".8")  # a light grey frame and grid
    rc |= dict.fromkeys(["axes.grid", "axes.axisbelow", "patch.force_edgecolor"], True)
    rc |= dict.fromkeys(["xtick.bottom", "ytick.left"], False)  # no tick marks on the axes
    rc |= dict.fromkeys(["font.size", "axes.labelsize", "legend.title_fontsize"], 12 * 0.8)
    rc |= dict.fromkeys(["xtick.labelsize", "ytick.labelsize", "legend.fontsize"], 11 * 0.8)
    rc |= dict.fromkeys(["axes.linewidth", "xtick.major.width", "ytick.major.width"], 1.25)
    rc |= dict.fromkeys(["grid.linewidth", "xtick.minor.width", "ytick.minor.width"], 1.0)
    rc |= dict.fromkeys(["xtick.major.size", "ytick.major.size"], 6.0)
    rc |= dict.fromkeys(["xtick.minor.size", "ytick.minor.size"], 4.0)
    rc |= {"patch.edgecolor": "w", "lines.solid_capstyle": "round", "axes.titlesize": 10}
    rc["font.sans-serif"] = ["Arial", "DejaVu Sans"]  # Arial if installed, else matplotlib's own
    rc["axes.prop_cycle"] = plt.cycler(color=PALETTE)
    rc["axes.titley"] = 1.0  # titles above the axes, where matplotlib's slow auto-placing puts them
    plt.rcParams.update(rc | {"figure.dpi": FIGURE_DPI, "savefig.dpi": FIGURE_DPI})
    colour_codes = get_named_colors_mapping()  # seaborn's too: "k:" is a dotted dark grey line
    for code, i in zip("bgrmyc", (0, 2, 3, 4, 8, 9), strict=True):
        colour_codes[code] = PALETTE[i]  # one by one: update() would keep old colours cached
    colour_codes["k"] = "0.1"


def plot_attention(weights, labels, ax=None, title=None, annotate=False, cbar=True):
    """One head's weights (n, n) as a heatmap: query rows, key columns, labelled by ``labels``."""
    weights = np.asarray(weights)
    if weights.shape != (len(labels), len(labels)):
        raise ValueError(f"weights of shape {weights.shape} do not match {len(labels)} labels")
    ax = ax or plt.subplots(figsize=(3.6, 3.2))[1]
    _heatmap(ax, weights, cmap="Blues", annotate=annotate, cbar=cbar)
    ticks = np.arange(len(labels))
    ax.set_xticks(ticks, labels, rotation=90, fontsize=SMALLEST_FONT_PT + 1)
    ax.set_yticks(ticks, labels, fontsize=SMALLEST_FONT_PT + 1)
    ax.set(xlabel="key (attended to)", ylabel="query")
    ax.set_title(title, fontsize=9)
    return ax


def plot_heads(weights, labels, ncols=4, title=None, head_titles=None, size=2.4):
    """A grid with one heatmap per head: weights (heads, n_q, n_k), all on one colour scale
    from 0 to 1, shown by one colour bar beside the grid. Returns the figure."""
    weights = np.asarray(weights)
    if weights.ndim != 3:
        raise ValueError(f"expected weights (heads, n_q, n_k), got shape {weights.shape}")
    n_heads = weights.shape[0]
    ncols = min(ncols, n_heads)
    nrows = int(np.ceil(n_heads / ncols))
    figsize = (size * ncols + 0.8, size * nrows)  # 0.8 inch more for the colour bar
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False, layout="constrained")
    for ax in axes.flat[n_heads:]:
        ax.set_visible(False)
    for h, ax in enumerate(axes.flat[:n_heads]):
        title_h = head_titles[h] if head_titles else f"head {h}"
        plot_attention(weights[h], labels, ax=ax, cbar=False, title=title_h)
        if h % ncols:  # axis labels on the left column and the bottom row only
            ax.set_ylabel("")
        if h < n_heads - ncols:
            ax.set_xlabel("")
    fig.colorbar(axes.flat[0].images[0], ax=axes, shrink=0.8, label="attention weight")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_head_entropy(entropy, max_entropy=None, ax=None, title=None, ylabel="mean entropy (nats)"):
    """Bar chart of each head's mean attention entropy (nats); optional uniform line."""
    heads = np.arange(len(entropy))
    ax = ax or plt.subplots(figsize=(4, 2.6))[1]
    ax.bar(heads, entropy, color="tab:blue")
    if max_entropy is not None:
        ax.axhline(max_entropy, color="grey", linestyle="--", label="uniform attention")
        ax.legend(loc="lower right")
    ax.set(xticks=heads, xlabel="head", ylabel=ylabel)
    ax.set_title(title or "Attention entropy per head", fontsize=9)
    return ax


def plot_head_similarity(similarity, ax=None, title=None):
    """Heatmap of the (heads, heads) cosine similarity between heads' patterns."""
    heads = np.arange(len(similarity))
    ax = ax or plt.subplots(figsize=(3.4, 3))[1]
    _heatmap(ax, similarity, cmap="magma_r", annotate=len(similarity) <= 8)
    ax.set(xticks=heads, yticks=heads, xlabel="head", ylabel="head")
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


def plot_attention_flow(n="n", d_model="d_model", d_k="d_k"):
    """One attention head as a block diagram, every matrix with its shape. Returns the figure."""
    matrix = {"boxstyle": "round,pad=0.5", "fc": "white", "ec": "0.2"}
    step = {"boxstyle": "round,pad=0.5", "fc": "#d6e6f5", "ec": "#1f5f99"}
    boxes = {"X": (0, 1, f"X\n({n}, {d_model})", matrix)}  # name: (x, y, text, style)
    for name, y in (("Q", 2), ("K", 1), ("V", 0)):
        boxes[f"W_{name}"] = (1.6, y, f"$\\times\\ W_{name}$\n({d_model}, {d_k})", step)
        boxes[name] = (3.2, y, f"{name}\n({n}, {d_k})", matrix)
    boxes |= {
        "scores": (4.8, 1.5, f"scores\n$QK^\\top / \\sqrt{{{d_k}}}$\n({n}, {n})", matrix),
        "softmax": (6.4, 1.5, "softmax\nof each row", step),
        "weights": (8, 1.5, f"weights\n({n}, {n})", matrix),
        "output": (8, 0, f"output\nweights V\n({n}, {d_k})", matrix),
    }
    fig = plt.figure(figsize=(9, 2.9))
    ax = fig.add_axes((0, 0, 1, 1), xlim=(-0.6, 8.6), ylim=(-0.55, 2.45))  # the whole figure
    ax.axis("off")
    text = {}
    for name, (x, y, label, style) in boxes.items():
        text[name] = ax.text(x, y, label, ha="center", va="center", fontsize=9, bbox=style)
    arrows = "X>W_Q X>W_K X>W_V W_Q>Q W_K>K W_V>V Q>scores K>scores scores>softmax"
    for arrow in (arrows + " softmax>weights weights>output V>output").split():
        a, b = (text[name] for name in arrow.split(">"))  # "a>b": from box a to box b
        ends = {"patchA": a.get_bbox_patch(), "patchB": b.get_bbox_patch()}
        centres = {"xy": (0.5, 0.5), "xycoords": b, "xytext": (0.5, 0.5), "textcoords": a}
        ax.annotate("", **centres, arrowprops=_ARROW | ends)
    return fig


def plot_head_split(seq: int, d_model: int, n_heads: int):
    """Multi-head attention's head split, to scale (a square per number). Returns the figure."""
    d_k = d_model // n_heads
    colours = [PALETTE[h % len(PALETTE)] for h in range(n_heads)]  # as seaborn's, cycled
    gap, box, pitch = 8, 15, seq + 5  # squares between columns; attention box; head to head
    top = [(n_heads - 1 - h) * pitch + seq for h in range(n_heads)]  # each head's top edge
    middle = top[0] / 2  # the one-matrix columns are centred on the stack of heads
    widths = (d_model, d_model, d_k, box, d_k, d_model)  # x, Q, Q_h, attention, head_h, concat
    x0, x1, x2, x3, x4, x5, x6 = np.cumsum([0] + [w + gap for w in widths])  # left edges
    width = x6 + d_model
    fig = plt.figure(figsize=(10, 10 * (top[0] + 9) / (width + 8)))
    ax = fig.add_axes((0, 0, 1, 1), xlim=(-4, width + 4), ylim=(-5, top[0] + 4), aspect="equal")
    ax.axis("off")

    def matrix(x, y, colour_of_each_column, name, shape=""):  # (x, y): the top-left corner
        for j, colour in enumerate(colour_of_each_column):
            ax.add_patch(plt.Rectangle((x + j, y - seq), 1, seq, fc=colour, ec="white"))
        for i in range(1, seq):  # thin lines between the rows
            ax.plot([x, x + len(colour_of_each_column)], [y - i] * 2, color="white", lw=0.5)
        centre = x + len(colour_of_each_column) / 2
        ax.text(centre, y + 0.5, name, ha="center", va="bottom", fontsize=9)
        ax.text(centre, y - seq - 0.5, shape, ha="center", va="top", fontsize=8)

    def arrow(x0, y0, x1, y1, label=""):
        ax.annotate("", (x1 - 0.6, y1), (x0 + 0.6, y0), arrowprops=_ARROW)
        ax.text((x0 + x1) / 2, max(y0, y1) + 0.4, label, ha="center", va="bottom", fontsize=10)

    grey, per_column = ["0.75"] * d_model, [c for c in colours for _ in range(d_k)]
    full = f"(seq, d_model)\n= ({seq}, {d_model})"
    matrix(x0, middle + seq / 2, grey, "x", full)
    arrow(x0 + d_model, middle, x1, middle, "@ $W_Q$")
    matrix(x1, middle + seq / 2, per_column, "Q", full)
    frame = {"boxstyle": "round,pad=0.4", "fc": "#d6e6f5", "ec": "#1f5f99"}
    for h in range(n_heads):
        y = top[h] - seq / 2  # the middle of head h's rows
        arrow(x1 + d_model, middle, x2, y)
        each = f"(seq, d_k) each\n= ({seq}, {d_k})" if h == n_heads - 1 else ""  # the lowest head
        matrix(x2, top[h], [colours[h]] * d_k, f"$Q_{h}$", each)
        arrow(x2 + d_k, y, x3, y)
        label = f"attention\nof head {h}\n($Q_{h}$, $K_{h}$, $V_{h}$)"
        ax.text(x3 + box / 2, y, label, ha="center", va="center", fontsize=8, bbox=frame)
        arrow(x3 + box, y, x4, y)
        matrix(x4, top[h], [colours[h]] * d_k, f"head$_{h}$", each)
        arrow(x4 + d_k, y, x5, middle + seq / 2 - (h + 0.5) * seq / n_heads)
    for x, step in ((x1 + d_model, "split"), (x4 + d_k, "concat")):
        ax.text(x + gap / 2, middle, step, ha="center", va="center", fontsize=8)
    matrix(x5, middle + seq / 2, per_column, "concat", f"(seq, heads * d_k)\n= ({seq}, {d_model})")
    arrow(x5 + d_model, middle, x6, middle, "@ $W_O$")
    matrix(x6, middle + seq / 2, grey, "output\n(heads mixed)", full)
    return fig
