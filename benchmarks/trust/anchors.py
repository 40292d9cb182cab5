"""The top rung's bias: measured across corpora as a prior, and whether anchors below T can measure it in a search.

    python -m benchmarks.trust.anchors                # every corpus's fidelity tables -> results/anchors.json

On each corpus of `make fidelity`, every config's top replica rung (T/10, seed 0, narrowed as a search narrows by
default) misses the truth at T by more than seed noise. With the size trend removed (`error_beyond_size`), its
error is regressed on the rung's narrowing distance s = ln(d_T / d_r) times [the family (cascaded the reference),
the target's aspect z = ln(depth / width)]: the bias per unit of s that `nas.answer.discrepancy` takes out.

- **The prior, held out in turn**: fitted on two corpora (`benchmarks.trust.forecast_constants.fit_model`: the
  mean of their coefficients, their spread as the sd) and read on the third, against the top rung alone.
- **Anchors below T**: the same prior moved by `k` anchors (`choose_anchors`) measured at T/3, the replica a
  search's planner picks there (for these 2-head targets the target's own width, on a third of its tokens). And
  the cause of what they do: their own error's slope in z and in log-parameters beside the top rung's.
- **Anchors at T** (the truth's seed 0: pretraining runs, which a user could only allow with `--anchor-flops`),
  for reference.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from benchmarks.harness import machine_info, read_table, write_json
from benchmarks.trust import fidelity_tables
from benchmarks.trust.architecture import architecture_grade, summary
from benchmarks.trust.forecast_constants import CorpusTables, fit_model
from nas.answer.discrepancy import Anchor, BiasPrior, choose_anchors, fit_discrepancy
from nas.answer.error_model import model_from_dict

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
OUT = HERE / "results" / "anchors.json"
ANCHOR_COUNTS = (2, 4)


class Corpus(CorpusTables):
    """One corpus's tables (`CorpusTables`) with its anchor runs where built; its top rung as a search sees most
    configs there, seed 0."""

    def __post_init__(self) -> None:
        super().__post_init__()
        corpus = fidelity_tables.CORPORA[self.name]
        anchors = read_table(corpus.anchor_runs) if corpus.anchor_runs.exists() else []
        self.seed0 = {c: v[0] for c, v in self.top_runs.items() if 0 in v}
        self.anchor = {r["config"]: r for r in anchors}
        if not set(self.seed0) <= set(self.anchor):  # a table still being built: no anchors yet
            self.anchor = {}

    def corrected(self, prior: BiasPrior, anchors: Sequence[int] = (), at_target: bool = False) -> dict[int, float]:
        """The top rung (seed 0) with the discrepancy of `prior` moved by `anchors` taken out."""
        points = [self.anchor_of(c, at_target) for c in anchors]
        fit = fit_discrepancy(points, self.noise or 0.02, prior, self.centre)
        return {c: x + fit.correction(self.aspects[c], self.archs[c].residual, self.top_s[c])[0]
                for c, x in self.seed0.items()}  # fmt: skip

    def anchor_of(self, config: int, at_target: bool) -> Anchor:
        a = self.archs[config]
        if at_target:  # a pretraining run: the truth's seed 0, at the target's width
            loss, width = self.truth.runs[config][0], a.d_model
        else:
            loss, width = self.anchor[config]["val_loss"], self.anchor[config]["replica_d_model"]
        return Anchor(config, self.aspects[config], self.seed0[config], loss, self.top_s[config],
                      math.log(a.d_model / width), a.residual)  # fmt: skip

    def grade(self, predicted: Mapping[int, float]) -> dict:
        return summary(architecture_grade(predicted, self.truth, self.archs))


def held_out(loaded: Mapping[str, Corpus]) -> dict:
    """Per corpus: the top rung alone, and the prior fitted on the others (then moved by anchors) read on it."""
    out = {}
    for name, corpus in loaded.items():
        fitted = fit_model([c for n, c in loaded.items() if n != name], nested=False)
        prior = model_from_dict(fitted).bias
        views = {
            "top rung alone (T/10, seed 0)": corpus.grade(corpus.seed0),
            "top rung, the prior of the other corpora taken out": corpus.grade(corpus.corrected(prior)),
        }
        for k in ANCHOR_COUNTS:
            chosen = choose_anchors(corpus.aspects, corpus.seed0, k)
            views[f"+ {k} anchors at T itself (pretraining runs)"] = corpus.grade(corpus.corrected(prior, chosen, True))
            if corpus.anchor:
                views[f"+ {k} anchors at T/3 (the target's width, a third of its tokens)"] = corpus.grade(
                    corpus.corrected(prior, chosen)
                )
        out[name] = {"prior_from": prior.source, "prior": fitted["bias"], "views": views}
    return out


def anchor_bias(corpus: Corpus) -> dict | None:
    """Why the T/3 anchors help or not: the error of every config at T/3 against the truth, its slope in z and in
    ln(parameters) (size trend not removed), beside the top rung's."""
    if not corpus.anchor:
        return None
    configs = sorted(corpus.anchor)

    def slopes(predicted: Mapping[int, float]) -> dict:
        x = np.array([[1.0, corpus.aspects[c], math.log(corpus.truth.params[c])] for c in configs])
        y = np.array([predicted[c] - corpus.truth.loss[c] for c in configs])
        coef = np.linalg.lstsq(x, y, rcond=None)[0]
        return {"per_unit_of_z": float(coef[1]), "per_unit_of_ln_params": float(coef[2])}

    at_anchor = {c: corpus.anchor[c]["val_loss"] for c in configs}
    widths = [corpus.anchor[c]["replica_d_model"] / corpus.archs[c].d_model for c in configs]
    return {
        "anchor_error": slopes(at_anchor),
        "top_rung_error": slopes(corpus.seed0),
        "anchor_alone": corpus.grade(at_anchor),
        "anchor_width_share": {"min": min(widths), "median": float(np.median(widths)), "max": max(widths)},
    }


def report(names: Sequence[str], out: Path) -> dict:
    loaded = {n: Corpus(n) for n in names}
    result = {
        "per_corpus_coefficients": {n: c.coefficients for n, c in loaded.items()},
        "held_out": held_out(loaded),
        "anchors_at_t3": {n: anchor_bias(c) for n, c in loaded.items()},
        "machine": machine_info(),
    }
    write_json(out, result)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--corpus", choices=sorted(fidelity_tables.CORPORA), action="append", help="default: every corpus"
    )
    args = parser.parse_args()
    result = report(args.corpus or list(fidelity_tables.CORPORA), args.out)
    print(json.dumps({n: {v: g["architecture_tau"] for v, g in h["views"].items()}
                      for n, h in result["held_out"].items()}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
