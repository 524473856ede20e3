"""Golden Goose figures, tables and the MCQ browser of the report.

* ``goose_pass_rates``: histogram of the student's per-item pass rate (its estimate unbiased under
  early stopping, :mod:`mbs.calibration.estimate`; s/N without it) with each item's trap band
  coloured and the 1/k chance level marked; one run has one option count k.
* ``goose_letters``: answer-letter distribution of built and kept items against uniform.
* ``goose_audit``: the shortcut audit: each passage-free solver's accuracy on built and kept
  items beside chance 1/k and twice chance (:mod:`mbs.synth.goose.audit`).
* :func:`compare_option_counts`: the option-count ablation across runs (Golden Goose, section 3:
  3 options too easy, 9 options put most items in the medium band): pass-rate distributions and
  band shares per k, beside the share a guessing policy would reach.
* an HTML section listing items (masked passage, options with the answer marked and each
  distractor's origin, pass rate).

``summary.json`` is read through :class:`mbs.runs.goose.GooseSummary`, ``items.*.jsonl`` through :mod:`mbs.io`.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from mbs.figures import BAND_COLORS, BAND_LABELS, figure, save
from mbs.io import read_records, read_summary
from mbs.records import BANDS
from mbs.runs.goose import GooseSummary
from mbs.runs.summary import RunKind

log = logging.getLogger(__name__)

LETTERS = "ABCDEFGHIJ"

#: Items shown in the report's MCQ browser (the first ones in build order).
HTML_ITEMS = 40


def _rate(item: dict[str, Any]) -> float:
    """An item row's pass rate: ``pass_rate_est`` (rows written before it existed: ``pass_rate``)."""
    est = item.get("pass_rate_est")
    return float(item["pass_rate"] if est is None else est)


def pass_rate_histogram(items: Sequence[dict[str, Any]], summary: GooseSummary | Mapping[str, Any], out_dir: Path, formats: Sequence[str], width: str = "single") -> list[Path]:
    """Bars of items per pass rate, rounded to s/N (s = 0..N), stacked by the items' bands, chance 1/k marked.

    With early stopping a group's s/k over the rollouts it drew is biased (it stops once both
    outcomes were seen), so the rate is the item's unbiased estimate: a Goldilocks item can sit at
    0 (e.g. two failures, then a failure and a success: every admissible order starts with a failure).

    Raises:
        ValueError: No item has a pass rate (the filter did not run).
        SummaryError: A summary field of the wrong type (names the field).
    """
    g = GooseSummary.of(summary)
    rated = [it for it in items if it.get("n")]
    if not rated:
        if not items:
            raise ValueError("no items (no items.*.jsonl in the run directory, or nothing was built)")
        raise ValueError(f"none of {len(items)} items has a pass rate (goose.filter.enabled=false)")
    n = int(g.filter_n or max(it["n"] for it in rated))
    k = int(g.options or rated[0]["n_options"])
    counts = {b: [0] * (n + 1) for b in BANDS}
    for it in rated:
        s = min(n, max(0, round(_rate(it) * n)))
        counts[it.get("band") if it.get("band") in counts else "goldilocks"][s] += 1
    fig, (ax,) = figure(width)
    xs = [s / n for s in range(n + 1)]
    bottom = [0] * (n + 1)
    for b in BANDS:
        ax.bar(xs, counts[b], width=0.8 / n, color=BAND_COLORS[b], bottom=bottom)
        bottom = [x + y for x, y in zip(bottom, counts[b])]
    ax.axvline(1.0 / k, color="0.3", linestyle="--", linewidth=0.8, label=f"chance 1/{k}")
    eff = g.effective_share
    acc = g.student.accuracy
    title = f"{k} options, {len(rated)} items"
    if eff is not None:
        title += f": {100 * eff:.0f}% Goldilocks"
    if acc is not None:
        title += f", accuracy {100 * acc:.0f}%"
    ax.set_title(title)
    early = g.early_stop
    ax.set_xlabel(f"student pass rate ({'unbiased under early stopping, ' if early else ''}N = {n})")
    ax.set_ylabel("items")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(-0.6 / n, 1 + 0.6 / n)
    handles = [Patch(color=BAND_COLORS[b], label=BAND_LABELS[b]) for b in BANDS]
    ax.legend(handles=handles + ax.get_legend_handles_labels()[0], frameon=False, loc="upper right")
    return save(fig, out_dir, "goose_pass_rates", formats)


