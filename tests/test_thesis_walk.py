"""The thesis walk (issue 44): the files a reader opens to follow one ``mbs-thesis`` run only shrink.

The measure is ``tests/support/thesis_walk.py`` (its module docstring defines it). Before the third
re-homing (commit 580f471) the own-code walk opened 27 files with 10 climbs, computed the path of
``conf/`` at 3 places and re-entered 3 other stages; the ceilings below are the values at the commit
that added this test.
"""

from __future__ import annotations

from pathlib import Path

from support.thesis_walk import counts, measure

#: The own-code walk of this tree; lower a value when a change lowers it. 34 files and 20 climbs when
#: the test was added; 37 and 21 since the report and the thesis figures read through typed readers
#: (mbs/runs/summary.py, mbs/runs/pipeline.py, mbs/runs/thesis.py) instead of by key; 39 and 23
#: since the thesis checks its own prompt template (mbs/prompts, thesis.templates) and its screening
#: reads the answer-tag route where the verifier defines it (mbs/verify/reasoning_gym.py).
CEILING = {"files": 39, "climbs": 23, "conf_paths": 1, "stages_reentered": 3}


def test_the_thesis_walk_only_shrinks():
    got = counts(measure())
    over = {k: f"{got[k]} > {v}" for k, v in CEILING.items() if got[k] > v}
    assert not over, f"the thesis walk grew: {over} (python tests/support/thesis_walk.py --all prints it)"


#: A small tree: the entry, the thesis stage (re-entering ``calibrate`` and ``pipeline``), its
#: library behind a re-export, the report reaching the thesis's figures through a registry, and what
#: the walk must not open (infrastructure, an error class only raised, another stage's internals,
#: another stage's figures, library internals in the own-code walk).
TREE = {
    "mbs/__init__.py": "",
    "mbs/cli.py": (
        "import importlib\n"
        "from pathlib import Path\n"
        "CONF = Path(__file__).resolve().parent.parent / 'conf'\n"
        "def _run(module, cfg):\n"
        "    importlib.import_module(module).run(cfg)\n"
        "def _stage_entry(name, doc):\n"
        "    def main(cfg):\n"
        "        _run(f'mbs.stages.{name}', cfg)\n"
        "    return main\n"
        "thesis = _stage_entry('thesis', 'mbs-thesis')\n"),
    "mbs/io.py": "def read(path):\n    return path\n",
    "mbs/registry.py": "class Registry:\n    def add(self, k, v):\n        pass\n",
    "mbs/stages/__init__.py": "",
    "mbs/stages/thesis.py": (
        "from pathlib import Path\n"
        "from mbs.io import read\n"
        "from mbs.report import render\n"
        "from mbs.stages import calibrate\n"
        "from mbs.stages.pipeline import sub_config\n"
        "from mbs.thesis import build\n"
        "from mbs.training.launch import TrainError\n"
        "CONF = Path(__file__).resolve().parent.parent.parent / 'conf'\n"
        "def run(cfg):\n"
        "    out = calibrate.run(sub_config(cfg))\n"
        "    if not read(out):\n"
        "        raise TrainError('no run')\n"
        "    build()\n"
        "    return render(CONF)\n"),
    "mbs/stages/calibrate.py": "def run(cfg):\n    from mbs.deep import work\n    return work(cfg)\n",
    "mbs/stages/pipeline.py": (
        "from mbs.calibration.deep import helper\n"
        "def sub_config(cfg):\n    return helper(cfg)\n"
        "def run(cfg):\n    return cfg\n"),
    "mbs/deep.py": "def work(cfg):\n    return cfg\n",
    "mbs/training/__init__.py": "",
    "mbs/training/launch.py": "class TrainError(Exception):\n    pass\n",
    "mbs/thesis/__init__.py": "from mbs.thesis.sets import build\n",
    "mbs/thesis/sets.py": "from mbs.calibration.core import band\ndef build():\n    return band()\n",
    "mbs/calibration/__init__.py": "",
    "mbs/calibration/core.py": "from mbs.calibration.deep import helper\ndef band():\n    return helper(1)\n",
    "mbs/calibration/deep.py": "def helper(x):\n    return x\n",
    "mbs/report.py": (
        "from mbs.figures.stages import BY_STAGE\n"
        "def render(run_dir):\n    return BY_STAGE.get('stage')(run_dir)\n"),
    "mbs/figures/__init__.py": "",
    "mbs/figures/stages.py": (
        "from mbs.figures.other import other_figures\n"
        "from mbs.figures.thesis import thesis_figures\n"
        "from mbs.registry import Registry\n"
        "BY_STAGE = Registry()\n"
        "BY_STAGE.add('other', other_figures)\n"
        "BY_STAGE.add('thesis', thesis_figures)\n"),
    "mbs/figures/other.py": "def other_figures(d):\n    return d\n",
    "mbs/figures/thesis.py": "def thesis_figures(d):\n    from mbs.thesis.sets import build\n    return build()\n",
}


def _tree(tmp_path: Path) -> Path:
    for rel, text in TREE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_the_own_code_walk_of_a_known_tree(tmp_path):
    walk = measure(_tree(tmp_path))
    assert [(rel, climb) for rel, _, _, _, climb in walk.files] == [
        ("mbs/cli.py", False),
        ("mbs/stages/thesis.py", False),  # down from mbs/
        ("mbs/stages/calibrate.py", False),  # same folder: a stage re-entered, not a climb
        ("mbs/stages/pipeline.py", False),
        ("mbs/thesis/sets.py", True),  # out of mbs/stages/ (through the re-export of mbs/thesis/__init__.py)
        ("mbs/calibration/core.py", True),  # out of mbs/thesis/
        ("mbs/report.py", True),  # up to mbs/
        ("mbs/figures/stages.py", False),  # the registry, followed to its "thesis" entry only
        ("mbs/figures/thesis.py", False),
    ]
    assert counts(walk) == {"files": 9, "climbs": 3, "conf_paths": 2, "stages_reentered": 2}
    assert sorted(walk.conf_sites) == [("mbs/cli.py", 3), ("mbs/stages/thesis.py", 8)]
    assert sorted(walk.reentered) == ["mbs/stages/calibrate.py", "mbs/stages/pipeline.py"]


def test_the_full_walk_enters_the_library_but_not_another_stage(tmp_path):
    walk = measure(_tree(tmp_path), own=False)
    opened = [rel for rel, *_ in walk.files]
    # the library's internals are entered (pipeline.sub_config -> calibration/deep.py) ...
    assert opened == ["mbs/cli.py", "mbs/stages/thesis.py", "mbs/stages/calibrate.py", "mbs/stages/pipeline.py",
                      "mbs/calibration/deep.py", "mbs/thesis/sets.py", "mbs/calibration/core.py", "mbs/report.py",
                      "mbs/figures/stages.py", "mbs/figures/thesis.py"]
    # ... but never calibrate's own (mbs/deep.py), infrastructure, an error class or another stage's
    # figures; mbs/stages/pipeline.py -> mbs/calibration/deep.py is the fourth climb
    assert counts(walk) == {"files": 10, "climbs": 4, "conf_paths": 2, "stages_reentered": 2}
