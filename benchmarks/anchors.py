"""Anchors: which discrepancy model, how many anchors and how much shrinkage take the top rung's bias out best,
chosen on two corpora and read on the third.

    python -m benchmarks.anchors      # the fidelity tables of every corpus -> results/anchors.json

On each corpus of `make fidelity`, every config's top replica rung (T/10, seed 0, narrowed as a search narrows by
default) is corrected by the discrepancy `nas.answer.discrepancy` fits through `k` anchors chosen as a search
chooses them (`choose_anchors`, from the top rung's losses), each anchor the config's replica at T/3 (the fidelity
tables' anchor runs). Every combination of `GRID` (k; the rung distance, `width` ln(d_T / d_r) or `compute`
ln(T / C_r); the slope's prior sd) is graded against the truth (`benchmarks.architecture.architecture_grade`).
The method is chosen on two corpora (the highest mean architecture tau there, ties to the fewer anchors) and read
on the third: no choice sees the graded corpus's truth. Beside it: the top rung alone, the same anchors at T itself
(the truth's seed 0: what a user could only buy with pretraining runs), and the compute each view spends as a
share of the truth's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from benchmarks import fidelity
from benchmarks.architecture import architecture_grade, summary
from benchmarks.grading import Truth, graded_rows, losses_at
from benchmarks.harness import machine_info, read_table, write_json
from nas.answer.decisions import Architecture
from nas.answer.discrepancy import Anchor, aspect, choose_anchors, fit_discrepancy
from nas.answer.extrapolate import RungPoint, seed_noise

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "anchors.json"
GRID = {"anchors": (2, 3, 4), "distance": ("width", "compute"), "prior_sd": (0.02, 0.05, 0.1, 1.0)}


def _distance(kind: str, target: float, target_width: int, budget: float, width: int) -> float:
    return math.log(target_width / width) if kind == "width" else math.log(target / budget)


class Corpus:
    """One corpus's truth, top rung (both seeds), anchor runs and architectures."""

    def __init__(self, name: str):
        corpus = fidelity.CORPORA[name]
        rows, replica, anchors = graded_rows(
            read_table(corpus.runs), read_table(corpus.replica_runs), read_table(corpus.anchor_runs)
        )
        self.name, self.truth = name, Truth.of(rows)
        self.archs: dict[int, Architecture] = fidelity.architectures(rows, name)
        self.top_budget = fidelity.REPLICA_TOP_SHARE * self.truth.target
        self.top = {s: losses_at(replica, self.top_budget, s) for s in (0, 1)}
        self.top_width = {r["config"]: r["replica_d_model"] for r in replica if r["budget_flops"] == self.top_budget}
        self.anchor = {r["config"]: r for r in anchors}
        at_top = [r for r in replica if r["budget_flops"] == self.top_budget]
        self.noise = seed_noise(
            [RungPoint(r["config"], "-", r["budget_flops"], r["val_loss"], r["seed"]) for r in at_top]
        )
        self.aspects = {c: aspect(a.n_layers, a.d_model) for c, a in self.archs.items() if c in self.truth.runs}

    def anchor_of(self, config: int, kind: str, at_target: bool = False) -> Anchor:
        a, target = self.archs[config], self.truth.target
        top_s = _distance(kind, target, a.d_model, self.top_budget, self.top_width[config])
        if at_target:  # a pretraining run: the truth's seed 0
            return Anchor(config, self.aspects[config], self.top[0][config], self.truth.runs[config][0], top_s, 0.0)
        row = self.anchor[config]
        anchor_s = _distance(kind, target, a.d_model, row["budget_flops"], row["replica_d_model"])
        return Anchor(config, self.aspects[config], self.top[0][config], row["val_loss"], top_s, anchor_s)

    def corrected(self, k: int, kind: str, prior_sd: float, at_target: bool = False) -> tuple[dict[int, float], dict]:
        """The top rung (seed 0) with the discrepancy of `k` anchors taken out, and what it rests on."""
        chosen = choose_anchors(self.aspects, self.top[0], k)
        fit = fit_discrepancy([self.anchor_of(c, kind, at_target) for c in chosen], self.noise or 0.02, prior_sd)
        out = {}
        for c, loss in self.top[0].items():
            top_s = _distance(kind, self.truth.target, self.archs[c].d_model, self.top_budget, self.top_width[c])
            out[c] = loss + fit.correction(self.aspects[c], top_s)[0]
        spent = sum(self.anchor[c]["compute_flops"] if not at_target else self.truth.target for c in chosen)
        return out, {"anchors": chosen, "beta": fit.beta, "beta_sd": fit.slope_sd / fit.span if fit.span else None,
                     "compute_share": (self._top_compute() + spent) / self.truth.compute}  # fmt: skip

    def _top_compute(self) -> float:
        return len(self.top[0]) * self.top_budget

    def grade(self, predicted: Mapping[int, float]) -> dict:
        return architecture_grade(predicted, self.truth, self.archs)


def grid_report(corpus: Corpus) -> dict:
    """Every method of GRID on one corpus, graded, beside the top rung alone and anchors at T."""
    out = {"top rung alone (T/10, seed 0)": summary(corpus.grade(corpus.top[0])) | {
        "compute_share": corpus._top_compute() / corpus.truth.compute}}  # fmt: skip
    for k, kind, prior in itertools.product(*GRID.values()):
        predicted, facts = corpus.corrected(k, kind, prior)
        out[method_name(k, kind, prior)] = summary(corpus.grade(predicted)) | facts
    for k in GRID["anchors"]:
        predicted, facts = corpus.corrected(k, "width", 1.0, at_target=True)
        out[f"{k} anchors at T itself (pretraining runs), width"] = summary(corpus.grade(predicted)) | facts
    return out


def method_name(k: int, kind: str, prior_sd: float) -> str:
    return f"{k} anchors at T/3, {kind} distance, prior sd {prior_sd:g}"


def leave_one_out(graded: Mapping[str, Mapping[str, dict]]) -> dict:
    """Per held-out corpus: the method chosen on the others (highest mean architecture tau; fewer anchors first on a
    tie), its figures there and on the held-out corpus, beside the top rung alone."""
    methods = [method_name(*m) for m in itertools.product(*GRID.values())]
    out = {}
    for held in graded:
        others = [c for c in graded if c != held]
        chosen = max(methods, key=lambda m: np.mean([graded[c][m]["architecture_tau"] or -1.0 for c in others]))
        out[held] = {
            "chosen_on": others,
            "chosen": chosen,
            "on_the_others": {c: graded[c][chosen] for c in others},
            "held_out": graded[held][chosen],
            "top_rung_alone": graded[held]["top rung alone (T/10, seed 0)"],
        }
    return out


def report(names: Sequence[str], out: Path) -> dict:
    graded = {name: grid_report(Corpus(name)) for name in names}
    result = {"grid": GRID, "corpora": graded, "leave_one_corpus_out": leave_one_out(graded), "machine": machine_info()}
    write_json(out, result)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--corpus", choices=sorted(fidelity.CORPORA), action="append", help="default: every corpus")
    args = parser.parse_args()
    result = report(args.corpus or list(fidelity.CORPORA), args.out)
    print(json.dumps(result["leave_one_corpus_out"], indent=2))


if __name__ == "__main__":
    main()
