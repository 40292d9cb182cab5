"""`nas export` on a real SQLite store holding real (tiny) proxy trials: files, round trips, errors.

The store is filled the way a search fills it: `start_trial` with the sampled config, then
`finish_trial` with the `TrialResult` of a real `run_trial` (whose arch/optim replace the
config's). The Pareto front is recomputed here by brute force, not with `nas.answer.pareto`.
"""

import json
import math

import pytest
import yaml

from nas.export import export_configs, export_file_name
from nas.store import Store, StoreError, UnknownSearch
from search_spaces.residual_lm import ArchConfig, flops_per_token
from workers.data.config import DataConfig
from workers.data.corpus import load_corpus
from workers.pretrain.export_format import ExportedConfig, ExportError, load_exported
from workers.training.config import OptimConfig, RunConfig
from workers.trial.run import run_trial

BUDGET = 3e9
RUN = RunConfig(batch_size=4, eval_sequences=16, evals=2)
TINY = dict(vocab_size=256, seq_len=32, n_heads=2, mod_every=1)
TRIALS = [  # (number, arch overrides, optimiser): ANCRe with MoD, plain, cheaper, bigger, cheapest at a poor LR
    (0, dict(n_layers=2, d_model=32, residual="ancre", mod_rate=0.25), OptimConfig(lr=3e-3)),
    (1, dict(n_layers=2, d_model=32, residual="cascaded"), OptimConfig(lr=3e-3)),
    (2, dict(n_layers=1, d_model=32, residual="cascaded"), OptimConfig(lr=5e-3)),
    (3, dict(n_layers=2, d_model=64, residual="ancre", mod_rate=0.5), OptimConfig(lr=2e-3)),
    (4, dict(n_layers=1, d_model=16, residual="cascaded"), OptimConfig(lr=3e-4)),
]
INFEASIBLE, RUNNING = 5, 6


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Search "s": five completed real trials, one infeasible (real), one still running."""
    tmp = tmp_path_factory.mktemp("export")
    corpus = load_corpus(DataConfig(cache_dir=str(tmp / "cache")))
    st = Store(f"sqlite:///{tmp}/r.db")
    st.create_search(
        "s",
        requested_trials=7,
        budget={"trial_flops": BUDGET},
        space={"family": "residual_lm", "fixed": {"vocab_size": 256, "seq_len": 32, "batch_size": 4}, "params": {}},
        settings={"sampler": "tpe"},
        optuna_study_name=None,
        code_version="test-version",
    )
    for number, arch, optim in TRIALS:
        cfg = ArchConfig(**TINY, **arch)
        tid = st.start_trial("s", number=number, config={**arch, "lr": optim.lr, "optuna_number": number})
        result = run_trial(cfg, BUDGET, corpus, seed=0, optim=optim, run=RUN, width_probe=False)
        assert result.status == "completed", result.failure_reason
        st.finish_trial(tid, result)
    cfg = ArchConfig(**TINY, n_layers=2, d_model=32)
    tid = st.start_trial("s", number=INFEASIBLE, config={"n_layers": 2})
    st.finish_trial(tid, run_trial(cfg, 10.0, corpus, run=RUN))
    st.start_trial("s", number=RUNNING, config={"n_layers": 3})
    yield st
    st.close()


def brute_force_front(rows) -> set[int]:
    done = [r for r in rows if r.status == "completed"]
    pts = {r.number: (r.val_loss, r.executed_flops_per_token) for r in done}
    return {
        n
        for n, (loss, f) in pts.items()
        if not any(l2 <= loss and f2 <= f and (l2, f2) != (loss, f) for m, (l2, f2) in pts.items() if m != n)
    }


@pytest.fixture(scope="module")
def pareto_export(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("pareto") / "best"
    return out, export_configs(store, "s", out, pareto=True)


def rows_by_number(store):
    return {r.number: r for r in store.trials("s")}


def test_pareto_export_writes_exactly_the_front(store, pareto_export):
    out, paths = pareto_export
    front = brute_force_front(store.trials("s"))
    assert len(front) >= 2 and front != {n for n, *_ in TRIALS}  # a real front, and dominated trials
    assert sorted(p.name for p in paths) == sorted(export_file_name("s", n) for n in front)
    assert sorted(p.name for p in out.iterdir()) == sorted([*(p.name for p in paths), "index.json"])
    index = json.loads((out / "index.json").read_text())
    rows = rows_by_number(store)
    assert index["search"] == "s" and {c["trial"] for c in index["configs"]} == front
    for entry in index["configs"]:
        row = rows[entry["trial"]]
        assert entry["file"] == export_file_name("s", row.number)
        assert entry["val_loss"] == row.val_loss
        assert entry["executed_flops_per_token"] == row.executed_flops_per_token
    flops = [c["executed_flops_per_token"] for c in index["configs"]]
    assert flops == sorted(flops)


def test_yaml_round_trips_to_the_trial_that_ran(store, pareto_export, tmp_path):
    _, paths = pareto_export
    paths = [*paths, *export_configs(store, "s", tmp_path, trial=0)]  # and an ANCRe trial with MoD
    rows = rows_by_number(store)
    for path in paths:
        text = path.read_text()
        assert text.startswith("# resnas export: search 's'")
        raw = yaml.safe_load(text)
        assert list(raw) == [
            "arch",
            "optim",
            "run",
            "ancre",
            "mod_thresholds",
            "recommended",
            "tokenizer",
            "provenance",
        ]
        exported = load_exported(path)
        row = rows[exported.provenance.trial]
        assert exported.arch == ArchConfig(**row.config["arch"])
        assert exported.optim == OptimConfig(**row.config["optim"])
        assert exported.run == {"batch_size": 4}  # from the space's fixed values; never precision/checkpoints
        diag = store.diagnostics(row.id)
        assert exported.mod_thresholds == ({k: v for k, v in diag["mod_threshold"].items() if v is not None} or None)
        if exported.arch.residual == "ancre":
            assert exported.ancre.p == diag["ancre_p"] and exported.ancre.freeze is False
            assert len(exported.ancre.p) == exported.arch.n_layers + 1 and exported.mod_thresholds
        else:
            assert exported.ancre is None
        # The search's target (1000 x its trial budget by default); no rungs stored, so no prediction.
        assert exported.recommended.target_flops == 1000 * BUDGET and exported.recommended.predicted_loss is None
        prov = exported.provenance
        assert (prov.search, prov.proxy_val_loss, prov.proxy_budget_flops, prov.tokens_seen, prov.code_version) == (
            "s",
            row.val_loss,
            BUDGET,
            row.tokens_seen,
            "test-version",
        )
        assert ExportedConfig.model_validate(yaml.safe_load(yaml.safe_dump(exported.to_yaml_dict()))) == exported


def test_recommended_tokens_follow_the_iso_flop_rule(store, tmp_path):
    one = load_exported(export_configs(store, "s", tmp_path / "a", trial=0, target_flops=1e12)[0])
    two = load_exported(export_configs(store, "s", tmp_path / "b", trial=0, target_flops=2e12)[0])
    executed = flops_per_token(one.arch).executed
    assert one.recommended.executed_flops_per_token == executed == rows_by_number(store)[0].executed_flops_per_token
    assert one.recommended.tokens == round(1e12 / (3 * executed))
    assert abs(two.recommended.tokens - 2 * one.recommended.tokens) <= 1
    assert one.recommended.target_flops == 1e12 and two.recommended.target_flops == 2e12


def test_freeze_ancre_marks_only_ancre_trials(store, tmp_path):
    frozen = load_exported(export_configs(store, "s", tmp_path / "one", trial=0, freeze_ancre=True)[0])
    assert frozen.ancre.freeze is True
    for path in export_configs(store, "s", tmp_path / "front", pareto=True, freeze_ancre=True):
        exported = load_exported(path)
        assert (exported.ancre is not None) == (exported.arch.residual == "ancre")
        assert exported.ancre is None or exported.ancre.freeze


@pytest.fixture
def good_yaml(store, tmp_path):
    return export_configs(store, "s", tmp_path / "src", trial=0, target_flops=1e12)[0].read_text()


@pytest.mark.parametrize(
    "edit, field",
    [
        (("mod_rate: 0.25", "mod_rate: 1.5"), "arch.mod_rate"),
        (("d_model: 32", "d_model: 30"), "arch"),  # 30 / 2 heads = 15: odd head_dim
        (("lr: 0.003", "lr: -1.0"), "optim.lr"),
        (("run:\n  batch_size: 4", "run:\n  batch_size: 0"), "run.batch_size"),
        (("run:\n  batch_size: 4", "run:\n  checkpoint_dir: /x"), "run.checkpoint_dir"),
        (("n_layers: 2", "n_layers: 3"), "ancre.p"),  # p no longer fits the architecture
        (("mod_thresholds:\n", "mod_thresholds:\n  attn1: 0.5\n"), "mod_thresholds.attn1"),  # block 1 is never routed
        (("  tokens: ", "  tokens: 7"), "recommended.tokens"),
        (("provenance:", "colour: blue\nprovenance:"), "colour"),
    ],
)
def test_tampered_file_gives_one_line_naming_the_field(good_yaml, tmp_path, edit, field):
    old, new = edit
    assert old in good_yaml
    path = tmp_path / "edited.yaml"
    path.write_text(good_yaml.replace(old, new, 1))
    with pytest.raises(ExportError) as err:
        load_exported(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and field in message, message


@pytest.mark.parametrize(
    "text, expected",
    [
        ("arch: [unclosed\n", "invalid YAML at line"),
        ("- just\n- a list\n", "expected a mapping"),
        ("", "expected a mapping"),
        ("optim:\n  lr: 0.01\n", "arch: Field required"),
    ],
)
def test_malformed_files_give_one_line(tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ExportError, match=expected) as err:
        load_exported(path)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"{path}: ")


def test_missing_file_and_minimal_hand_written_file(tmp_path):
    with pytest.raises(ExportError, match="missing.yaml: cannot read"):
        load_exported(tmp_path / "missing.yaml")
    path = tmp_path / "mine.yaml"
    path.write_text("arch:\n  n_layers: 2\n  mod_rate: 0.25\noptim:\n  lr: 1.0e-3\n")  # no provenance: still valid
    exported = load_exported(path)
    assert exported.arch == ArchConfig(n_layers=2, mod_rate=0.25) and exported.optim.lr == 1e-3


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(name="nope"), UnknownSearch, "'nope'"),
        (dict(trial=99), ExportError, "no trial 99"),
        (dict(trial=INFEASIBLE), ExportError, f"trial {INFEASIBLE} of search 's' is infeasible"),
        (dict(trial=RUNNING), ExportError, f"trial {RUNNING} of search 's' is running"),
        (dict(trial=1, freeze_ancre=True), ExportError, "not an ANCRe"),
        (dict(trial=0, target_flops=-1.0), ExportError, "--target-flops"),
        (dict(pareto=False), ExportError, "--pareto or --trial"),
    ],
)
def test_export_errors_name_the_problem_and_write_nothing(store, tmp_path, kwargs, error, words):
    out = tmp_path / "out"
    name = kwargs.pop("name", "s")
    with pytest.raises(error) as err:
        export_configs(store, name, out, **kwargs)
    assert words in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, (ValueError, StoreError))
    assert not out.exists()


def test_out_path_that_is_a_file_is_refused(store, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(ExportError, match="not a directory"):
        export_configs(store, "s", target, trial=0)
    assert target.read_text() == "x"


def test_infinite_or_missing_store_values_never_reach_the_file(store, pareto_export):
    _, paths = pareto_export
    for path in paths:
        raw = yaml.safe_load(path.read_text())
        values = [*raw["arch"].values(), *(raw["mod_thresholds"] or {}).values()]
        assert all(not isinstance(v, float) or math.isfinite(v) for v in values)


def test_the_export_carries_the_schedule_the_trials_ran_and_older_files_read_as_cosine(pareto_export, tmp_path):
    """The exported optim is what the trial ran: the search's schedule (wsd, cooldown 0.2 by default). A file
    written before the schedule was recorded names none: its proxies and pretraining ran a cosine."""
    _, paths = pareto_export
    loaded = [load_exported(p) for p in paths]
    assert all((e.optim.schedule, e.optim.cooldown) == ("wsd", 0.2) for e in loaded)
    raw = yaml.safe_load(paths[0].read_text())
    del raw["optim"]["schedule"]
    older = tmp_path / "older.yaml"
    older.write_text(yaml.safe_dump(raw))
    assert load_exported(older).optim.schedule == "cosine"


def test_each_export_carries_its_configs_counted_kv_bytes_and_decode_flops(pareto_export):
    """The YAML's provenance and index.json carry KV-cache bytes per token at the config's seq_len (its context)
    and decode FLOPs per token, exactly as `search_spaces.residual_lm.decode_cost` counts them."""
    from search_spaces.residual_lm.decode_cost import decode_cost, kv_cache_bytes

    out, paths = pareto_export
    index = {c["trial"]: c for c in json.loads((out / "index.json").read_text())["configs"]}
    for path in paths:
        exported = load_exported(path)
        arch, prov = exported.arch, exported.provenance
        assert prov.kv_context == arch.seq_len == 32
        assert prov.kv_bytes_per_token == kv_cache_bytes(arch, arch.seq_len) / arch.seq_len
        assert prov.decode_flops_per_token == decode_cost(arch, arch.seq_len).flops_per_token
        entry = index[prov.trial]
        assert (entry["kv_context"], entry["kv_bytes_per_token"]) == (prov.kv_context, prov.kv_bytes_per_token)
