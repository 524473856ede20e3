"""Synthesis figures (MBS and the direct baseline): yield, qualified problems per seed, the stage
funnel, one seed's tree, a tree browser for the report, and the MBS-vs-direct yield comparison.

:func:`synthesis_figures` draws one run directory (what ``mbs-figures`` calls through
the methods' specs, :data:`mbs.synth.methods.METHODS`); :func:`compare_yield` draws the yield of several runs side by
side (MBS against direct, or the points of a threshold sweep). Both read only ``summary.json``
(through :class:`mbs.runs.synthesis.SynthesisResults`) and ``trees.*.jsonl`` (through :mod:`mbs.io`).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.ticker import MaxNLocator

from mbs.figures import figure, save, yield_panels
from mbs.figures.labels import run_labels
from mbs.figures.mbs_vs_direct import compare_methods
from mbs.io import read_records, read_summary
from mbs.records import TreeNode
from mbs.runs.summary import RunKind
from mbs.runs.synthesis import SynthesisResults

#: Node and candidate colours by status.
STATUS_COLORS = {
    "qualified": "#55A868",
    "synthesized": "#8FBC8F",
    "kept": "#8FBC8F",
    "verified": "#4C72B0",
    "unqualified": "#DD8452",
    "discarded": "#CCB974",
    "exhausted": "#C44E52",
    "rejected": "#8172B3",
    "no_trace": "#8C8C8C",
}
METHOD_COLORS = {"mbs": "#4C72B0", "direct": "#DD8452"}


def _table(head: list[str], rows: list[list[str]]) -> dict[str, str]:
    md = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" + "".join("| " + " | ".join(r) + " |\n" for r in rows)
    esc = lambda s: s.replace("_", "\\_").replace("%", "\\%").replace("&", "\\&")
    tex = (
        "\\begin{tabular}{l" + "r" * (len(head) - 1) + "}\n\\toprule\n" + " & ".join(esc(h) for h in head) + " \\\\\n\\midrule\n"
        + "".join(" & ".join(esc(c) for c in r) + " \\\\\n" for r in rows) + "\\bottomrule\n\\end{tabular}\n"
    )
    return {"md": md, "tex": tex}


def funnel_rows(summary: SynthesisResults | Mapping[str, Any]) -> list[tuple[str, int]]:
    """``(stage, count)`` in the funnel's order.

    Raises:
        SummaryError: A summary field of the wrong type (names the field).
    """
    return SynthesisResults.of(summary).funnel_rows


def yield_figure(summary: SynthesisResults | Mapping[str, Any], out_dir: Path, formats: Sequence[str], width: str) -> list[Path]:
    """Share of hard seeds that got a verified trace and that yielded >= 1 qualified problem.

    Raises:
        ValueError: No hard seeds.
        SummaryError: A summary field of the wrong type (names the field).
    """
    r = SynthesisResults.of(summary)
    n = r.hard_seeds or 0
    if not n:
        raise ValueError("no hard seeds in the summary")
    method = "?" if r.method is None else r.method
    bars = [("verified trace", r.seeds_with_trace), (">= 1 qualified (yield)", r.seeds_qualified)]
    bars = [(label, v) for label, v in bars if v is not None]
    fig, (ax,) = figure(width, aspect=0.35 + 0.1 * len(bars))
    ax.barh([b[0] for b in bars], [100 * b[1] / n for b in bars], color=METHOD_COLORS.get(method, "#4C72B0"), height=0.6)
    by_path = r.yield_by_path
    if by_path:  # MBS: the yield bar stacked, decomposed then root-only (variants of the undecomposed seed)
        dec, root = 100 * by_path["decomposed"], 100 * by_path["root_only"]
        y = [b[0] for b in bars][-1]
        ax.barh([y], [dec], color=METHOD_COLORS["mbs"], height=0.6, label=f"decomposed {dec:.1f}%")
        ax.barh([y], [root], left=[dec], color="#8EB1D8", height=0.6, label=f"root-only {root:.1f}%")
        ax.legend(loc="lower right", frameon=False, fontsize=6)
    for i, (_, v) in enumerate(bars):
        ax.text(100 * v / n + 1, i, f"{v}/{n}", va="center", fontsize=6)
    ax.set_xlim(0, 110)
    ax.set_xlabel("share of hard seeds (%)")
    ax.invert_yaxis()
    ax.set_title(f"{method}: yield {100 * (0.0 if r.yield_share is None else r.yield_share):.1f}% of {n} hard seeds")
    return save(fig, out_dir, "yield", formats)


def qualified_per_seed(summary: SynthesisResults | Mapping[str, Any], out_dir: Path, formats: Sequence[str], width: str) -> list[Path]:
    """Histogram of qualified problems per hard seed.

    Raises:
        ValueError: No ``qualified_per_seed``.
        SummaryError: A summary field of the wrong type (names the field).
    """
    r = SynthesisResults.of(summary)
    counts = r.qualified_per_seed
    if not counts:
        raise ValueError("no qualified_per_seed in the summary")
    top = max(counts)
    fig, (ax,) = figure(width)
    ax.hist(counts, bins=[x - 0.5 for x in range(top + 2)], color=METHOD_COLORS.get(r.method or "", "#4C72B0"), rwidth=0.8)
    ax.set_xticks(range(top + 1))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # seed counts
    ax.set_xlabel("qualified problems per hard seed")
    ax.set_ylabel("hard seeds")
    mean = sum(counts) / len(counts)
    ax.set_title(f"{'?' if r.method is None else r.method}: {sum(counts)} qualified, {mean:.2f} per seed")
    return save(fig, out_dir, "qualified_per_seed", formats)


def funnel_figure(summary: SynthesisResults | Mapping[str, Any], out_dir: Path, formats: Sequence[str], width: str) -> list[Path]:
    """Counts through each stage (seeds, attempts, candidates, problems), in order.

    Raises:
        ValueError: No funnel.
        SummaryError: A summary field of the wrong type (names the field).
    """
    r = SynthesisResults.of(summary)
    rows = r.funnel_rows
    if not rows:
        raise ValueError("no funnel in the summary")
    fig, (ax,) = figure(width, aspect=0.25 + 0.07 * len(rows))
    labels = [k.replace("_", " ") for k, _ in rows]
    vals = [v for _, v in rows]
    ax.barh(labels, vals, color=METHOD_COLORS.get(r.method or "", "#4C72B0"), height=0.7)
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v}", va="center", fontsize=6)
    ax.set_xlim(0, max(vals) * 1.15 + 1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("count")
    ax.invert_yaxis()
    ax.set_title(f"{'?' if r.method is None else r.method}: stage funnel")
    return save(fig, out_dir, "funnel", formats)


def pick_seed(trees: dict[str, list[TreeNode]]) -> str:
    """The seed to draw: most qualified candidates, then most nodes and candidates, then id."""
    def score(sid: str) -> tuple:
        nodes = trees[sid]
        q = sum(1 for n in nodes for v in n.variants if v.get("status") == "qualified")
        return (-q, -len(nodes), -sum(len(n.variants) for n in nodes), sid)

    return min(trees, key=score)


def tree_figure(nodes: list[TreeNode], out_dir: Path, formats: Sequence[str], width: str) -> list[Path]:
    """One seed's tree: nodes by depth, coloured by status; candidates as small squares below."""
    by_id = {n.node_id: n for n in nodes}
    root = next(n for n in nodes if n.depth == 0)
    pos: dict[str, tuple[float, float]] = {}
    cursor = [0.0]

    def place(n: TreeNode) -> float:
        kids = [by_id[c] for c in n.children if c in by_id]
        if not kids:
            x = cursor[0]
            cursor[0] += 1.0 + 0.25 * max(0, len(n.variants) - 3)
        else:
            xs = [place(k) for k in kids]
            x = (xs[0] + xs[-1]) / 2
        pos[n.node_id] = (x, -float(n.depth))
        return x

    place(root)
    depth = max(n.depth for n in nodes)
    fig, (ax,) = figure(width, aspect=0.45 + 0.15 * depth)
    for n in nodes:
        x, y = pos[n.node_id]
        for c in n.children:
            if c in pos:
                ax.plot([x, pos[c][0]], [y, pos[c][1]], color="#999999", lw=0.8, zorder=1)
    statuses: set[str] = set()
    for n in nodes:
        x, y = pos[n.node_id]
        ax.scatter([x], [y], s=120, color=STATUS_COLORS.get(n.status, "#4C72B0"), edgecolor="black", lw=0.5, zorder=3)
        statuses.add(n.status)
        ax.annotate(n.node_id.rsplit("/", 1)[-1], (x, y), xytext=(0, 7), textcoords="offset points", ha="center", fontsize=6)
        k = len(n.variants)
        for i, v in enumerate(n.variants):
            vx = x + (i - (k - 1) / 2) * 0.12
            ax.scatter([vx], [y - 0.28], s=14, marker="s", color=STATUS_COLORS.get(v.get("status"), "#4C72B0"), zorder=2)
            statuses.add(v.get("status"))
    for s in sorted(x for x in statuses if x):
        ax.scatter([], [], color=STATUS_COLORS.get(s, "#4C72B0"), label=s, s=20)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.05), ncol=4, frameon=False, fontsize=6)
    ax.set_xlim(min(p[0] for p in pos.values()) - 0.8, max(p[0] for p in pos.values()) + 0.8)
    ax.set_ylim(-depth - 0.6, 0.5)
    ax.set_yticks([-d for d in range(depth + 1)], [f"depth {d}" for d in range(depth + 1)])
    ax.set_xticks([])
    ax.spines["bottom"].set_visible(False)
    ax.set_title(f"tree of {root.seed_id} (squares: candidates)")
    return save(fig, out_dir, "tree", formats)


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _candidate_html(v: dict[str, Any]) -> str:
    target = v.get("target", {})
    rate = target.get("pass_rate") if target.get("pass_rate_est") is None else target["pass_rate_est"]  # unbiased under early stopping
    filt = v.get("filter")
    bits = [f"<b>{_esc(v['id'])}</b> [{_esc(v.get('kind'))}] <i>{_esc(v.get('status'))}</i>"]
    if v.get("reason"):
        bits.append(f"reason: {_esc(v['reason'])}")
    if filt:
        bits.append(f"weakest {_esc(filt['policy'])}: {filt['successes']}/{filt['n_target']} (alpha {filt['alpha']})")
    if rate is not None:
        bits.append(f"target pass rate {rate:.2f} ({_esc(v['target']['band'])})")
    body = ""
    if v.get("problem"):
        body = (f"<p>{_esc(v['problem'])}</p><p>answer: <code>{_esc(v.get('answer'))}</code></p>"
                f"<details><summary>solution</summary><pre>{_esc(v.get('solution'))}</pre></details>")
    elif v.get("raw"):
        body = f"<pre>{_esc(v['raw'])}</pre>"
    return f"<details><summary>{' · '.join(bits)}</summary>{body}</details>"


