"""The dashboard on a real seeded SQLite store: figure builders against brute force, and every page via AppTest."""

from __future__ import annotations

import io
import math
import sqlite3
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dashboard.figures import (
    FAMILY_COLOURS,
    ancre_heatmap,
    hypervolume_figure,
    loss_curve_figure,
    mod_symbol,
    nag_figure,
    pareto_figure,
    residual_norm_figure,
    skip_rate_figure,
    trials_frame,
    width_figure,
    width_trend,
)
from nas.pareto import hypervolume_curve, reference_point
from nas.store import Store, default_url

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
INF = math.inf

# (number, residual, n_layers, d_model, n_heads, mod_rate, lr, outcome, val_loss, executed FLOPs/token)
EXP1 = [
    (0, "cascaded", 4, 128, 4, 0.0, 3e-3, "completed", 2.10, 2.0e6),
    (1, "nag", 6, 192, 6, 0.25, 3e-3, "completed", 1.95, 3.6e6),
    (2, "ancre", 4, 128, 4, 0.125, 2e-3, "completed", 2.05, 2.3e6),
    (3, "cascaded", 2, 64, 2, 0.5, 8e-3, "completed", 2.60, 0.5e6),
    (4, "nag", 3, 96, 2, 0.0, 5e-3, "completed", 2.30, 1.2e6),
    (5, "ancre", 8, 192, 4, 0.0, 1e-3, "completed", 2.00, 5.0e6),  # dominated by 1
    (6, "cascaded", 6, 128, 4, 0.25, 2e-3, "completed", 2.20, 2.5e6),  # dominated by 2
    (7, "nag", 8, 192, 4, 0.5, 9e-3, "diverged", INF, 2.9e6),
    (8, "ancre", 8, 192, 4, 0.0, 1e-3, "infeasible", INF, 6.5e6),
    (9, "cascaded", 4, 96, 2, 0.125, 4e-3, "failed", INF, 1.4e6),  # failed twice: a retry
    (10, "nag", 4, 128, 4, 0.25, 3e-3, "running", None, None),
]
EXP2 = [
    (0, "cascaded", 3, 96, 2, 0.0, 4e-3, "completed", 2.25, 1.0e6),
    (1, "ancre", 5, 128, 4, 0.25, 3e-3, "completed", 2.02, 2.4e6),
    (2, "nag", 4, 64, 2, 0.125, 6e-3, "completed", 2.40, 0.6e6),
    (3, "nag", 6, 192, 6, 0.0, 2e-3, "failed", INF, 4.0e6),
]


def _params(number, residual, n_layers, d_model, n_heads, mod_rate, lr, flops) -> dict:
    """The flat sampled config `nas.tune_runner` stores when a trial starts."""
    return dict(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        mlp_ratio=2.6667,
        residual=residual,
        ancre_tau=0.01,
        mod_rate=mod_rate,
        mod_every=2,
        lr=lr,
        warmup=0.1,
        weight_decay=0.1,
        optuna_number=number,
        infeasible_reason=None,
        executed_flops_per_token=flops,
    )


def _ancre_p(n_layers: int) -> list[list[float]]:
    """(L+1) x L, p[i][j-1] = p_ij for i < j (columns sum to 1), zero where i >= j, as AncreLM stores it."""
    p = np.zeros((n_layers + 1, n_layers))
    for j in range(1, n_layers + 1):
        logits = np.array([3.0 if i in (0, j - 1) else -2.0 * (j - i) / j for i in range(j)])
        p[:j, j - 1] = np.exp(logits) / np.exp(logits).sum()
    return p.tolist()


def _diagnostics(residual, n_layers, mod_rate, flops) -> dict:
    routed = [j for j in range(2, n_layers + 1) if j % 2 == 0] if mod_rate else []
    diag = {
        "residual_rms": [1.0 + 0.35 * k for k in range(n_layers + 1)],
        "skip_rate": {f"{kind}{j}": mod_rate + 0.01 * j for j in routed for kind in ("attn", "mlp")},
        "mod_threshold": {f"{kind}{j}": 0.1 for j in routed for kind in ("attn", "mlp")},
        "executed_flops_per_token": flops,
    }
    if residual == "nag":
        alpha = [(i + 1) ** -0.5 for i in range(2 * n_layers)]
        diag.update(nag_angle=[math.atan(0.5 * a) for a in alpha], nag_gate=[0.5] * len(alpha), nag_alpha=alpha)
    if residual == "ancre":
        diag["ancre_p"] = _ancre_p(n_layers)
    return diag


