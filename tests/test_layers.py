"""The import rules of CONTRIBUTING.md, checked on the source: every import of an ``mbs`` module
(at the top or inside a function) goes down the layers of :data:`LAYERS` or stays in its layer;
every import between folders goes down the folder layers of :data:`FOLDERS` or stays in its
layer; the modules import each other in no circle; and no function below ``mbs/stages/`` takes the whole
config (a parameter ``cfg``) except the ones listed in :data:`CFG_DEBT`, which only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "mbs"

#: Layers from the bottom up: a module's layer is that of the longest prefix listed. A module
#: imports only modules of its own layer or below.
LAYERS: list[list[str]] = [
    # foundations: no mbs imports but each other
    ["mbs", "mbs.errors", "mbs.redact", "mbs.progress", "mbs.resources", "mbs.stats", "mbs.textmath",
     "mbs.reasoning", "mbs.prompts", "mbs.registry", "mbs.records"],
    # run directories (and the typed readers of their summaries), the ranges of config values, LLM
    # backends, the job launcher and the service
    ["mbs.llm", "mbs.validate", "mbs.io", "mbs.runs", "mbs.launch", "mbs.service"],
    # grading
    ["mbs.verify"],
    # problems in, rewards out
    ["mbs.data", "mbs.benchmarks", "mbs.rewards", "mbs.evaluation"],
    # calibration: pass rates, bands, grouping, drawing rollouts
    # (and the thesis experiment's statistics over them)
    ["mbs.calibration", "mbs.calibration.grouping", "mbs.calibration.stopping", "mbs.calibration.estimate",
     "mbs.calibration.difficulty", "mbs.calibration.independence", "mbs.calibration.sampling", "mbs.thesis"],
    # figures of each stage (they read run directories)
    ["mbs.figures"],
    # what the stages call: a calibration run's outputs, shards and their union, synthesis, export, training
    ["mbs.calibration.run", "mbs.calibration.recorded", "mbs.shards", "mbs.synth", "mbs.export", "mbs.training",
     "mbs.thesis.summary"],
    # the report (draws every stage's figures, synthesis methods' included)
    ["mbs.report"],
    # the stages and their entry points
    ["mbs.stages"],
    ["mbs.cli"],
]

#: Folders (the packages right below ``mbs``, and each root module on its own) from the bottom up:
#: a folder imports only folders of its own layer or below, so a reader walks each folder down
#: once. A folder's modules may be spread over several :data:`LAYERS`; this is the coarser rule.
FOLDERS: list[list[str]] = [
    # foundations
    ["mbs", "mbs.errors", "mbs.redact", "mbs.progress", "mbs.resources", "mbs.stats", "mbs.textmath",
     "mbs.reasoning", "mbs.prompts", "mbs.registry", "mbs.records", "mbs.run_lock", "mbs.run_restore"],
    # run directories and their readers, config ranges, LLM backends, the job launcher and the service
    ["mbs.llm", "mbs.validate", "mbs.io", "mbs.runs", "mbs.launch", "mbs.service"],
    ["mbs.verify"],
    ["mbs.data", "mbs.benchmarks", "mbs.rewards", "mbs.evaluation"],
    ["mbs.calibration"],
    # shards and their union; the export (verl parquet with the calibrated policy's provenance)
    ["mbs.shards", "mbs.export"],
    ["mbs.training"],
    # the thesis experiment's sets, sampler, statistics, table and summary (over calibrations and trainings)
    ["mbs.thesis"],
    # figures of each stage's run directory
    ["mbs.figures"],
    # synthesis methods (each names its figures)
    ["mbs.synth"],
    # the report: every stage's figures, synthesis methods' included
    ["mbs.report"],
    ["mbs.stages"],
    ["mbs.cli"],
]


def _folder(mod: str) -> str:
    """The folder of a module: ``mbs.<first name>`` (``mbs.figures.calibration`` -> ``mbs.figures``)."""
    return ".".join(mod.split(".")[:2])


def _folder_layer(folder: str) -> int:
    return next((i for i, names in enumerate(FOLDERS) if folder in names), -1)


def _upward_folders(edges: dict[str, set[str]]) -> list[str]:
    """Each import from a folder into a folder of a higher layer, named as ``module -> module``."""
    return sorted(f"{m} imports {t}: folder {_folder(m)} (layer {_folder_layer(_folder(m))}) runs up to "
                  f"{_folder(t)} (layer {_folder_layer(_folder(t))})"
                  for m, ts in edges.items() for t in ts if _folder_layer(_folder(t)) > _folder_layer(_folder(m)))


#: Functions below ``mbs/stages/`` that still take the whole config. Issue 26 emptied it (typed
#: settings built at the stage boundary, ``mbs/stages/config.py`` for the config itself); none may
#: join it.
CFG_DEBT: set[str] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module an imported dotted name lives in (``mbs.verify.grade`` -> ``mbs.verify``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports_of(mod: str, source: str, is_package: bool = False) -> set[str]:
    """The ``mbs`` modules that module ``mod`` (source text ``source``) imports, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):  # ``from .. import x``: x may be a module
            parts = mod.split(".")
            base = parts[: len(parts) - node.level + is_package] if node.level else []
            names = [".".join([*base, *([node.module] if node.module else []), a.name]) for a in node.names]
        for name in names:
            target = _resolve(name) if name.startswith("mbs") else None
            if target and target != mod:
                out.add(target)
    return out


