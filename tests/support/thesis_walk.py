"""Measure the thesis walk: the files a reader opens to follow one ``mbs-thesis`` run (issue 44).

The walk is a *static call walk* over the source of a tree's ``mbs/`` package (``ast`` only, nothing
is imported), depth first, in source order:

* It starts at the entry ``thesis`` of ``mbs/cli.py`` (``thesis = _stage_entry("thesis", ...)``).
  The one dynamic call on the way, ``importlib.import_module(f"mbs.stages.{name}").run(cfg)`` in
  the cli's ``_run``, is resolved by hand (:data:`DYNAMIC`) to ``run`` of ``mbs/stages/thesis.py``.
* A *unit* is a module-level function, a class (all its methods), a method named on its class
  (``Group.of``) or a module-level assignment (``CONF = ...``). Reading a unit resolves every name
  it loads that is defined in ``mbs``: a call, a class, a constant, a module attribute such as
  ``calibrate.run``. Not read: annotations, the error class of a ``raise`` or ``except`` (its name
  says what it is; a run that raises it ends there) and calls on instances (``ev.done(...)``: the
  class was opened where it was named). Names resolve through the module's imports,
  the unit's own function-local imports, and re-exports: the walk lands where a name is
  *defined*, as "go to definition" does, so a package ``__init__.py`` that only re-exports is not
  opened.
* A registry (a module-level ``Registry(...)``, or a dict literal with a ``"thesis"`` key) named
  by a unit (``BY_STAGE.get(stage)``) is opened where it is defined and followed, in either walk,
  to the entry registered under ``"thesis"`` (``BY_STAGE.add("thesis", thesis_figures)``) and
  nowhere else: that is how the report reaches ``mbs/figures/thesis.py``. A registry without a
  ``"thesis"`` entry (``mbs.synth.methods.METHODS``) serves other stages and is not opened.
* Units in generic infrastructure (:data:`INFRASTRUCTURE`: run-directory I/O, records, errors,
  config ranges, registries, the launcher's logging) are not opened: every stage uses them alike
  and a reader follows the run without them.
* ``run`` of another stage module is opened (its file counted) but never entered: that stage's
  internals are that stage's own walk.

Two walks differ only in which units they *enter* (read and follow further):

* the **own-code walk** (the measure of issue 44's done-when) enters only the run's own code: the
  entry (``mbs.cli``), every module named for the thesis (a dotted-name part ``thesis`` or
  ``thesis_*``: the stage, its library, its figures) and the report (``mbs.report``, formerly
  ``mbs.figures.report``, the one way to the figures). Every other unit the run's code names is
  opened at its definition (its file counted, its body read for conf paths) and not followed
  further. This is the trip of a reader following the thesis: they look up what each call does,
  but do not read the shared library's internals, which the thesis has no say over;
* the **full walk** enters every unit (except the two exceptions above), however deep: the
  closure of the library code the run can reach, LLM cache internals and checkpoint conversion
  included. It is printed for comparison.

*Files visited*: the distinct files of ``mbs/`` the walk opens, the entry included.
*Climbs*: each file is first reached from one file (that of the unit that first named it); that
step is a climb when the new file's folder is not the old file's folder or below it
(``mbs/stages/thesis.py`` -> ``mbs/thesis/sets.py`` climbs out of ``mbs/stages/``;
``mbs/figures/thesis.py`` -> ``mbs/thesis_summary.py`` climbs to ``mbs/``; ``mbs/thesis.py`` ->
``mbs/calibration/sampling.py`` goes down, no climb; ``mbs/stages/thesis.py`` ->
``mbs/stages/calibrate.py`` stays in its folder: no climb, it is counted as a stage re-entered).
Returns to a file already open are not counted.
*Conf-path computations*: the sites, in the units the walk reads (entered or only opened) and in
the module-level code of the files it opens, that compute the path of ``conf/`` in code: an
expression ``<path> / "conf"`` or ``os.path.join(..., "conf")``.
*Stages re-entered*: the distinct other stage modules (``mbs/stages/<name>.py`` defining ``run``)
of which the walk opens a unit: their ``run``, or a helper (``mbs.stages.pipeline.sub_config``).

Measured (files, climbs, conf-path computations, stages re-entered): at 580f471, the last commit
before the third re-homing (``mbs/thesis.py`` and ``mbs/thesis_summary.py`` at the root), the
own-code walk is 27, 10, 3, 3 and the full walk 43, 16, 3, 4; at a0e7ec7 (``mbs/thesis/``) 34, 20,
1, 3 and 53, 27, 1, 4; with the figures' typed readers (ca80dc7) 36, 20, 1, 3 and 57, 30, 1, 4; with the thesis's
own reader (mbs/runs/thesis.py) 37, 21, 1, 3 and 58, 31, 1, 4; with the thesis's prompt check and the verifier's answer-tag route (the second task) 39, 23, 1, 3 and 59, 32, 1, 4. Issue 44's "30 files with 27 climbs" was not recorded how it was counted;
neither walk reproduces it.

Run: ``python tests/support/thesis_walk.py [ROOT] [--all]`` (``ROOT``: a tree, the repository by
default) prints the four counts of both walks; ``--all`` also prints each walk, one line per file
opened, indented by its depth in the walk, with the unit that first reached it and ``^`` on a climb.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ("mbs.cli", "thesis")
STAGE = "thesis"
#: Calls the walk cannot resolve from the source, resolved by hand: ``(module, unit) -> target``.
DYNAMIC = {("mbs.cli", "_run"): ("mbs.stages.thesis", "run")}
#: Generic infrastructure, not opened: modules (and the modules below them).
INFRASTRUCTURE = (
    "mbs.io", "mbs.records", "mbs.errors", "mbs.validate", "mbs.registry", "mbs.launch", "mbs.redact",
    "mbs.progress", "mbs.run_lock",
)

#: Modules the own-code walk enters besides those named for the thesis: the entry and the report.
OWN = ("mbs.cli", "mbs.report", "mbs.figures.report")

Unit = tuple[str, str]  # (module, qualified name: "f", "Cls", "Cls.meth", or a module-level name)
Imports = dict[str, tuple[str, str | None]]  # local name -> (module, name imported or None for the module)


@dataclass
class Module:
    """One parsed module: its file, top-level definitions, imports and module-level assignments."""

    name: str
    rel: str
    tree: ast.Module
    defs: dict[str, ast.AST] = field(default_factory=dict)
    imports: Imports = field(default_factory=dict)
    assigns: dict[str, ast.AST] = field(default_factory=dict)
    #: registry name -> {key: value expression} (``R = Registry(...)`` and ``R.add("k", v)`` at module
    #: level, or a dict literal with a key ``"thesis"``)
    registries: dict[str, dict[str, ast.AST]] = field(default_factory=dict)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def parse_tree(root: Path) -> dict[str, Module]:
    """Every module of ``root/mbs`` by dotted name."""
    modules: dict[str, Module] = {}
    for path in sorted((root / "mbs").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        parts = rel[:-3].split("/")
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        mod = Module(name, rel, ast.parse(path.read_text(encoding="utf-8")))
        for node in mod.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                mod.defs[node.name] = node
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            mod.defs[f"{node.name}.{item.name}"] = item
            elif isinstance(node, ast.ImportFrom):
                src = _absolute(name, is_package, node)
                for a in node.names:
                    mod.imports[a.asname or a.name] = (src, a.name)
            elif isinstance(node, ast.Import):  # ``import mbs.x as m``; ``import mbs.x`` binds ``mbs``
                for a in node.names:
                    mod.imports[a.asname or a.name.split(".")[0]] = (a.name if a.asname else a.name.split(".")[0], None)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        mod.assigns[t.id] = node
                        v = node.value
                        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "Registry":
                            mod.registries[t.id] = {}
                        elif isinstance(v, ast.Dict):
                            keyed = {k.value: val for k, val in zip(v.keys, v.values) if isinstance(k, ast.Constant)}
                            if STAGE in keyed:
                                mod.registries[t.id] = keyed
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                f = node.value.func
                if (isinstance(f, ast.Attribute) and f.attr in ("add", "register") and isinstance(f.value, ast.Name)
                        and f.value.id in mod.registries and len(node.value.args) >= 2
                        and isinstance(node.value.args[0], ast.Constant)):
                    mod.registries[f.value.id][node.value.args[0].value] = node.value.args[1]
        modules[name] = mod
    return modules


class Walk:
    """The thesis walk over one tree (see the module docstring).

    Args:
        root: The tree (a checkout holding ``mbs/``).
        own: The own-code walk (else the full walk).
    """

    def __init__(self, root: Path, own: bool = True):
        self.own = own
        self.modules = parse_tree(root)
        self.seen: set[Unit] = set()
        #: (file, depth, reached from file, by unit, climb) in the order the files are first opened
        self.files: list[tuple[str, int, str | None, str, bool]] = []
        self.depth: dict[str, int] = {}
        self.conf_sites: set[tuple[str, int]] = set()
        self.reentered: set[str] = set()

    # -- resolution ---------------------------------------------------------------------------
    def _lookup(self, module: str, attr: str, hops: int = 0) -> Unit | str | None:
        """``attr`` of ``module``: a unit where it is defined, a module name, or ``None``."""
        mod = self.modules.get(module)
        if mod is None or hops > 10:
            return None
        if attr in mod.defs or attr in mod.assigns:
            return (module, attr)
        if attr in mod.imports:
            return self._import(*mod.imports[attr], hops=hops + 1)
        if f"{module}.{attr}" in self.modules:
            return f"{module}.{attr}"
        return None

    def _import(self, src: str, attr: str | None, hops: int = 0) -> Unit | str | None:
        if attr is None:
            return src if src in self.modules else None
        return self._lookup(src, attr, hops)

    def resolve(self, module: str, expr: ast.AST, local: Imports | None = None) -> Unit | str | None:
        """What the name or dotted attribute ``expr`` in ``module`` is defined as, if in ``mbs``.

        Args:
            module: The module ``expr`` is written in.
            expr: An ``ast.Name`` or ``ast.Attribute`` chain.
            local: The imports inside the unit being read (they shadow the module's).

        Returns:
            A unit ``(module, name)``, a module's dotted name, or ``None`` (not defined in ``mbs``).
        """
        if isinstance(expr, ast.Name):
            mod = self.modules[module]
            if local and expr.id in local:
                return self._import(*local[expr.id])
            if expr.id in mod.defs or expr.id in mod.assigns:
                return (module, expr.id)
            if expr.id in mod.imports:
                return self._import(*mod.imports[expr.id])
            return None
        if isinstance(expr, ast.Attribute):
            base = self.resolve(module, expr.value, local)
            if isinstance(base, str):
                return self._lookup(base, expr.attr)
            if isinstance(base, tuple):
                meth = f"{base[1]}.{expr.attr}"
                return (base[0], meth) if meth in self.modules[base[0]].defs else base
        return None

    # -- the walk -----------------------------------------------------------------------------
    def _open(self, module: str, frm: str | None, by: str) -> None:
        rel = self.modules[module].rel
        if rel in self.depth:
            return
        self.depth[rel] = 0 if frm is None else self.depth[frm] + 1
        climb = frm is not None and not (rel.rsplit("/", 1)[0] + "/").startswith(frm.rsplit("/", 1)[0] + "/")
        self.files.append((rel, self.depth[rel], frm, by, climb))
        for node in self.modules[module].tree.body:  # module-level code runs on import
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._conf(rel, node)

    def _conf(self, rel: str, node: ast.AST) -> None:
        for n in ast.walk(node):
            divides = (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and isinstance(n.right, ast.Constant)
                       and n.right.value == "conf")
            joins = (isinstance(n, ast.Call) and ast.unparse(n.func).endswith("path.join")
                     and any(isinstance(a, ast.Constant) and a.value == "conf" for a in n.args))
            if divides or joins:
                self.conf_sites.add((rel, n.lineno))

    def _infrastructure(self, module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in INFRASTRUCTURE)

    def _entered(self, module: str) -> bool:
        """Whether the walk follows the names of ``module``'s units (the own-code walk: only the run's own)."""
        return not self.own or module in OWN or any(p == STAGE or p.startswith(STAGE + "_") for p in module.split("."))

    def _other_stage(self, module: str) -> bool:
        return (module.startswith("mbs.stages.") and module != f"mbs.stages.{STAGE}"
                and isinstance(self.modules[module].defs.get("run"), ast.FunctionDef))

    def visit(self, unit: Unit, frm: Unit | None = None) -> None:
        """Read ``unit`` (first named by ``frm``) and follow what it names, depth first."""
        registry = self.modules[unit[0]].registries.get(unit[1])
        if unit in self.seen or self._infrastructure(unit[0]) or (registry is not None and STAGE not in registry):
            return  # (a registry without a thesis entry is looked up for another stage)
        self.seen.add(unit)
        rel = self.modules[unit[0]].rel
        self._open(unit[0], self.modules[frm[0]].rel if frm else None, f"{frm[0]}.{frm[1]}" if frm else "entry")
        mod = self.modules[unit[0]]
        node = mod.defs.get(unit[1]) or mod.assigns[unit[1]]
        self._conf(rel, node)
        if unit[1] in mod.registries:  # a lookup by the stage: on to the thesis's entry, whichever walk
            entry = mod.registries[unit[1]].get(STAGE)
            target = self.resolve(unit[0], entry) if entry is not None else None
            if isinstance(target, tuple):
                self.visit(target, unit)
            return
        if self._other_stage(unit[0]):
            self.reentered.add(rel)
            if unit[1] == "run":
                return
        if not self._entered(unit[0]):
            return
        for target in self._names(unit, node):
            self.visit(target, unit)

    def _names(self, unit: Unit, node: ast.AST) -> list[Unit]:
        """The units ``node`` (the definition of ``unit``) names, in source order."""
        module = unit[0]
        mod = self.modules[module]
        out: list[Unit] = []
        local: Imports = {}  # function-local imports
        if node is not mod.assigns.get(unit[1]):
            for n in ast.walk(node):
                if isinstance(n, ast.ImportFrom):
                    local.update({a.asname or a.name: (_absolute(module, mod.rel.endswith("__init__.py"), n), a.name)
                                  for a in n.names})
                elif isinstance(n, ast.Import):
                    local.update({a.asname or a.name.split(".")[0]: (a.name if a.asname else a.name.split(".")[0], None)
                                  for a in n.names})

        def add(t: Unit | str | None) -> None:
            if isinstance(t, tuple) and t != unit and t not in out:
                out.append(t)

        def walk(n: ast.AST) -> None:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):  # not its annotations
                for d in [*n.decorator_list, *n.args.defaults, *(d for d in n.args.kw_defaults if d), *n.body]:
                    walk(d)
                return
            if isinstance(n, ast.AnnAssign):
                if n.value is not None:
                    walk(n.value)
                return
            if isinstance(n, ast.Raise) and n.exc is not None:  # the error's name is not followed, its arguments are
                for child in (n.exc.args + [k.value for k in n.exc.keywords] if isinstance(n.exc, ast.Call) else []):
                    walk(child)
                return
            if isinstance(n, ast.ExceptHandler):
                for s in n.body:
                    walk(s)
                return
            if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load):
                t = self.resolve(module, n, local)
                if isinstance(t, tuple):
                    add(t)
                    return
            for child in ast.iter_child_nodes(n):
                walk(child)

        walk(node)
        if unit in DYNAMIC:
            out.append(DYNAMIC[unit])
        return out


def measure(root: Path = ROOT, own: bool = True) -> Walk:
    """The thesis walk of the tree at ``root``: the own-code walk, or with ``own=False`` the full one."""
    walk = Walk(root, own)
    walk.visit(ENTRY)
    return walk


def counts(walk: Walk) -> dict[str, int]:
    """``{"files", "climbs", "conf_paths", "stages_reentered"}`` of a walk (see the module docstring)."""
    return {"files": len(walk.files), "climbs": sum(f[4] for f in walk.files),
            "conf_paths": len(walk.conf_sites), "stages_reentered": len(walk.reentered)}


def main(argv: list[str]) -> None:
    """Print both walks' counts of the tree ``argv[0]`` (default: this repository); ``--all``: the walks."""
    args = [a for a in argv if not a.startswith("--")]
    root = Path(args[0]) if args else ROOT
    for label, own in (("own-code walk", True), ("full walk", False)):
        walk = measure(root, own)
        if "--all" in argv:
            print(f"{label}:")
            for rel, depth, _frm, by, climb in walk.files:
                print(f"{'^' if climb else ' '} {'  ' * depth}{rel}  <- {by}")
            print("  conf/ path computed at:", ", ".join(f"{r}:{n}" for r, n in sorted(walk.conf_sites)) or "-")
            print("  stages re-entered:", ", ".join(sorted(walk.reentered)) or "-")
        c = counts(walk)
        print(f"{label}: files {c['files']}, climbs {c['climbs']}, conf/ path computations {c['conf_paths']}, "
              f"stages re-entered {c['stages_reentered']}")


if __name__ == "__main__":
    main(sys.argv[1:])