def _result(spec) -> dict:
    """A `TrialResult.to_dict()` for one row of EXP1/EXP2."""
    number, residual, n_layers, d_model, n_heads, mod_rate, lr, outcome, loss, flops = spec
    arch = dict(
        vocab_size=256,
        seq_len=128,
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        mlp_ratio=2.6667,
        residual=residual,
        ancre_tau=0.01,
        mod_rate=mod_rate,
        mod_every=2,
        mod_routing="causal_threshold",
        nag_gate_components=32,
        tie_embeddings=False,
    )
    base = dict(
        status=outcome,
        val_loss=loss,
        val_bpb=loss / math.log(2),
        nominal_flops_per_token=flops * 1.2,
        executed_flops_per_token=flops,
        budget_flops=2e12,
        arch=arch,
        optim=dict(lr=lr, weight_decay=0.1, warmup=0.1, grad_clip=1.0),
        seed=number,
    )
    if outcome != "completed":
        reasons = {
            "diverged": "non-finite loss at step 31",
            "infeasible": "budget 2e12 cannot pay for one step",
            "failed": "RuntimeError: worker died",
        }
        return {
            **base,
            "failure_reason": reasons[outcome],
            "tokens_seen": 0,
            "training_flops": 0.0,
            "curve": [],
            "diagnostics": {},
            "width": None,
        }
    steps = int(2e12 / (3 * flops * 2048))
    curve = [
        {
            "step": s,
            "tokens": s * 2048,
            "train_loss": loss + 3.0 * math.exp(-s / 40),
            "val_loss": loss + 2.9 * math.exp(-s / 40) if s % 50 == 0 or s == steps else None,
            "training_flops": s * 3 * flops * 2048,
        }
        for s in range(10, steps + 1, 10)
    ] + [
        {
            "step": steps,
            "tokens": steps * 2048,
            "train_loss": loss + 0.05,
            "val_loss": loss,
            "training_flops": steps * 3 * flops * 2048,
        }
    ]
    d_align = 2.0 * (d_model / 64) ** 0.8  # grows with width
    width = dict(
        n_sequences=64,
        d_model=d_model,
        mu_norm=0.1,
        d_par=d_align * 1.5,
        d_2=d_align,
        d_align=d_align,
        b_exact_8_8=0.02,
        b_align_8_8=0.03,
        p_hat_8_8=0.05 / d_align,
    )
    return {
        **base,
        "failure_reason": None,
        "realised_flops_per_token": flops * 1.01,
        "training_flops": 2e12,
        "tokens_seen": steps * 2048,
        "planned_tokens": steps * 2048,
        "steps": steps,
        "wall_time_s": 30.0 + number,
        "tokens_per_s": 4000.0,
        "step_time_share": 0.9,
        "peak_memory_mb": 500.0,
        "curve": curve,
        "diagnostics": _diagnostics(residual, n_layers, mod_rate, flops),
        "width": width,
    }


def _seed_search(store: Store, name: str, specs) -> None:
    store.create_search(
        name,
        requested_trials=len(specs) + 1,
        budget={"trial_flops": 2e12, "search_flops": 2.4e13},
        space={"residual": ["cascaded", "nag", "ancre"]},
        settings={"sampler": "tpe", "seed": 0},
        optuna_study_name=name,
        code_version="test",
    )
    for spec in specs:
        number, outcome, flops = spec[0], spec[7], spec[9]
        config = _params(number, *spec[1:7], flops)
        trial_id = store.start_trial(name, number=number, config=config, optuna_trial_number=number)
        if outcome == "running":
            continue
        if number == 9:  # a crash, retried, crashed again: the first try goes to previous_attempts
            store.finish_trial(trial_id, {"status": "retrying", "val_loss": INF, "failure_reason": "OOM"})
            trial_id = store.start_trial(name, number=number, attempt=1, config=config, optuna_trial_number=number)
        store.finish_trial(trial_id, _result(spec))


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> str:
    url = default_url(tmp_path_factory.mktemp("dashboard"))
    with Store(url) as store:
        _seed_search(store, "exp1", EXP1)  # stays "running": trial 10 is still running
        _seed_search(store, "exp2", EXP2)
        store.set_search_status("exp2", "completed")
    return url