def _node_html(n: TreeNode, by_id: dict[str, TreeNode]) -> str:
    eff = n.effectivity or {}
    head = f"{_esc(n.node_id)} · depth {n.depth} · <i>{_esc(n.status)}</i>"
    if n.reject_reason:
        head += f" · {_esc(n.reject_reason)}"
    parts = [f"<p>{_esc(n.problem.prompt)}</p>"]
    if n.answer is not None:
        parts.append(f"<p>answer: <code>{_esc(n.answer)}</code></p>")
    if n.trace:
        parts.append(f"<details><summary>trace</summary><pre>{_esc(n.trace)}</pre></details>")
    if eff.get("leaf_reason"):
        parts.append(f"<p>leaf: {_esc(eff['leaf_reason'])}</p>")
    for a in eff.get("attempts", []):
        line = f"decomposition {a['attempt']}: {'passed' if a.get('passed') else _esc(a.get('reason'))}"
        stud = "; ".join(f"{_esc(s)} acc {r['acc']:.2f} → cond {r['acc_cond']:.2f}" for s, r in a.get("students", {}).items())
        subs = "".join(f"<li>{_esc(sub['status'])}: {_esc(sub.get('problem', '')[:200])} {_esc(sub.get('reason') or '')}</li>"
                       for sub in a.get("subproblems", []))
        parts.append(f"<details><summary>{line}{' · ' + stud if stud else ''}</summary><ul>{subs}</ul></details>")
    parts.extend(_candidate_html(v) for v in n.variants)
    parts.extend(_node_html(by_id[c], by_id) for c in n.children if c in by_id)
    return f"<details><summary>{head}</summary><div style='margin-left:1.2em'>{''.join(parts)}</div></details>"


