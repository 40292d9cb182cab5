"""`nas families`: build each residual family, print its size and FLOPs, train it a few steps.

A quick tour before a search: the families side by side at one size, each trained by the project's iso-FLOP
trainer (`workers.training.train`, the optimiser and schedule a search's runs follow) for the same number of steps
of the same batches from the same seed, on the shipped corpus.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from search_spaces.residual_lm import ArchConfig, count_parameters, flavour, flops_per_token, training_flops
from workers.data.config import DataConfig
from workers.data.corpus import TokenizedCorpus, load_corpus
from workers.training.config import OptimConfig, RunConfig
from workers.training.train import train

DEMO_VARIANTS = [
    {"residual": "cascaded"},
    {"residual": "ancre"},
    {"residual": "nag"},
    {"residual": "cascaded", "mod_rate": 0.25},
    {"residual": "nag", "mod_rate": 0.25},
]


@dataclass
class DemoRow:
    name: str
    params: int
    nominal_flops: float
    executed_flops: float
    first_loss: float  # the training loss of the first step
    val_loss: float  # the held-out loss after the last step
    tokens_per_s: float  # inside the training steps


def train_briefly(cfg: ArchConfig, corpus: TokenizedCorpus, steps: int, batch: int, seed: int) -> DemoRow:
    """`steps` steps of `batch` sequences: the iso-FLOP budget of that many tokens, by the project's trainer."""
    run = RunConfig(batch_size=batch, evals=1, report_every=1)
    budget = training_flops(cfg, steps * batch * cfg.seq_len)
    outcome = train(cfg, budget, corpus, optim=OptimConfig(), run=run, seed=seed)
    state, fpt = outcome.state, flops_per_token(cfg)
    name = cfg.residual + (f"+mod{cfg.mod_rate}" if cfg.mod_rate else "")
    return DemoRow(
        name,
        count_parameters(outcome.model),
        fpt.nominal,
        outcome.model.last_executed_flops_per_token(),
        state.curve[0].train_loss,
        state.val_loss,
        state.tokens_seen / state.step_seconds if state.step_seconds > 0 else 0.0,
    )


def run_families(steps: int = 40, batch: int = 8, seed: int = 0, console: Console | None = None) -> list[DemoRow]:
    """Train every demo variant for `steps` steps and print a comparison table."""
    console = console or Console()
    corpus = load_corpus(DataConfig())
    console.print(f"corpus: shipped Shakespeare, {corpus.train.numel():,} training bytes")
    rows = []
    for variant in DEMO_VARIANTS:
        cfg = flavour("bench", n_layers=4, d_model=96, n_heads=4, seq_len=64, **variant)
        with console.status(f"training {variant} for {steps} steps"):
            rows.append(train_briefly(cfg, corpus, steps, batch, seed))
    table = Table(
        title=f"residual_lm families, {steps} steps of {batch}x64 bytes (the search's trainer and schedule)",
        caption="FLOPs/tok: nominal forward FLOPs per token; executed: what the last forward pass ran",
    )
    for col in ("variant", "params", "FLOPs/tok", "executed", "loss@1", f"val loss@{steps}", "tok/s"):
        table.add_column(col, justify="right", no_wrap=True, min_width=16 if col == "variant" else None)
    for r in rows:
        table.add_row(
            r.name,
            f"{r.params:,}",
            f"{r.nominal_flops:,.0f}",
            f"{r.executed_flops:,.0f}",
            f"{r.first_loss:.3f}",
            f"{r.val_loss:.3f}",
            f"{r.tokens_per_s:,.0f}",
        )
    console.print(table)
    return rows