@pytest.fixture(scope="module")
def rows(seeded) -> dict:
    with Store(seeded) as store:
        return {"exp1": store.trials("exp1"), "exp2": store.trials("exp2")}


def _trace(fig, name: str):
    found = [t for t in fig.data if t.name == name]
    assert len(found) == 1, [t.name for t in fig.data]
    return found[0]


def _brute_force_front(rows) -> set[tuple[float, float]]:
    pts = [
        (r.executed_flops_per_token, r.val_loss)
        for r in rows
        if r.status == "completed" and r.val_loss is not None and math.isfinite(r.val_loss)
    ]
    return {p for p in pts if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in pts)}


# ---- figures ---------------------------------------------------------------------------------


def test_front_trace_holds_exactly_the_non_dominated_completed_trials(rows):
    fig = pareto_figure({"exp1": rows["exp1"]})
    front, dominated = _trace(fig, "front: exp1"), _trace(fig, "dominated: exp1")
    expected = _brute_force_front(rows["exp1"])
    assert set(zip(front.x, front.y, strict=False)) == expected and len(front.x) == len(expected) == 5
    assert list(front.x) == sorted(front.x) and front.line.shape == "hv" and "lines" in front.mode
    assert {c[1] for c in dominated.customdata} == {5, 6}
    assert fig.layout.xaxis.type == "log"
    assert not any(t.name.startswith("not completed") for t in fig.data)  # hidden unless asked


def test_infeasible_and_diverged_points_only_when_toggled(rows):
    plain = pareto_figure({"exp1": rows["exp1"]}, show_dominated=False)
    assert not any((t.name or "").startswith(("dominated", "not completed")) for t in plain.data)
    fig = pareto_figure({"exp1": rows["exp1"]}, show_infeasible=True)
    bad = _trace(fig, "not completed: exp1")
    assert sorted(c[1] for c in bad.customdata) == [7, 8, 9]  # the running trial 10 is never drawn
    assert bad.marker.symbol == "x" and len(set(bad.y)) == 1
    top = bad.y[0]
    finite = [r.val_loss for r in rows["exp1"] if r.status == "completed"]
    assert top > max(finite) and fig.layout.yaxis.range[1] >= top > fig.layout.yaxis.range[0]
    assert any("status diverged" in h for h in bad.hovertext) and any("status infeasible" in h for h in bad.hovertext)


def test_hover_shows_the_config_and_encodings_follow_family_and_mod_rate(rows):
    fig = pareto_figure({"exp1": rows["exp1"]})
    front = _trace(fig, "front: exp1")
    by_number = {r.number: r for r in rows["exp1"]}
    for (_, number), colour, symbol, hover in zip(
        front.customdata, front.marker.color, front.marker.symbol, front.hovertext, strict=False
    ):
        row = by_number[number]
        assert colour == FAMILY_COLOURS[row.residual] and symbol == mod_symbol(row.mod_rate)
        for text in (
            f"trial #{number}",
            f"residual {row.residual}",
            f"layers {row.n_layers}",
            f"d_model {row.d_model}",
            f"heads {row.n_heads}",
            f"mod_rate {row.mod_rate:g}",
            f"lr {row.config['optim']['lr']:.2e}",
            f"val loss {row.val_loss:.4f}",
            f"FLOPs/token {row.executed_flops_per_token:.3g}",
            f"tokens {row.tokens_seen:,}",
        ):
            assert text in hover, (text, hover)
    assert [mod_symbol(m) for m in (0.0, 0.125, 0.25, 0.5)] == ["circle", "square", "diamond", "triangle-up"]
    legend = {t.name for t in fig.data if (t.legendgroup or "").startswith("key:")}
    assert {"cascaded", "nag", "ancre", "MoD 0", "MoD (0.35, 0.6]"} <= legend