def letter_distribution(summary: GooseSummary | Mapping[str, Any], out_dir: Path, formats: Sequence[str], width: str = "single") -> list[Path]:
    """Grouped bars of answer-letter counts (built and kept items) with the uniform expectation.

    Raises:
        ValueError: The summary has no built items.
        KeyError: The built letters have no expected count or chi-square.
        SummaryError: A summary field of the wrong type (names the field).
    """
    g = GooseSummary.of(summary)
    built = g.letters_built.counts
    if not sum(built.values()):
        raise ValueError("no items built")
    kept = g.letters_kept.counts
    expected, chi2 = g.letters_built.expected_per_letter, g.letters_built.chi2
    if expected is None or chi2 is None:
        raise KeyError("expected_per_letter" if expected is None else "chi2")
    keys = list(built)
    fig, (ax,) = figure(width)
    xs = range(len(keys))
    ax.bar([x - 0.2 for x in xs], [built[L] for L in keys], width=0.4, color="#8172B2", label="built")
    if sum(kept.values()):
        ax.bar([x + 0.2 for x in xs], [kept.get(L, 0) for L in keys], width=0.4, color=BAND_COLORS["goldilocks"], label="kept")
    ax.axhline(expected, color="0.3", linestyle="--", linewidth=0.8, label="uniform (built)")
    ax.set_xticks(list(xs), keys)
    ax.set_xlabel("answer letter")
    ax.set_ylabel("items")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"Answer positions (chi2 = {chi2:.2f} over {len(keys)} letters)")
    ax.legend(frameon=False, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    return save(fig, out_dir, "goose_letters", formats)


def audit_figure(summary: GooseSummary | Mapping[str, Any], out_dir: Path, formats: Sequence[str], width: str = "single") -> list[Path]:
    """Horizontal bars: each audit solver's accuracy on built (first builds) and kept items, with
    chance 1/k and 2x chance marked.

    Raises:
        ValueError: The summary has no audit (a run before the audit existed) or no items.
        SummaryError: A summary field of the wrong type (names the field).
    """
    audit = GooseSummary.of(summary).audit
    if audit is None or not audit.built.n:
        raise ValueError("no shortcut audit in summary.json")
    built, kept = audit.built.solvers, audit.kept.solvers if audit.kept else {}
    if audit.chance is None:
        raise KeyError("chance")
    names = sorted(built, key=lambda n: built[n] or 0.0)
    fig, (ax,) = figure(width, aspect=0.25 + 0.06 * len(names))
    ys = range(len(names))
    ax.barh([y + 0.2 for y in ys], [100 * (built[n] or 0) for n in names], height=0.4, color="#8172B2", label=f"built ({audit.built.n})")
    if kept and audit.kept:
        ax.barh([y - 0.2 for y in ys], [100 * (kept.get(n) or 0) for n in names], height=0.4, color=BAND_COLORS["goldilocks"], label=f"kept ({audit.kept.n})")
    c = 100 * audit.chance
    ax.axvline(c, color="0.3", linestyle="--", linewidth=0.8, label=f"chance 1/{round(1 / audit.chance)}")
    ax.axvline(2 * c, color="0.3", linestyle=":", linewidth=0.8, label="2x chance")
    ax.set_yticks(list(ys), [n.replace("_", " ") + (" *" if n in audit.flagged else "") for n in names])
    ax.set_xlabel("accuracy without the passage (%)")
    ax.set_xlim(0, 100)
    ax.set_title(f"Shortcut audit (policy {audit.policy}; * flagged)")
    ax.legend(frameon=False, fontsize=6, loc="lower right")
    return save(fig, out_dir, "goose_audit", formats)


def _pct(x: Any) -> str:
    return "" if x is None else f"{100 * x:.1f}"


def summary_table(summary: GooseSummary | Mapping[str, Any]) -> tuple[str, str]:
    """Headline numbers of one run as a Markdown and a LaTeX table.

    Raises:
        SummaryError: A summary field of the wrong type (names the field).
    """
    g = GooseSummary.of(summary)
    st = g.student
    rows = [
        ("source", str(g.source) + (" (teacher-free)" if g.teacher_free else " (teacher)")),
        ("options k", str(g.options)),
        ("passages", str(g.passages)),
        ("items built", str(g.items_built)),
        ("rejected", ", ".join(f"{r} {n}" for r, n in g.rejected.items()) or "0"),
        ("effective share %", _pct(g.effective_share)),
        *((f"{b} %", _pct(g.bands.get(b))) for b in BANDS),
        ("student", str(st.policy)),
        ("student accuracy %", _pct(st.accuracy)),
        ("chance 1/k %", _pct(st.chance)),
        ("Goldilocks share of a guessing policy %", _pct(st.chance_goldilocks_share)),
    ]
    md = "| quantity | value |\n|---|---|\n" + "".join(f"| {a} | {b} |\n" for a, b in rows)
    esc = lambda s: s.replace("_", "\\_").replace("%", "\\%").replace("&", "\\&")
    tex = "\\begin{tabular}{lr}\n\\toprule\nquantity & value \\\\\n\\midrule\n"
    tex += "".join(f"{esc(a)} & {esc(b)} \\\\\n" for a, b in rows) + "\\bottomrule\n\\end{tabular}\n"
    return md, tex


def items_html(items: Sequence[dict[str, Any]], summary: GooseSummary | Mapping[str, Any], limit: int = HTML_ITEMS) -> str:
    """A browsable HTML section: each item's masked passage, its options with the answer marked
    and every distractor's origin, its pass rate and band (the first ``limit`` items)."""
    parts = [f"<h3>Golden Goose items ({len(items)} built, first {min(limit, len(items))} shown)</h3>"]
    for it in list(items)[:limit]:
        rate = "not filtered" if it.get("pass_rate") is None else f"pass rate {it['pass_rate']:.2f} ({it['successes']}/{it['n']}, {it['band']})"
        kept = {True: "kept", False: "dropped", None: ""}[it.get("kept")]
        head = f"{html.escape(it['id'])}: answer {html.escape(it['answer'])}, {html.escape(rate)} {kept}"
        opts = []
        for letter, opt, origin in zip(LETTERS, it["options"], it.get("option_origins") or [""] * len(it["options"])):
            body = html.escape(opt).replace("\n", "<br>")
            if letter == it["answer"]:
                opts.append(f"<li><strong>&#10003; {body}</strong> <em>(answer)</em></li>")
            else:
                opts.append(f"<li>{body} <em>({html.escape(origin)})</em></li>")
        passage = html.escape(it["question"].split("Options:")[0]).replace("[MASK]", "<mark>[MASK]</mark>")
        parts.append(
            f"<details><summary>{head}</summary><p>source <code>{html.escape(it['source_id'])}</code>, span offsets "
            f"{it['span_offsets'][0]}-{it['span_offsets'][1]}</p><pre style='white-space:pre-wrap'>{passage}</pre>"
            f"<ol type='A'>{''.join(opts)}</ol></details>"
        )
    return "\n".join(parts)


def goose_figures(run_dir: str | Path, out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"), width: str = "single") -> dict[str, Any]:
    """Every figure, table and the HTML item browser of a Goose run directory.

    Returns:
        ``{"written": [paths], "skipped": {name: why}, "tables": {name: {"md", "tex"}}, "html": section}``.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    summary = GooseSummary.read(run_dir)
    items = read_records(run_dir, "items")
    written: list[str] = []
    skipped: dict[str, str] = {}
    for name, draw in (
        ("goose_pass_rates", lambda: pass_rate_histogram(items, summary, out_dir, formats, width)),
        ("goose_letters", lambda: letter_distribution(summary, out_dir, formats, width)),
        ("goose_audit", lambda: audit_figure(summary, out_dir, formats, width)),
    ):
        try:
            written += [str(p) for p in draw()]
        except (ValueError, KeyError) as err:
            skipped[name] = str(err)
            log.info("figure %s skipped: %s", name, err)
    md, tex = summary_table(summary)
    return {"written": written, "skipped": skipped, "tables": {"goose_summary": {"md": md, "tex": tex}}, "html": items_html(items, summary)}


def _best_shortcut(g: GooseSummary, part: str) -> str:
    """``"<accuracy %> (<solver>)"`` of the audit solver most accurate on ``part`` items ('' without an audit)."""
    audit = g.audit
    solvers = (audit.built if part == "built" else audit.kept) if audit else None
    scored = [(acc, n) for n, acc in (solvers.solvers if solvers else {}).items() if acc is not None]
    if not scored:
        return ""
    acc, name = max(scored)
    return f"{100 * acc:.1f} ({name.replace('_', ' ')})"


def _options(g: GooseSummary) -> int:
    """k of a run in the ablation (``KeyError``: not recorded, as the table needs it)."""
    if g.options is None:
        raise KeyError("options")
    return g.options


def _band(g: GooseSummary, band: str) -> float:
    """The share of ``band`` among a run's filtered items (``KeyError``: not recorded)."""
    return g.bands[band]


def compare_option_counts(run_dirs: Sequence[str | Path], out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"), width: str = "double") -> dict[str, Any]:
    """The option-count ablation: one Goose run per k (e.g. ``mbs-synthesize -m experiment=goose_options``).

    Left panel: each run's distribution of per-item pass rates; right panel: band shares per k
    with the Goldilocks share a guessing policy would reach (black marks) and the student's
    accuracy against chance in the labels. The table adds, per k, the most accurate solver of
    the shortcut audit on built and on kept items (each run's ``goose_audit`` figure has them all).

    Returns:
        ``{"written", "skipped", "tables": {"goose_option_counts": {"md", "tex"}}}``.
    """
    out_dir = Path(out_dir)
    runs = []
    skipped: dict[str, str] = {}
    for rd in run_dirs:
        try:
            data = read_summary(rd)
        except FileNotFoundError as err:
            skipped[str(rd)] = str(err)
            continue
        where = str(Path(rd) / "summary.json")
        kind = RunKind.of(data, where)
        if kind.method != "goose":
            skipped[str(rd)] = f"not a Goose run (method={kind.method!r})"
            continue
        runs.append((GooseSummary.of(data, where), [it for it in read_records(rd, "items") if it.get("n")]))
    runs.sort(key=lambda r: _options(r[0]))
    head = ["options k", "items", "solved_all %", "goldilocks %", "failed_all %", "accuracy %", "chance %", "guessing goldilocks %",
            "best shortcut built %", "best shortcut kept %"]
    rows = []
    for g, _ in runs:
        st = g.student
        best = {p: _best_shortcut(g, p) for p in ("built", "kept")}
        rows.append([str(_options(g)), str(g.items_built)] + [_pct(_band(g, b)) for b in BANDS] + [_pct(st.accuracy), _pct(st.chance), _pct(st.chance_goldilocks_share)]
                    + [best["built"], best["kept"]])
    md = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" + "".join("| " + " | ".join(r) + " |\n" for r in rows)
    tex = "\\begin{tabular}{" + "r" * len(head) + "}\n\\toprule\n" + " & ".join(h.replace("%", "\\%").replace("_", "\\_") for h in head) + " \\\\\n\\midrule\n"
    tex += "".join(" & ".join(r) + " \\\\\n" for r in rows) + "\\bottomrule\n\\end{tabular}\n"
    written: list[str] = []
    if not any(items for _, items in runs):
        skipped["goose_option_counts"] = "no filtered items in the given runs"
        return {"written": written, "skipped": skipped, "tables": {"goose_option_counts": {"md": md, "tex": tex}}}
    fig, (left, right) = figure(width, aspect=0.35, ncols=2)
    bins = [i / 10 for i in range(11)]
    for g, items in runs:
        rates = [_rate(it) for it in items]
        if rates:
            left.hist(rates, bins=bins, histtype="step", linewidth=1.2, label=f"k = {g.options} ({len(rates)} items)")
    left.set_xlabel("student pass rate")
    left.set_ylabel("items")
    left.yaxis.set_major_locator(MaxNLocator(integer=True))
    left.legend(frameon=False)
    labels = [f"k = {g.options}" for g, _ in runs]
    bottom = [0.0] * len(runs)
    for b in BANDS:
        vals = [100 * _band(g, b) for g, _ in runs]
        right.bar(labels, vals, bottom=bottom, color=BAND_COLORS[b], label=BAND_LABELS[b], width=0.6)
        bottom = [x + v for x, v in zip(bottom, vals)]
    guess = [100 * (g.student.chance_goldilocks_share or 0.0) for g, _ in runs]
    right.scatter(labels, guess, color="black", marker="_", s=200, zorder=3, label="guessing: Goldilocks")
    right.set_ylabel("share of items (%)")
    right.set_ylim(0, 100)
    right.legend(frameon=False, fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
    written += [str(p) for p in save(fig, out_dir, "goose_option_counts", formats)]
    return {"written": written, "skipped": skipped, "tables": {"goose_option_counts": {"md": md, "tex": tex}}}
