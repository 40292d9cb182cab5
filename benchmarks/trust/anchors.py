"""The top rung's bias: measured across corpora as a prior, and whether anchors below T can measure it in a search.

    python -m benchmarks.trust.anchors                # every corpus's fidelity tables -> results/anchors.json
    python -m benchmarks.trust.anchors --write-prior  # and the method corpora's prior -> nas/answer/bias_prior.json

On each corpus of `make fidelity`, every config's top replica rung (T/10, seed 0, narrowed as a search narrows by
default) misses the truth at T by more than seed noise. With the size trend removed (`error_beyond_size`), its
error is regressed on the rung's narrowing distance s = ln(d_T / d_r) times [the family (cascaded the reference),
the target's aspect z = ln(depth / width)]: the bias per unit of s that `nas.answer.discrepancy` takes out.

- **The prior, held out in turn**: fitted on two corpora (the mean of their coefficients; beta's sd from how
  much they disagree) and read on the third, against the top rung alone. The prior a search uses is the one
  fitted on the method corpora (`METHOD_CORPORA`, `--write-prior`); the third corpus was chosen after it.
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
from benchmarks.trust import fidelity
from benchmarks.trust.architecture import architecture_grade, error_beyond_size, summary
from benchmarks.trust.grading import Truth, graded_rows, losses_at
from nas.answer.decisions import Architecture
from nas.answer.discrepancy import PRIOR_FILE, Anchor, BiasPrior, aspect, choose_anchors, fit_discrepancy
from nas.answer.extrapolate import RungPoint, seed_noise

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
OUT = HERE / "results" / "anchors.json"
PRIOR_OUT = HERE.parent / "nas" / "answer" / PRIOR_FILE
METHOD_CORPORA = ("plays", "code")  # the corpora every method and constant was chosen on
FAMILIES = ("nag", "ancre")  # offsets against cascaded
ANCHOR_COUNTS = (2, 4)


class Corpus:
    """One corpus's truth, top rung (seed 0), anchor runs where built, architectures and the rung's seed noise."""

    def __init__(self, name: str):
        corpus = fidelity.CORPORA[name]
        rows, replica = graded_rows(read_table(corpus.runs), read_table(corpus.replica_runs))
        anchors = read_table(corpus.anchor_runs) if corpus.anchor_runs.exists() else []
        self.name, self.truth = name, Truth.of(rows)
        self.archs: dict[int, Architecture] = fidelity.architectures(rows, name)
        top = fidelity.REPLICA_TOP_SHARE * self.truth.target
        self.top = losses_at(replica, top)
        self.top_s = {r["config"]: math.log(r["d_model"] / r["replica_d_model"]) for r in replica if r["seed"] == 0}
        self.anchor = {r["config"]: r for r in anchors}
        if not set(self.top) <= set(self.anchor):  # a table still being built: no anchors yet
            self.anchor = {}
        points = [RungPoint(r["config"], "-", r["budget_flops"], r["val_loss"], r["seed"]) for r in replica]
        self.noise = seed_noise(points)
        self.aspects = {c: aspect(a.n_layers, a.d_model) for c, a in self.archs.items() if c in self.top}

    def design(self, configs: Sequence[int]) -> np.ndarray:
        """Per config: 1, then s times [nag, ancre, z]."""
        a, s = self.archs, self.top_s
        return np.array([[1.0, *(s[c] * float(a[c].residual == f) for f in FAMILIES), s[c] * self.aspects[c]]
                         for c in configs])  # fmt: skip

    def coefficients(self, predicted: Mapping[int, float] | None = None) -> dict:
        """The error of `predicted` (default: the top rung) beyond size, regressed on `design`: family offsets and
        beta per unit of s."""
        residual = error_beyond_size(predicted or self.top, self.truth)
        configs = sorted(residual)
        design, y = self.design(configs), np.array([residual[c] for c in configs])
        coef = np.linalg.lstsq(design, y, rcond=None)[0]
        misfit = float(np.std(y - design @ coef, ddof=design.shape[1]))
        return {"family": dict(zip(FAMILIES, map(float, coef[1:3]), strict=True)), "beta": float(coef[3]),
                "misfit": misfit}  # fmt: skip

    def corrected(self, prior: BiasPrior, anchors: Sequence[int] = (), at_target: bool = False) -> dict[int, float]:
        """The top rung with the discrepancy of `prior` moved by `anchors` taken out."""
        points = [self.anchor_of(c, at_target) for c in anchors]
        centre = float(np.mean(list(self.aspects.values())))
        fit = fit_discrepancy(points, self.noise or 0.02, prior, centre)
        return {c: x + fit.correction(self.aspects[c], self.archs[c].residual, self.top_s[c])[0]
                for c, x in self.top.items()}  # fmt: skip

    def anchor_of(self, config: int, at_target: bool) -> Anchor:
        a = self.archs[config]
        if at_target:  # a pretraining run: the truth's seed 0, at the target's width
            loss, width = self.truth.runs[config][0], a.d_model
        else:
            loss, width = self.anchor[config]["val_loss"], self.anchor[config]["replica_d_model"]
        return Anchor(config, self.aspects[config], self.top[config], loss, self.top_s[config],
                      math.log(a.d_model / width), a.residual)  # fmt: skip

    def grade(self, predicted: Mapping[int, float]) -> dict:
        return summary(architecture_grade(predicted, self.truth, self.archs))


def fit_prior(corpora: Sequence[Corpus]) -> BiasPrior:
    """The mean of the corpora's coefficients; beta's sd the spread of their betas (at least a quarter of the
    mean's magnitude, so that one corpus's estimate is never taken as exact)."""
    coefs = [c.coefficients() for c in corpora]
    betas = [k["beta"] for k in coefs]
    beta = float(np.mean(betas))
    spread = float(np.std(betas, ddof=1)) if len(betas) > 1 else abs(beta)
    family = {f: float(np.mean([k["family"][f] for k in coefs])) for f in FAMILIES}
    source = " + ".join(c.name for c in corpora)
    misfit = float(np.sqrt(np.mean([k["misfit"] ** 2 for k in coefs])))
    return BiasPrior(beta, max(spread, abs(beta) / 4, 1e-3), family, source, misfit)


def held_out(loaded: Mapping[str, Corpus]) -> dict:
    """Per corpus: the top rung alone, and the prior fitted on the others (then moved by anchors) read on it."""
    out = {}
    for name, corpus in loaded.items():
        others = [c for n, c in loaded.items() if n != name]
        prior = fit_prior(others)
        views = {
            "top rung alone (T/10, seed 0)": corpus.grade(corpus.top),
            "top rung, the prior of the other corpora taken out": corpus.grade(corpus.corrected(prior)),
        }
        for k in ANCHOR_COUNTS:
            chosen = choose_anchors(corpus.aspects, corpus.top, k)
            views[f"+ {k} anchors at T itself (pretraining runs)"] = corpus.grade(corpus.corrected(prior, chosen, True))
            if corpus.anchor:
                views[f"+ {k} anchors at T/3 (the target's width, a third of its tokens)"] = corpus.grade(
                    corpus.corrected(prior, chosen)
                )
        out[name] = {"prior_from": prior.source, "prior": _as_dict(prior), "views": views}
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
        "top_rung_error": slopes(corpus.top),
        "anchor_alone": corpus.grade(at_anchor),
        "anchor_width_share": {"min": min(widths), "median": float(np.median(widths)), "max": max(widths)},
    }


def _as_dict(prior: BiasPrior) -> dict:
    return {"beta": prior.beta, "beta_sd": prior.beta_sd, "family": dict(prior.family), "source": prior.source,
            "misfit": prior.misfit}  # fmt: skip


def report(names: Sequence[str], out: Path) -> dict:
    loaded = {n: Corpus(n) for n in names}
    method = [loaded[n] for n in METHOD_CORPORA if n in loaded]
    result = {
        "prior": _as_dict(fit_prior(method)),
        "per_corpus_coefficients": {n: c.coefficients() for n, c in loaded.items()},
        "held_out": held_out(loaded),
        "anchors_at_t3": {n: anchor_bias(c) for n, c in loaded.items()},
        "machine": machine_info(),
    }
    write_json(out, result)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--corpus", choices=sorted(fidelity.CORPORA), action="append", help="default: every corpus")
    parser.add_argument("--write-prior", action="store_true", help=f"write the method corpora's prior to {PRIOR_OUT}")
    args = parser.parse_args()
    result = report(args.corpus or list(fidelity.CORPORA), args.out)
    if args.write_prior:
        PRIOR_OUT.write_text(json.dumps(result["prior"], indent=2) + "\n")
    print(json.dumps({n: {v: g["architecture_tau"] for v, g in h["views"].items()}
                      for n, h in result["held_out"].items()}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
