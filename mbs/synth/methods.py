"""The synthesis methods: one :class:`MethodSpec` per method in :data:`METHODS`.

A method is a function ``run(settings: SynthSettings, out: RunDir) -> summary dict`` that writes
its records into ``out`` and returns its summary (``mbs-synthesize`` writes ``summary.json``, the
figures and the manifest). The stage reads the config once into the
:class:`~mbs.synth.settings.SynthSettings`; a method of its own reads its config group ``<name>``
from ``settings.method_config``. Its spec says whether it grows hard seeds of a calibration
(``calibration_dir``: the pipeline runs it only after the live calibration) and which figures it
draws. A new method adds
its module and one :func:`register_method` line here (or in its own module, for a plug-in)::

    register_method(MethodSpec("mine", mine.run, needs_seeds=True, figures=synthesis_figures))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mbs.figures.goose import goose_figures
from mbs.figures.stages import FigureFn
from mbs.figures.synthesis import synthesis_figures
from mbs.io import RunDir
from mbs.registry import Registry
from mbs.synth import beanstalk, direct
from mbs.synth.goose import run as goose
from mbs.synth.settings import SynthSettings

#: ``run(settings, out) -> summary`` of a synthesis method.
MethodFn = Callable[[SynthSettings, RunDir], dict[str, Any]]


@dataclass(frozen=True)
class MethodSpec:
    """A synthesis method.

    Attributes:
        name: ``method=<name>`` of ``mbs-synthesize``; the run's summary ``method``.
        run: ``run(settings, out) -> summary dict``.
        needs_seeds: It grows the hard seeds of ``calibration_dir`` (MBS, direct), so the
            pipeline runs it only after its live calibration.
        figures: ``fn(run_dir, out_dir, formats, width) -> {"written", "skipped", ...}``.
        figures_in_summary: Its summary records what its figures wrote (Golden Goose's report
            reads it).
        sampling_keys: Config keys (patterns, ``*``: any key) of its own settings that decide
            what its records are, added to the stage's sampling config: a resumed run refuses
            other values (:data:`mbs.stages.config.SAMPLING_KEYS`). ``None`` (the default): its
            whole node ``<name>``. The built-in methods declare ``()``: the stage's keys
            already hold what decides their records.
    """

    name: str
    run: MethodFn
    needs_seeds: bool
    figures: FigureFn
    figures_in_summary: bool = False
    sampling_keys: tuple[str, ...] | None = None

    @property
    def record_keys(self) -> tuple[str, ...]:
        """:attr:`sampling_keys`, its default (``(name,)``) filled in."""
        return (self.name,) if self.sampling_keys is None else self.sampling_keys


#: ``method`` name -> its spec.
METHODS: Registry[MethodSpec] = Registry("synthesis method")


def register_method(spec: MethodSpec) -> MethodSpec:
    """Add ``spec`` to :data:`METHODS` and return it.

    Raises:
        ValueError: The name is taken by a different method.
    """
    return METHODS.add(spec.name, spec)


register_method(MethodSpec("mbs", beanstalk.run, needs_seeds=True, figures=synthesis_figures, sampling_keys=()))
register_method(MethodSpec("direct", direct.run, needs_seeds=True, figures=synthesis_figures, sampling_keys=()))
register_method(MethodSpec("goose", goose.run, needs_seeds=False, figures=goose_figures, figures_in_summary=True,
                           sampling_keys=()))