def test_searches_overlay_with_their_own_fronts_and_hypervolume(rows):
    fig = pareto_figure(rows)
    one, two = _trace(fig, "front: exp1"), _trace(fig, "front: exp2")
    assert set(zip(two.x, two.y, strict=False)) == _brute_force_front(rows["exp2"]) and one.line.dash != two.line.dash
    ref = reference_point(rows["exp1"] + rows["exp2"])
    hv = hypervolume_figure(rows, ref)
    for name in ("exp1", "exp2"):
        trace = _trace(hv, name)
        finished = [r for r in rows[name] if r.status != "running"]  # by number already
        assert list(trace.x) == [r.number for r in finished]
        assert np.allclose(trace.y, hypervolume_curve(finished, ref)) and np.all(np.diff(trace.y) >= 0)
    assert f"{ref[0]:.4f}" in hv.layout.title.text and f"{ref[1]:.4g}" in hv.layout.title.text
    assert _trace(hv, "exp1").y[-1] > 0


def test_ancre_heatmap_is_log10_p_with_the_upper_triangle_masked(seeded, rows):
    row = next(r for r in rows["exp1"] if r.residual == "ancre" and r.status == "completed" and r.n_layers == 4)
    with Store(seeded) as store:
        p = store.diagnostics(row.id)["ancre_p"]
    heat = ancre_heatmap(p).data[0]
    assert np.shape(heat.z) == (4, 5)  # into j = 1..4 down, from i = 0..4 across
    for j in range(1, 5):
        for i in range(5):
            value = heat.z[j - 1][i]
            assert (value is None) == (i >= j)
            if value is not None:
                assert value == pytest.approx(math.log10(p[i][j - 1]))
    fig = ancre_heatmap(p)
    assert fig.layout.xaxis.title.text.startswith("from i") and fig.layout.yaxis.title.text == "into j"


def test_trial_diagnostics_figures(seeded, rows):
    nag = next(r for r in rows["exp1"] if r.number == 1)
    with Store(seeded) as store:
        diag, curve = store.diagnostics(nag.id), store.curve(nag.id)
    fig = nag_figure(diag)
    assert list(fig.data[0].x[:3]) == ["attn1", "mlp1", "attn2"] and len(fig.data[0].x) == 12
    assert fig.data[0].y[0] == pytest.approx(math.degrees(diag["nag_angle"][0]))
    skips = skip_rate_figure(diag, target=0.25)
    assert list(skips.data[0].x) == ["attn2", "mlp2", "attn4", "mlp4", "attn6", "mlp6"]
    assert residual_norm_figure(diag).data[0].y == tuple(diag["residual_rms"])
    loss = loss_curve_figure(curve)
    val = next(t for t in loss.data if t.name == "val loss")
    assert len(val.x) == sum(p["val_loss"] is not None for p in curve) and val.y[-1] == pytest.approx(1.95)


def test_width_figure_and_trend(seeded, rows):
    with Store(seeded) as store:
        pairs = [(r, store.width(r.id)) for r in rows["exp1"] if r.status == "completed"]
    fig = width_figure(pairs)
    d_align, p_hat = fig.data[0], fig.data[1]
    assert list(d_align.x) == [w["d_model"] for _, w in pairs] and list(p_hat.y) == [w["p_hat_8_8"] for _, w in pairs]
    assert d_align.xaxis != p_hat.xaxis  # two subplots
    assert width_trend(pairs) == pytest.approx(0.8)  # d_align ~ d_model^0.8 in the seed


def test_trials_frame_is_flat_and_sorted(rows):
    frame = trials_frame(rows["exp1"])
    assert len(frame) == len(EXP1) and list(frame["number"]) == list(range(len(EXP1)))
    assert frame["on_front"].sum() == 5 and frame.loc[1, "lr"] == pytest.approx(3e-3)
    assert {"residual", "status", "mod_rate", "val_loss", "executed_flops_per_token", "mlp_ratio"} <= set(frame)
    assert frame.loc[9, "failure_reason"] == "RuntimeError: worker died" and frame.loc[9, "attempt"] == 1


# ---- the app ---------------------------------------------------------------------------------


