"""The Knob effects page (`dashboard.effects_page`): the effects with their intervals as error bars, partial
dependence per family, and the page itself on a real store of a search with a planted family effect."""

from __future__ import annotations

from pathlib import Path

import pytest

from dashboard.effects_page import effects_figure, partial_dependence_figure, search_effects_at
from nas.answer.effects import knobs_of
from nas.space import space_from_dict, to_optuna_distributions
from planted_search import ANCRE_EFFECT, SPACE, TARGET, planted_search

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('effects_page') / 'planted.db'}"
    planted_search(url)
    return url


def test_effect_plot_draws_each_estimated_term_with_its_80_percent_interval(planted):
    effects, _, _ = search_effects_at(planted, "planted", TARGET, "flops")
    fig = effects_figure(effects)
    resolved, other = fig.data
    assert resolved.name == "resolved" and "residual: ancre vs cascaded" in resolved.y
    i = list(resolved.y).index("residual: ancre vs cascaded")
    ancre = next(e for e in effects.effects if e.step == "ancre vs cascaded")
    assert resolved.x[i] == ancre.effect and resolved.x[i] + resolved.error_x.array[i] == pytest.approx(ancre.high)
    assert resolved.x[i] - resolved.error_x.arrayminus[i] == pytest.approx(ancre.low)
    assert ancre.low <= ANCRE_EFFECT <= ancre.high
    assert "residual: nag vs cascaded" in other.y  # planted 0: its interval spans 0
    assert not any(label.startswith("d_model") for label in (*resolved.y, *other.y))  # follows from size: no point


def test_partial_dependence_has_depth_width_and_mod_rate_per_family(planted):
    _, rows, knobs = search_effects_at(planted, "planted", TARGET, "flops")
    fig = partial_dependence_figure(rows, knobs)
    assert [a.text for a in fig.layout.annotations] == ["n_layers", "d_model", "mod_rate"]
    assert len(fig.data) == 9 and {t.name for t in fig.data} == {"cascaded", "nag", "ancre"}
    by = {(t.name, t.xaxis): t for t in fig.data}
    gap = by[("ancre", "x")].y[0] - by[("cascaded", "x")].y[0]
    assert gap == pytest.approx(ANCRE_EFFECT, abs=0.02)
    assert by[("cascaded", "x2")].y[0] > by[("cascaded", "x2")].y[-1]  # wider is better in the planted trend


def test_knobs_of_the_planted_space_read_depth_and_width_in_log_scale():
    knobs = {k.name: k for k in knobs_of(to_optuna_distributions(space_from_dict(SPACE)))}
    assert knobs["n_layers"].scale == "log" and knobs["d_model"].scale == "log"
    assert knobs["mod_rate"].scale == "linear" and knobs["residual"].levels == ("cascaded", "nag", "ancre")


def test_app_knob_effects_page(planted, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("RESNAS_STORAGE", planted)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.sidebar.radio(key="page").set_value("Knob effects").run()
    assert not at.exception, [e.message for e in at.exception]
    table = at.dataframe[0].value.set_index("step")
    assert table.loc["ancre vs cascaded", "resolved"] == "yes"
    assert any("ancre trails cascaded" in m.value for m in at.markdown)
