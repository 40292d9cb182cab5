"""The front at the target as a terminal table (`nas show`, and the end of `nas search` and `nas resume`).

`front_report` builds the table and the lines under it from the search's answer read from the store
(`nas.search_answer.SearchAnswer`, the same that the export and the dashboard read): one row per trial with its
architecture, the rungs it reached, its measured loss at its highest rung, its forecast loss at T with its 80% band
(where the search has no curve to carry its top rungs to T, the column is the top rung's loss with its bias taken
out, headed `CORRECTED`, and the table says so), the trials it is tied with (gaps within their margin in the error
model, `Answer.tied`) and its FLOPs per token. Under it: the predictor and bands, the hypervolume, and what the
answer rests on (`nas.answer.decisions.rests_on`: size against architecture, and the recommended config's
decisions at matched cost, resolved or tied). The compact table reads in 120 columns; `wide` adds the learning
rate, heads, the top replica, the held-out error, the seeds, the inference costs (KV-cache bytes and decode FLOPs
per token, counted at the config's seq_len: `nas.space.objectives`) and what each prediction rests on. The front
is non-dominated on the search's objectives (`loss,flops`, or `loss,flops,kv`).
"""

from __future__ import annotations

import math

from rich.table import Column, Table

from workers.status import TrialStatus

from ..answer.compute_curve import quote
from ..answer.target import Answer
from ..search_answer import SearchAnswer, search_answer
from ..space.budget import Budget
from ..space.objectives import DEFAULT_OBJECTIVES, inference_cost_of

__all__ = ["COMPACT_COLUMNS", "WIDE_COLUMNS", "format_flops", "format_loss", "front_report", "print_front"]

COMPACT_COLUMNS = ("trial", "arch", "mod", "rungs", "top-rung loss", "loss at T", "80% band", "tied with", "FLOPs/tok")
WIDE_COLUMNS = (
    "trial",
    "arch",
    "heads",
    "mod",
    "lr",
    "rungs",
    "top replica d, tok/param",
    "top-rung loss",
    "loss at T",
    "80% band",
    "held-out err",
    "seeds",
    "tied with",
    "FLOPs/tok",
    "KV bytes/tok @ctx",
    "decode FLOPs/tok",
    "predicted from",
)


CORRECTED = "corrected top rung"  # the ranked column's header where no curve carried the losses to T


def format_loss(x) -> str:
    return "-" if x is None else ("inf" if not math.isfinite(x) else f"{x:.4f}")


def format_flops(x) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x / 1e6:.2f}M"


def format_kv(row) -> str:
    """KV-cache bytes per token and the context they are counted at, e.g. `9.00K @128`."""
    cost = inference_cost_of(row)
    return "-" if cost is None else f"{cost.kv_bytes_per_token / 1e3:.2f}K @{cost.context}"


def _decode_flops(row) -> str:
    cost = inference_cost_of(row)
    return format_flops(None if cost is None else cost.decode_flops_per_token)


def _replica(rung) -> str:
    """A replica rung's width and tokens per parameter, `*` when it is off the target's path."""
    if rung is None:
        return "-"
    return f"{rung.d_model}, {rung.tokens_per_param:.3g}" + ("" if rung.on_path else "*")


def _bpb_per_nat(rows) -> dict[int, float]:
    """Bits per byte per nat of loss, trial by trial: val_bpb / val_loss of its held-out set (exact)."""
    return {
        r.number: r.val_bpb / r.val_loss
        for r in rows
        if r.val_loss and r.val_bpb is not None and math.isfinite(r.val_loss) and math.isfinite(r.val_bpb)
    }


def layout_lines(budget: Budget) -> list[str]:
    """Where the search spends its compute, a line each: the layout it chose and why, how its replicas narrow with
    the bias taken out and its anchors, its level at T, and what `make fidelity` measured at its share of T per
    trial (`nas.answer.compute_curve`)."""
    ladder = budget.ladder
    lines = [f"layout: {ladder.layout.reason}" if ladder.kind != "single" else "layout: one budget, no ladder"]
    if ladder.is_replica:
        bias = "the prior measured on the fidelity corpora" if budget.bias_prior == "measured" else "none"
        lines.append(
            f"replicas: {ladder.narrowing.describe()}; the top rung's bias taken out: {bias}; "
            f"anchors: {budget.anchor_plan().reason}"
        )
        lines.append(f"level: {budget.level_plan().reason}")
        lines.append(quote(ladder.top_flops / ladder.target_flops))
    return lines