@pytest.fixture
def app(seeded, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("RESNAS_STORAGE", seeded)
    at = AppTest.from_file(str(APP), default_timeout=60)
    return at.run()


def _goto(at, page: str):
    at.sidebar.radio(key="page").set_value(page).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_app_searches_page_lists_both_searches_with_counts(app):
    assert not app.exception, [e.message for e in app.exception]
    table = app.dataframe[0].value.set_index("search")
    assert list(table.index) == ["exp1", "exp2"]
    assert table.loc["exp1", ["done", "failed", "running", "completed"]].tolist() == [9, 1, 1, 7]
    assert table.loc["exp2", ["done", "failed", "running"]].tolist() == [3, 1, 0]
    assert table.loc["exp1", "best_val_loss"] == pytest.approx(1.95) and table.loc["exp1", "hypervolume"] > 0
    assert table.loc["exp1", "trial_flops"] == 2e12


def test_app_pareto_and_width_pages(app, rows):
    at = _goto(app, "Pareto front")
    assert len(at.get("plotly_chart")) == 2
    assert len(at.dataframe[0].value) == len(_brute_force_front(rows["exp2"]))  # the newest search by default
    at.multiselect(key="pareto_searches").set_value(["exp1", "exp2"]).run()
    at.toggle(key="pareto_infeasible").set_value(True).run()
    assert not at.exception, [e.message for e in at.exception]
    assert len(at.dataframe[0].value) == 5 + len(_brute_force_front(rows["exp2"]))
    at = _goto(at, "Width view")
    assert len(at.get("plotly_chart")) == 1 and len(at.dataframe[0].value) == 10
    assert any("wider model is supported" in m.value for m in at.markdown)


def test_app_trial_detail_for_each_kind_of_trial(app):
    at = _goto(app, "Trial detail")
    at.selectbox(key="detail_search").set_value("exp1").run()
    for number, charts in ((2, 4), (1, 4), (0, 2), (7, 0), (9, 0), (10, 0)):  # ancre, nag, dense cascaded, ...
        at.selectbox(key="detail_trial").set_value(number).run()
        assert not at.exception, (number, [e.message for e in at.exception])
        assert len(at.get("plotly_chart")) == charts, number
    at.selectbox(key="detail_trial").set_value(9).run()
    assert "worker died" in at.error[0].value and any("OOM" in c.value for c in at.caption)
    at.selectbox(key="detail_trial").set_value(2).run()
    assert len(at.tabs) == 3 and len(at.dataframe) == 1  # ANCRe, skip rates, residual norms; the certificate


def test_app_trial_table_filters_sorts_and_exports(app):
    at = _goto(app, "Trial table")
    at.selectbox(key="table_search").set_value("exp1").run()
    assert len(at.dataframe[0].value) == len(EXP1)
    at.multiselect(key="table_status").set_value(["completed"]).run()
    assert len(at.dataframe[0].value) == 7
    at.multiselect(key="table_residual").set_value(["nag"]).run()
    at.selectbox(key="table_sort").set_value("val_loss").run()
    table = at.dataframe[0].value
    assert list(table["number"]) == [1, 4] and not at.exception


def test_app_export_page_and_the_store_is_never_written(app, seeded):
    from dashboard.export import export_bundle
    from nas.export import export_file_name

    before = _dump(seeded)
    at = _goto(app, "Export")
    at.selectbox(key="export_search").set_value("exp1").run()
    assert sorted(at.multiselect(key="export_trials:exp1").value) == [0, 1, 2, 3, 4]  # the front by default
    at.button(key="export_build").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]  # "export failed: ..." would be an error box
    assert len(at.get("download_button")) == 1
    with Store(seeded) as store, zipfile.ZipFile(io.BytesIO(export_bundle(store, "exp1", [1, 2]))) as bundle:
        names = bundle.namelist()
    assert len(names) == 2 and all(n.endswith(".yaml") for n in names)
    assert names == sorted(export_file_name("exp1", n) for n in (1, 2))
    for page in ("Searches", "Pareto front", "Trial detail", "Width view", "Trial table"):
        _goto(at, page)
    assert _dump(seeded) == before


def _dump(url: str) -> list[str]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        return list(db.iterdump())


def test_app_reports_a_missing_store_without_creating_it(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from dashboard.data import storage_url

    missing = tmp_path / "nothing.db"
    monkeypatch.setenv("RESNAS_STORAGE", f"sqlite:///{missing}")
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception and "no store at" in at.error[0].value and not missing.exists()
    assert storage_url(["--storage", "sqlite:///a.db"], {"RESNAS_STORAGE": "sqlite:///b.db"}) == "sqlite:///a.db"
    assert storage_url([], {"RESNAS_STORAGE": "sqlite:///b.db"}) == "sqlite:///b.db"
    assert storage_url([], {}, cwd=tmp_path) == default_url(tmp_path)
