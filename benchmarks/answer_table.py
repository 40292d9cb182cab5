"""The README's table of how far to trust the answer, read from `results/fidelity.json`, `anchors.json` and
`effects.json`: every figure in it comes from those files (`python -m benchmarks.index --write` rewrites it,
`--check` fails when it is stale).

It sits in the root README.md between `<!-- answer:start -->` and `<!-- answer:end -->`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

START, END = "<!-- answer:start -->", "<!-- answer:end -->"
HELD_OUT = "handbook"  # the corpus chosen after every method (benchmarks/corpora/handbook_corpus.py)

Cell = Callable[[Mapping[str, Any]], str]


def _get(data: Any, *path: Any) -> Any:
    for key in path:
        if not isinstance(data, Mapping) or key not in data:
            return None
        data = data[key]
    return data


def _num(value: Any, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def _pair(a: Any, b: Any, fmt: str, sep: str = " / ") -> str:
    return f"{_num(a, fmt)}{sep}{_num(b, fmt)}"


ROWS: tuple[tuple[str, Cell], ...] = (
    ("answer tau (table order / mean of 5 orders)",
     lambda h: _pair(h.get("kendall_tau"), h.get("kendall_tau_mean_over_orders"), "{:.2f}")),
    ("every config's top rung alone, seed 0 (tau)", lambda h: _num(h.get("top_rung_alone_kendall_tau"), "{:.2f}")),
    ("best size rule (tau)", lambda h: f"{_num(h.get('best_size_rule_kendall_tau'), '{:.2f}')} "
     f"({h.get('best_size_rule', 'n/a')})"),
    ("architecture tau / its ceiling against the seed mean",
     lambda h: _pair(h.get("architecture_tau"), h.get("architecture_tau_ceiling"), "{:.2f}")),
    ("top rung alone: architecture tau", lambda h: _num(h.get("top_rung_alone_architecture_tau"), "{:.2f}")),
    ("decisions right at matched cost (resolvable pairs)",
     lambda h: f"{_num(h.get('decision_accuracy'), '{:.0%}')} ± {_num(h.get('decision_accuracy_se'), '{:.0%}')} "
     f"({h.get('resolvable_contrasts', 'n/a')})"),
    ("regret, in the truth's seed noise (table order / mean of orders)",
     lambda h: _pair(h.get("regret_in_seed_noise"), h.get("regret_in_seed_noise_mean_over_orders"), "{:.1f}")),
    ("true best in the predicted top 3", lambda h: {True: "yes", False: "no", None: "n/a"}[
        h.get("true_best_in_predicted_top3")]),
    ("decisions right, every config's top rung alone", lambda h: _num(h.get("top_rung_alone_decision_accuracy"),
                                                                       "{:.0%}")),
    ("level at T: mean error / mean absolute error (nats)",
     lambda h: f"{_num(h.get('level_error_mean'), '{:+.3f}')} / {_num(h.get('level_error_mae'), '{:.3f}')}"),
    ("80% bands covering the truth (median half-width)",
     lambda h: f"{_num(h.get('band_coverage'), '{:.0%}')} ({_num(h.get('band_half_width'), '±{:.3f}')})"),
    ("80% bands about the corpus's level, config by config",
     lambda h: _num(h.get("band_coverage_about_the_level"), "{:.0%}")),
    ("resolved calls right at matched cost (calls)",
     lambda h: f"{_num(h.get('resolved_call_accuracy'), '{:.0%}')} ({h.get('resolved_calls', 'n/a')})"),
    ("share of the truth's resolvable pairs resolved right",
     lambda h: _num(h.get("resolved_share_of_truth_resolvable"), "{:.0%}")),
    ("compute, share of the truth's (level and repeats included)", lambda h: _num(h.get("compute_share"), "{:.1%}")),
    ("before (head count kept, 2 rungs at eta 2): tau / architecture tau",
     lambda h: _pair(_get(h, "before", "kendall_tau"), _get(h, "before", "architecture_tau"), "{:.2f}")),
)  # fmt: skip


def render(results: Path) -> str:
    """The Markdown table (module docstring), one column per corpus of fidelity.json."""
    fidelity = json.loads((results / "fidelity.json").read_text())
    headline = fidelity["summary"]["headline"]
    names = list(headline)
    header = ["", *(f"{n} (held out)" if n == HELD_OUT else n for n in names)]
    lines = [
        "_From `benchmarks/results/fidelity.json` (`make fidelity`), rewritten by `python -m benchmarks.index "
        "--write`._",
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]
    for label, value in ROWS:
        lines.append("| " + " | ".join([label, *(value(headline[n]) for n in names)]) + " |")
    return "\n".join(lines)