def front_report(
    found: SearchAnswer, *, only_front: bool = True, bpb: bool = False, wide: bool = False, layout: bool = True
) -> tuple[Table, list[str]]:
    """(the table, the lines under it) of a search's answer `found`: its front at T, or with `only_front` False every
    completed trial; `bpb` shows losses in bits per byte (ties are still judged in nats); `layout` False leaves out
    the layout's lines (a search printed them before it trained)."""
    answer, rows = found.answer, found.rows
    shown = list(found.front) if only_front else [r for r in found.at_target if r.status == TrialStatus.COMPLETED]
    target = "-" if found.target is None else f"{found.target:.3g}"
    title = (
        f"{found.name}: {'Pareto front' if only_front else 'completed trials'} at the target, "
        f"T = {target} training FLOPs" + ("; losses in bits/byte" if bpb else "")
    )
    noise = answer.noise if answer is not None else None
    table = _table(title, shown, rows, found.rungs, answer, _bpb_per_nat(rows) if bpb else None, wide)
    lines = []
    if found.objectives != DEFAULT_OBJECTIVES:
        lines.append(f"objectives {','.join(map(str, found.objectives))}: KV bytes per token counted at each seq_len")
    if found.budget is not None and layout:
        lines += layout_lines(found.budget)
    if answer is not None and found.predictions:
        if not answer.at_target:
            taken = "with its bias taken out" if answer.discrepancy is not None else "as measured (no bias taken out)"
            lines.append(f"no loss at T: the table ranks by each top rung's loss {taken} ({CORRECTED})")
        elif answer.level is None:
            lines.append(
                f"{found.budget.ladder_kind if found.budget else 'unknown'} ladder; {answer.backtest.describe()}"
            )
            lines.append(answer.calibration.describe())
    if found.budget is not None and found.budget.beyond_validated:
        lines.append(f"[yellow]warning:[/] {found.budget.beyond_validated}")
    ref = found.reference
    lines.append(
        f"hypervolume at T {found.hypervolume:.4g} against the reference point "
        f"(loss {ref[0]:.4f} nats = ln {round(math.exp(ref[0]))}, executed FLOPs/token {ref[1]:.4g}); "
        f"{len(found.front)} on the front of {sum(r.status == TrialStatus.COMPLETED for r in rows)} completed, "
        f"{len(rows)} trial rows"
        + (f"; seed noise {noise:.4f} nats at a rung" if noise else "")
        + "; trials whose gap is within its margin (the error model's, in what the answer rests on) are tied"
    )
    return table, lines + list(found.rests_on)


def _table(title, shown, rows, rungs, answer: Answer | None, bpb_per_nat, wide: bool) -> Table:
    predictions = answer.predictions if answer is not None else {}
    measured = {r.number: r for r in rows}
    top_replica = {g.number: g for g in rungs if g.is_replica}  # rows come by rung: the last is the top
    seeds = {n: len({g.seed for g in rungs if g.number == n}) for n in predictions}
    # headers never wrap (a reader scans them, and so do scripts); the cells below them may
    stated = "loss at T" if answer is None or answer.at_target else CORRECTED  # what the ranked column holds
    columns = [stated if c == "loss at T" else c for c in (WIDE_COLUMNS if wide else COMPACT_COLUMNS)]
    table = Table(*(Column(c, min_width=len(c)) for c in columns), title=title)
    for r in shown:
        p = predictions.get(r.number)
        k = 1.0 if bpb_per_nat is None else bpb_per_nat.get(r.number, math.nan)
        ties = [
            str(o.number)
            for o in shown
            if o.number != r.number and answer is not None and answer.tied(r.number, o.number)
        ]
        at_t = p is not None and p.at_target
        if p is None or not at_t:
            band = "-"
        else:
            band = "uncalibrated" if p.low is None or p.high is None else f"{k * p.low:.4f}-{k * p.high:.4f}"
        cells = {
            "trial": str(r.number),
            "arch": f"{r.residual} {r.n_layers}x{r.d_model}",
            "heads": str(r.n_heads),
            "mod": f"{r.mod_rate:g}",
            "lr": f"{lr:.2e}" if (lr := r.config.get("lr")) else "-",
            "rungs": str(p.rungs) if p else "-",
            "top replica d, tok/param": _replica(top_replica.get(r.number)),
            "top-rung loss": format_loss(k * measured[r.number].val_loss),
            stated: format_loss(k * r.val_loss) if at_t or (p is not None and stated == CORRECTED) else "-",
            "80% band": band,
            "held-out err": f"{k * p.loo_error:+.3f}" if p and p.loo_error is not None else "-",
            "seeds": str(seeds.get(r.number, 1)),
            "tied with": ", ".join(ties) or "-",
            "FLOPs/tok": format_flops(r.executed_flops_per_token),
            "KV bytes/tok @ctx": format_kv(r),
            "decode FLOPs/tok": _decode_flops(r),
            "predicted from": f"{p.predictor}: {p.basis}" if p else "measured",
        }
        table.add_row(*(cells[c] for c in columns))
    return table


def print_front(
    console,
    store,
    name: str,
    only_front: bool = True,
    bpb: bool = False,
    wide: bool = False,
    wide_width: int = 220,
    layout: bool = True,
) -> None:
    """The front at the search's target budget on `console`, then the predictor, the bands and the hypervolume
    at T (`layout` False: without the layout's lines). Outside a terminal `wide` renders at `wide_width` columns,
    uncropped."""
    import sys

    table, lines = front_report(search_answer(store, name), only_front=only_front, bpb=bpb, wide=wide, layout=layout)
    if wide and not sys.stdout.isatty():  # not cropped to the console's 120 columns
        console.print(table, width=wide_width, crop=False)
    else:
        console.print(table)
    for line in lines:
        console.print(line)
