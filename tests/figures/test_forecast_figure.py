"""The trap-forecast figure is drawn from a forecast comparison."""

from __future__ import annotations

from mbs.figures.forecast import trap_forecast_figure
from mbs.training.forecast import TrapForecaster


def test_trap_forecast_figure_writes_png_and_pdf(tmp_path):
    f = TrapForecaster.from_counts([(0, 4), (2, 4), (4, 4), (1, 4)], group_size=4, n_mc=200)
    paths = trap_forecast_figure(f.compare([0.5, 0.25, 0.75], 4), tmp_path)
    assert [p.name for p in paths] == ["trap_forecast.png", "trap_forecast.pdf"]
    assert all(p.stat().st_size > 1000 for p in paths)
