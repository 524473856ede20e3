"""Paper figures from run directories, in one consistent style.

Every figure function reads a run directory through the public readers of :mod:`mbs.io`
(never stage internals), draws with matplotlib, and writes each configured format (vector
PDF and PNG by default) with fixed metadata, so regenerating from the same run directory
gives byte-identical files. Sizes follow a one-column (3.4 in) or two-column (7.0 in) layout.

One module per stage: :mod:`mbs.figures.calibration`, and the synthesis, Goose and evaluation
modules; :data:`mbs.figures.stages.BY_STAGE` maps a run directory's ``summary.json`` ``stage`` to
the function that draws its figures (a synthesis method's spec names its own).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mbs.runs.summary import RunKind

logging.getLogger("fontTools").setLevel(logging.WARNING)  # PDF font subsetting logs every table at INFO

def stage_key(summary: Mapping[str, Any]) -> str:
    """The kind of a run from its summary: its stage, ``synthesize/<method>`` for synthesis.

    Raises:
        SummaryError: ``stage`` or ``method`` is not a string (names the field).
    """
    return RunKind.of(summary).key


#: Band colours: solved_all (too easy), goldilocks (learnable), failed_all (too hard).
BAND_COLORS = {"solved_all": "#4C72B0", "goldilocks": "#55A868", "failed_all": "#C44E52"}
BAND_LABELS = {"solved_all": "solved_all", "goldilocks": "Goldilocks", "failed_all": "failed_all"}
WIDTHS_IN = {"single": 3.4, "double": 7.0}

STYLE = {
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": 150,
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,
    "svg.hashsalt": "mbs",
}


def figure(width: str = "single", aspect: float = 0.7, ncols: int = 1):
    """A new figure sized for a one- or two-column layout.

    Args:
        width: ``single`` (3.4 in) or ``double`` (7.0 in).
        aspect: Height / width.
        ncols: Subplot columns.

    Raises:
        KeyError: Unknown width.
    """
    w = WIDTHS_IN[width]
    plt.rcParams.update(STYLE)
    fig, axes = plt.subplots(1, ncols, figsize=(w, w * aspect), squeeze=False)
    return fig, axes[0]


def band_bars(
    width: str,
    labels: Sequence[str],
    shares: Sequence[dict[str, float]],
    intervals: Sequence[dict[str, Any] | None] | None = None,
):
    """One horizontal bar per row, stacked solved_all | Goldilocks | failed_all, in percent.

    Args:
        width: ``single`` or ``double`` (see :func:`figure`).
        labels: Row labels, top to bottom.
        shares: Per row, the share of problems in each band (fractions in [0, 1]).
        intervals: Per row (or ``None``), ``{band: {"ci": [lo, hi], ...}}`` as in a summary's
            ``intervals.bands`` (:func:`mbs.stats.share`): the 95% intervals of the solved_all and
            failed_all shares are drawn as error bars at the edges of their segments.

    Returns:
        ``(fig, ax)``, with axis, labels and legend set; the caller adds a title and saves.
    """
    fig, (ax,) = figure(width, aspect=0.45 + 0.06 * len(labels))
    left = [0.0] * len(labels)
    for band in ("solved_all", "goldilocks", "failed_all"):
        vals = [100 * row[band] for row in shares]
        ax.barh(labels, vals, left=left, color=BAND_COLORS[band], label=BAND_LABELS[band], height=0.7)
        for i, v in enumerate(vals):
            if v >= 8:
                ax.text(left[i] + v / 2, i, f"{v:.0f}", ha="center", va="center", fontsize=6, color="white")
        left = [a + b for a, b in zip(left, vals)]
    for i, ci in enumerate(intervals or []):
        for band, edge, dy in (
            ("solved_all", 100 * shares[i]["solved_all"], -0.17), ("failed_all", 100 * (1 - shares[i]["failed_all"]), 0.17)
        ):
            if not ci or band not in ci:
                continue
            lo, hi = (100 * x for x in ci[band]["ci"])
            if band == "failed_all":  # the segment's left edge moves opposite to its share
                lo, hi = 100 - hi, 100 - lo
            ax.errorbar([edge], [i + dy], xerr=[[edge - lo], [hi - edge]], fmt="none", ecolor="black", elinewidth=0.7, capsize=2)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of problems (%)")
    ax.invert_yaxis()
    ax.legend(ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.4 / len(labels)), frameon=False)
    return fig, ax


def save(fig, out_dir: str | Path, stem: str, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Write ``fig`` as ``out_dir/stem.<fmt>`` for each format with fixed metadata; close it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out_dir / f"{stem}.{fmt}"
        meta = {"pdf": {"CreationDate": None, "ModDate": None, "Producer": "mbs"}, "png": {"Software": "mbs"}}.get(fmt)
        fig.savefig(path, format=fmt, metadata=meta)
        paths.append(path)
    plt.close(fig)
    return paths


def yield_panels(fig, axes, labels: Sequence[str], right: Sequence[float], colors: Sequence[str], right_label: str,
                 title: str) -> None:
    """Finish a two-panel synthesis comparison (the caller saves it).

    The left panel (already drawn: a bar per run) gets the yield axis (0 to 100 % of hard
    seeds); the right panel gets one bar per run of ``right`` labelled ``right_label``.
    """
    axes[0].set_xlim(0, 100)
    axes[0].set_xlabel("yield (% of hard seeds)")
    axes[0].invert_yaxis()
    axes[1].barh(labels, right, color=colors, height=0.6)
    axes[1].set_xlabel(right_label)
    axes[1].set_yticks([])
    axes[1].invert_yaxis()
    fig.suptitle(title, fontsize=8)


