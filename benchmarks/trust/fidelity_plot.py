"""`make fidelity`'s figure: per corpus, the answer at T against the truth; the Kendall tau of every layout and
ranking without a search; and each ranking apart from size (architecture tau, decision accuracy at matched cost)
beside the size rules and the ceilings of a perfect predictor against the mean of the truth's seeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot(result: dict, path: Path, default_layout: str, goals: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    corpora = result["corpora"]
    fig, axes = plt.subplots(len(corpora), 3, figsize=(19, 5.2 * len(corpora)), squeeze=False)
    for (name, c), (left, middle, right) in zip(corpora.items(), axes, strict=True):
        answer = c["replica_ladder"]["layouts"][default_layout]["table_order"]
        truth = {int(k): v for k, v in c["truth_per_config"].items()}
        predicted = {int(k): v for k, v in answer["predicted"].items()}
        left.scatter(*zip(*[(truth[k], predicted[k]) for k in sorted(truth)], strict=True))
        left.set(xlabel="true loss at T (nats/token, mean of 2 seeds)", ylabel="answer at T (nats/token)",
                 title=f"{name}: {default_layout}, tau {answer['kendall_tau']:.2f}")  # fmt: skip
        taus = {f"answer, {k}": v["table_order"]["kendall_tau"] for k, v in c["replica_ladder"]["layouts"].items()}
        taus |= {k: v["kendall_tau"] for k, v in c["replica_ladder"]["baselines_at_default_layout"].items()}
        if "budget_ladder" in c:
            budget_ladder = c["budget_ladder"]["as_a_search_runs_it"]["table_order"]
            taus["budget ladder, as a search runs it"] = budget_ladder["kendall_tau"]
        if "before" in c:
            taus["before: head count kept, 2 rungs at eta 2"] = c["before"]["table_order"]["kendall_tau"]
        middle.barh(list(taus), [np.nan if v is None else v for v in taus.values()])
        middle.axvline(goals["kendall_tau"], color="k", ls="--", lw=1)
        if c["truth"]["tau_ceiling"] is not None:
            middle.axvline(c["truth"]["tau_ceiling"], color="tab:red", ls=":", lw=1.5)
        middle.set(xlabel="Kendall tau-b vs the truth (goal dashed; noise ceiling red dotted)",
                   title=f"{name}: rank agreement")  # fmt: skip
        middle.tick_params(axis="y", labelsize=7)
        _apart_from_size(right, name, c["architecture"])
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _apart_from_size(ax, name: str, section: dict) -> None:
    """Architecture tau and decision accuracy of each view, the size rules' tau, the truth's ceilings."""
    views = {k: v for k, v in section["views"].items() if ", arrival order " not in k}
    labels = list(views)
    y = np.arange(len(labels))
    arch = [np.nan if v["architecture_tau"] is None else v["architecture_tau"] for v in views.values()]
    accuracy = [np.nan if v["decision_accuracy"] is None else v["decision_accuracy"] for v in views.values()]
    ax.barh(y - 0.2, arch, 0.4, label="architecture tau")
    ax.barh(y + 0.2, accuracy, 0.4, label="decision accuracy (matched cost)")
    ceiling = section["truth_ceilings"]
    mean = ceiling["for_the_seed_mean"]
    if mean["architecture_tau"] is not None:
        ax.axvline(
            mean["architecture_tau"], color="tab:blue", ls=":", lw=1.5, label="ceiling vs the seed mean: arch tau"
        )
    if mean["decision_accuracy"] is not None:
        ax.axvline(mean["decision_accuracy"], color="tab:orange", ls=":", lw=1.5, label="... decision accuracy")
    best_size = max(v["kendall_tau"] or -1 for v in section["size_baselines"].values())
    ax.axvline(best_size, color="k", ls="--", lw=1, label=f"best size rule's tau {best_size:.2f}")
    ax.set_yticks(y, [label[:48] for label in labels], fontsize=7)
    ax.set(xlabel="apart from size (resolvable contrasts: "
           f"{ceiling['resolvable_contrasts']['all']})", title=f"{name}: architecture, not size")  # fmt: skip
    ax.legend(fontsize=7, loc="lower right")