def _imports() -> dict[str, set[str]]:
    """``module -> modules it imports`` (top-level and deferred imports alike)."""
    return {m: _imports_of(m, p.read_text(encoding="utf-8"), p.name == "__init__.py") for m, p in MODULES.items()}


def _upward(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
                  for m, ts in edges.items() for t in ts if _layer(t) > _layer(m))


def _layer(mod: str) -> int:
    best, layer = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > best:
                best, layer = len(p), i
    return layer


def test_every_module_has_a_layer():
    assert [m for m in MODULES if _layer(m) < 0] == []


def test_no_import_runs_up_the_layers():
    assert _upward(_imports()) == []


def test_every_folder_has_a_layer():
    assert sorted({_folder(m) for m in MODULES if _folder_layer(_folder(m)) < 0}) == []


def test_no_import_runs_up_the_folders():
    assert _upward_folders(_imports()) == []


def test_the_folder_check_names_the_offending_import():
    edges = {"mbs.calibration.run": {"mbs.figures.calibration", "mbs.calibration.sampling", "mbs.io"}}
    assert _upward_folders(edges) == [
        "mbs.calibration.run imports mbs.figures.calibration: folder mbs.calibration (layer 4) runs up to "
        "mbs.figures (layer 8)"]


def test_no_import_circle():
    edges = _imports()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for m in sorted(MODULES):
        if m not in index:
            visit(m)
    assert circles == []


def test_no_module_over_600_lines():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert long == {}


def _unexplained_local_imports(source: str, rel: str) -> list[str]:
    """``rel:line`` of every import inside a function without a comment saying why: on its own
    line, or above the block of imports it belongs to (CONTRIBUTING: imports go at the top)."""
    lines = source.splitlines()
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            j = node.lineno - 1
            while j >= 0 and "#" not in lines[j]:
                text = lines[j].strip()
                if j < node.lineno - 1 and not text.startswith(("import ", "from ")) and not text.endswith((",", "(", ")")):
                    break  # left the block of imports without finding a reason
                j -= 1
            if j < 0 or "#" not in lines[j]:
                found.append(f"{rel}:{node.lineno}")
    return found


def test_every_function_local_import_says_why():
    found = [x for m, p in MODULES.items() for x in _unexplained_local_imports(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT.parent)))]
    assert found == []