def tree_browser(trees: dict[str, list[TreeNode]], limit: int = 50) -> str:
    """A report section: one nested ``<details>`` per seed and node (problem, trace, status,
    reject reason, decomposition attempts, candidates with their pass rates)."""
    items = []
    for sid in sorted(trees)[:limit]:
        by_id = {n.node_id: n for n in trees[sid]}
        root = next((n for n in trees[sid] if n.depth == 0), None)
        if root is not None:
            items.append(_node_html(root, by_id))
    more = f"<p>{len(trees) - limit} more seeds in trees.*.jsonl</p>" if len(trees) > limit else ""
    return "<h3>Tree browser</h3>" + "".join(items) + more


def synthesis_figures(run_dir: str | Path, out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"), width: str = "single") -> dict[str, Any]:
    """Every figure, table and report section of one synthesis run (MBS or direct).

    Returns:
        ``{"written": [paths], "skipped": {name: why}, "tables": {"funnel": {"md", "tex"}},
        "html": tree browser}``.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``summary.json``.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    summary = SynthesisResults.of(read_summary(run_dir), str(run_dir / "summary.json"))
    written: list[str] = []
    skipped: dict[str, str] = {}
    for name, fn in (("yield", yield_figure), ("qualified_per_seed", qualified_per_seed), ("funnel", funnel_figure)):
        try:
            written += [str(p) for p in fn(summary, out_dir, formats, width)]
        except ValueError as err:
            skipped[name] = str(err)
    trees: dict[str, list[TreeNode]] = {}
    for n in read_records(run_dir, "trees", TreeNode):
        trees.setdefault(n.seed_id, []).append(n)
    if trees:
        written += [str(p) for p in tree_figure(trees[pick_seed(trees)], out_dir, formats, width)]
    else:
        skipped["tree"] = f"no trees.*.jsonl records in {run_dir}"
    rows = summary.funnel_rows
    tables = {"funnel": _table(["stage", "count"], [[k, str(v)] for k, v in rows])} if rows else {}
    headline: dict[str, Any] = {"hard_seeds": summary.hard_seeds, "seeds_with_trace": summary.seeds_with_trace,
                                "seeds_qualified": summary.seeds_qualified, "yield": summary.yield_share,
                                "qualified_problems": summary.qualified_problems}
    if summary.yield_by_path is not None:
        headline.update({f"yield {k}": v for k, v in summary.yield_by_path.items()})
    tables["headline"] = _table(["quantity", "value"], [[k, json.dumps(v)] for k, v in headline.items()])
    return {"written": written, "skipped": skipped, "tables": tables, "html": tree_browser(trees) if trees else ""}


def compare_yield(run_dirs: Sequence[str | Path], out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"), width: str = "single") -> dict[str, Any]:
    """Yield (share of hard seeds with >= 1 qualified problem) and qualified problems per seed of
    several synthesis runs, e.g. MBS against direct or the points of a threshold sweep.

    Runs are labelled by their method and the config values that differ between them.

    Returns:
        ``{"written": [paths], "skipped": {}, "tables": {"yield": {"md", "tex"}}}``, plus the
        ``mbs_vs_direct`` table and figure when MBS and a direct run are among the runs
        (:mod:`mbs.figures.mbs_vs_direct`).

    Raises:
        ValueError: No run, or a run that is not a synthesis run.
        FileNotFoundError: A run without ``summary.json``.
    """
    run_dirs = [Path(r) for r in run_dirs]
    if not run_dirs:
        raise ValueError("compare_yield needs at least one run directory")
    summaries = []
    for r in run_dirs:
        data, where = read_summary(r), str(r / "summary.json")
        kind, res = RunKind.of(data, where), SynthesisResults.of(data, where)
        if kind.stage != "synthesize" or res.yield_share is None or res.method is None:
            raise ValueError(f"{r} is not a synthesis run with a yield (stage {kind.stage or None!r})")
        summaries.append(res)
    labels = run_labels(run_dirs) if len(run_dirs) > 1 else [run_dirs[0].name]
    labels = [lab if str(s.method) in lab else f"{s.method}: {lab}" for lab, s in zip(labels, summaries)]
    fig, axes = figure(width, aspect=0.35 + 0.1 * len(run_dirs), ncols=2)
    ys = [100 * (s.yield_share or 0.0) for s in summaries]
    per = [(s.qualified_problems or 0) / s.hard_seeds if s.hard_seeds else 0.0 for s in summaries]
    colors = [METHOD_COLORS.get(str(s.method), "#4C72B0") for s in summaries]
    axes[0].barh(labels, ys, color=colors, height=0.6)
    yield_panels(fig, axes, labels, per, colors, "qualified per seed", "Synthesis yield compared")
    written = [str(p) for p in save(fig, out_dir, "compare_yield", formats)]
    rows = [[lab, str(s.hard_seeds), str(s.seeds_qualified), f"{100 * (s.yield_share or 0.0):.1f}", str(s.qualified_problems), f"{p:.2f}"]
            for lab, s, p in zip(labels, summaries, per)]
    table = _table(["run", "hard seeds", "seeds qualified", "yield %", "qualified", "per seed"], rows)
    tables = {"yield": table}
    methods = compare_methods(run_dirs, out_dir, formats, width)  # MBS, root-only, direct, cost-matched
    if methods is not None:
        written += methods["written"]
        tables.update(methods["tables"])
    return {"written": written, "skipped": {}, "tables": tables}
