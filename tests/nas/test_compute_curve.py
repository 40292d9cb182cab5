"""What the compute buys: the layout line and `nas search --dry-run` quote, for the share of T a search plans per
trial, the figures `make fidelity` measured at that share, read from the table the package ships."""

import json
from pathlib import Path

import pytest

from nas.answer.compute_curve import CURVE_FILE, curve, quote
from nas.cli.front_table import layout_lines
from nas.space.budget import Budget

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_curve_is_the_one_make_fidelity_wrote():
    shipped = json.loads((ROOT / "nas" / "answer" / CURVE_FILE).read_text())
    results = json.loads((ROOT / "benchmarks" / "results" / "fidelity.json").read_text())
    assert curve() == shipped == results["summary"]["compute_curve"]
    assert set(shipped) == {"plays", "code", "handbook"}


@pytest.mark.parametrize("key", ["T/90", "T/40", "T/30", "T/20", "T/10"])
def test_a_measured_share_is_quoted_with_its_figures(key):
    per = {name: c[key] for name, c in curve().items()}
    share = next(iter(per.values()))["share_of_target"]
    line = quote(share)
    assert f"at {key} per trial" in line and " / ".join(per) in line
    for figures in per.values():
        if figures["decision_accuracy"] is not None:
            assert f"{figures['decision_accuracy']:.0%}" in line
        if figures["resolved_call_accuracy"] is not None:
            assert f"{figures['resolved_call_accuracy']:.0%}" in line
        if figures["band_half_width"] is not None:
            assert f"{figures['band_half_width']:.3f}" in line


def test_a_share_outside_those_measured_is_said_so():
    shares = [f["share_of_target"] for c in curve().values() for f in c.values()]
    lowest, highest = min(shares), max(shares)
    assert "below the lowest share make fidelity measured" in quote(lowest / 10)
    assert "above the highest share make fidelity measured (T/10): not measured" in quote(highest * 3)
    assert quote(lowest * 1.2).startswith("what this compute buys (make fidelity at T/90")


def test_the_layout_line_quotes_the_curve_at_the_searchs_share():
    budget = Budget(trial_flops=5e10, trials=12)  # every config once at T/10
    assert quote(0.1) in layout_lines(budget)
    far = Budget(trial_flops=5e10, trials=12, target_flops=4e12)  # T/40 per trial
    assert quote(1e11 / 4e12) in layout_lines(far) and "at T/40 per trial" in quote(1e11 / 4e12)