def test_the_local_import_check_names_an_unexplained_one():
    src = "def f():\n    import torch\n\n\ndef g():\n    # lazy: optional extra\n    import torch\n    import trl\n\n\ndef h():\n    import os  # why\n"
    assert _unexplained_local_imports(src, "m.py") == ["m.py:2"]


#: Parameter names that hold a config (the whole one, or a saved run's).
CONFIG_NAMES = frozenset({"cfg", "config", "conf"})

#: Functions below ``mbs/stages/`` that read another run's saved ``config.yaml`` as data (a
#: shard's, to union shards; an export source's, to find the policy it was calibrated with):
#: not this run's config, so they may take one.
SAVED_RUN_CONFIGS = {
    "mbs/shards.py:_config_without_shard", "mbs/runs/policy.py:select", "mbs/runs/policy.py:_policy_node",
    "mbs/runs/policy.py:policy_of_run", "mbs/runs/calibration.py:_templates",
}


def _config_takers(source: str, rel: str) -> set[str]:
    """``rel:function`` of every function of ``source`` with a parameter named like a config
    (:data:`CONFIG_NAMES`, ``*args``/``**kwargs`` included), and ``rel:self.<name>`` where a
    method keeps one on the instance."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(v for v in (a.vararg, a.kwarg) if v)]
            if any(x.arg in CONFIG_NAMES for x in params):
                found.add(f"{rel}:{node.name}")
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr in CONFIG_NAMES
              and isinstance(node.value, ast.Name) and node.value.id == "self"):
            found.add(f"{rel}:self.{node.attr}")
    return found


def _library_config_takers() -> set[str]:
    """:func:`_config_takers` of every module below ``mbs/stages/``."""
    found = set()
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).as_posix()
        if rel.startswith("mbs/stages/") or rel == "mbs/cli.py":
            continue
        found |= _config_takers(path.read_text(encoding="utf-8"), rel)
    return found


def _cfg_functions() -> set[str]:
    return _library_config_takers() - SAVED_RUN_CONFIGS


def test_no_new_cfg_parameter_below_the_stages():
    assert sorted(_cfg_functions() - CFG_DEBT) == [], "pass typed settings, not the config, below mbs/stages/"


def test_cfg_debt_list_is_current():
    assert sorted(CFG_DEBT - _cfg_functions()) == [], "these no longer take cfg: remove them from CFG_DEBT"


def test_saved_run_config_list_is_current():
    assert sorted(SAVED_RUN_CONFIGS - _library_config_takers()) == [], \
        "these take no config any more: remove them from SAVED_RUN_CONFIGS"


def test_the_config_check_sees_other_names_and_the_instance():
    src = ("def a(cfg): ...\ndef b(config): ...\ndef c(x, **conf): ...\ndef d(settings): ...\n"
           "class K:\n    def __init__(self, c):\n        self.cfg = c\n")
    assert _config_takers(src, "m.py") == {"m.py:a", "m.py:b", "m.py:c", "m.py:self.cfg"}


def test_the_checks_catch_an_upward_import_and_a_deferred_one():
    # verify/gold.py's old import of sampling.py, at the top and inside a function
    top = _imports_of("mbs.verify.gold", "from mbs.calibration.sampling import verifier_for\n")
    deferred = _imports_of("mbs.verify.gold", "def f():\n    import mbs.calibration.sampling as s\n    return s\n")
    assert top == deferred == {"mbs.calibration.sampling"}
    assert _upward({"mbs.verify.gold": top}) == ["mbs.verify.gold (layer 2) imports mbs.calibration.sampling (layer 4)"]
    assert _imports_of("mbs.verify", "from .registry import Grade\n", is_package=True) == {"mbs.verify.registry"}
    assert _imports_of("mbs.verify.gold", "from ..calibration import sampling\n") == {"mbs.calibration.sampling"}
    assert _imports_of("mbs.verify.gold", "from .. import calibration\n") == {"mbs.calibration"}
