"""Count the reads of a run's ``summary.json`` by string key in ``mbs/`` (issue 44).

A *summary read by string key* is a ``x["key"]`` (load) or ``x.get("key", ...)`` whose chain of
subscripts and ``.get`` calls starts at a summary, each string-keyed link counted once
(``s.get("a", {}).get("b")`` is 2). A chain starts at a summary where it starts at

* a call of ``read_summary(...)`` or ``read_json(...)`` / ``json.loads(...)`` of a ``summary.json`` path;
* a name bound, in the same function, by such a call (``summary = read_summary(d)``);
* a name called ``summary``, ``run_summary`` or ``summaries[...]``, or a parameter or loop
  variable called ``s`` in a function that also reads a summary or in ``mbs/figures/``,
  ``mbs/report.py`` or ``mbs/stages/`` (where ``s`` is a step's summary).

A name derived from a read (``bands = s.get("bands")``, then ``bands[t]``) is not followed: the
first read counts, the ones below it do not. Writes (``summary["k"] = v``) do not count.

Run from the repository root: ``python tests/support/summary_reads.py [--all]`` prints the count
per file outside the run readers (``mbs/runs/``) and the total (``--all``: every line).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Where the readers live: their reads are the contract, not a leak of it.
READERS = ("mbs/runs/",)
#: Reached by another engineer's change (counted apart).
APART = ("mbs/thesis/", "mbs/stages/thesis.py")
NAMED = {"summary", "run_summary", "summaries"}
S_FOLDERS = ("mbs/figures/", "mbs/report.py", "mbs/stages/")


def _is_summary_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    fn = node.func
    name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
    if name == "read_summary":
        return True
    return name in ("read_json", "loads", "load") and "summary.json" in ast.unparse(node)


def _key_link(node: ast.AST) -> tuple[ast.AST, bool] | None:
    """``(receiver, keyed by a string constant)`` of a subscript load or ``.get`` call, else ``None``."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return node.value, isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and node.args):
        first = node.args[0]
        return node.func.value, isinstance(first, ast.Constant) and isinstance(first.value, str)
    return None


def _root(node: ast.AST) -> ast.AST:
    """The start of a chain of subscripts and ``.get`` calls (also through ``x or {}``)."""
    while True:
        link = _key_link(node)
        if link is not None:
            node = link[0]
        elif isinstance(node, ast.BoolOp) and node.values:
            node = node.values[0]
        else:
            return node


def _bindings(node: ast.AST) -> list[tuple[str, ast.AST]]:
    """``(name, value)`` of an assignment, pairing ``a, b = x, y`` element-wise."""
    if not isinstance(node, ast.Assign):
        return []
    out: list[tuple[str, ast.AST]] = []
    for t in node.targets:
        if isinstance(t, ast.Name):
            out.append((t.id, node.value))
        elif isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple) and len(t.elts) == len(node.value.elts):
            out += [(e.id, v) for e, v in zip(t.elts, node.value.elts) if isinstance(e, ast.Name)]
    return out


def _function_roots(fn: ast.AST, rel: str) -> set[str]:
    """Names holding a summary in function (or module) ``fn``."""
    names: set[str] = set()
    reads = False
    for node in ast.walk(fn):
        for target, value in _bindings(node):
            if _is_summary_call(value):
                names.add(target)
        if _is_summary_call(node):
            reads = True
    if reads or rel.startswith(S_FOLDERS):
        for node in ast.walk(fn):
            if isinstance(node, ast.arg) and node.arg == "s":
                names.add("s")
            elif isinstance(node, (ast.For, ast.comprehension)):
                names |= {t.id for t in ast.walk(node.target) if isinstance(t, ast.Name) and t.id == "s"}
    return names


def reads_in(source: str, rel: str) -> list[int]:
    """The line of each summary read by string key in ``source`` (file ``rel``, for its folder)."""
    tree = ast.parse(source)
    lines: list[int] = []
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    owner: dict[int, ast.AST] = {}
    for scope in [tree, *scopes]:  # the innermost scope wins (walked outer first)
        for node in ast.walk(scope):
            owner[id(node)] = scope
    roots = {id(scope): _function_roots(scope, rel) for scope in [tree, *scopes]}
    for node in ast.walk(tree):
        link = _key_link(node)
        if link is None or not link[1]:
            continue
        root = _root(node)
        if _is_summary_call(root) or isinstance(root, ast.Name) and (root.id in NAMED or root.id in roots[id(owner[id(node)])]) or isinstance(root, ast.Subscript) and isinstance(root.value, ast.Name) and root.value.id in NAMED:
            lines.append(node.lineno)
    return sorted(lines)


def count(root: Path = ROOT) -> dict[str, list[int]]:
    """``{file relative to the repository: lines of its summary reads by string key}`` over ``mbs/``."""
    out = {}
    for path in sorted((root / "mbs").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        lines = reads_in(path.read_text(encoding="utf-8"), rel)
        if lines:
            out[rel] = lines
    return out


def main(argv: list[str]) -> None:
    per = count()
    groups = {"outside the readers": Counter(), "mbs/thesis and stages/thesis.py": Counter(), "in the readers": Counter()}
    for rel, lines in per.items():
        group = ("in the readers" if rel.startswith(READERS) else
                 "mbs/thesis and stages/thesis.py" if rel.startswith(APART) else "outside the readers")
        groups[group][rel] = len(lines)
        if "--all" in argv:
            print(f"{rel}: lines {lines}")
    for group, counts in groups.items():
        print(f"{group}: {sum(counts.values())}")
        for rel, n in counts.most_common():
            print(f"  {n:4d} {rel}")


if __name__ == "__main__":
    main(sys.argv[1:])
