"""`nas families`: build each residual family, print its size and FLOPs, train it a few steps.

A quick tour before a search: the families side by side at one size, trained with the same
seed, the same batches and the same number of steps on the shipped corpus.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from search_spaces.residual_lm import ArchConfig, build_model, count_parameters, flavour, flops_per_token
from workers import byte_tokens, read_shipped_texts

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
    first_loss: float
    last_loss: float
    tokens_per_s: float


def sample_batch(
    data: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of the byte stream: inputs (B, T) and next-byte targets (B, T)."""
    starts = torch.randint(0, data.numel() - seq_len - 1, (batch,), generator=gen)
    window = torch.stack([data[s : s + seq_len + 1] for s in starts.tolist()])
    return window[:, :-1], window[:, 1:]


def train_briefly(cfg: ArchConfig, data: torch.Tensor, steps: int, batch: int, seed: int) -> DemoRow:
    torch.manual_seed(seed)
    model = build_model(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    losses, start = [], time.perf_counter()
    for _ in range(steps):
        x, y = sample_batch(data, batch, cfg.seq_len, gen)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    elapsed = time.perf_counter() - start
    fpt = flops_per_token(cfg)
    name = cfg.residual + (f"+mod{cfg.mod_rate}" if cfg.mod_rate else "")
    return DemoRow(
        name,
        count_parameters(model),
        fpt.nominal,
        model.last_executed_flops_per_token(),
        losses[0],
        sum(losses[-5:]) / min(5, len(losses)),
        steps * batch * cfg.seq_len / elapsed,
    )


def run_families(steps: int = 40, batch: int = 8, seed: int = 0, console: Console | None = None) -> list[DemoRow]:
    """Train every demo variant for `steps` steps and print a comparison table."""
    console = console or Console()
    data = byte_tokens(read_shipped_texts())
    console.print(f"corpus: shipped Shakespeare, {data.numel():,} bytes")
    rows = []
    for variant in DEMO_VARIANTS:
        cfg = flavour("bench", n_layers=4, d_model=96, n_heads=4, seq_len=64, **variant)
        with console.status(f"training {variant} for {steps} steps"):
            rows.append(train_briefly(cfg, data, steps, batch, seed))
    table = Table(
        title=f"residual_lm families, {steps} AdamW steps of {batch}x64 bytes",
        caption="FLOPs/tok: nominal forward FLOPs per token; executed: what the last forward pass ran",
    )
    for col in ("variant", "params", "FLOPs/tok", "executed", "loss@1", f"loss@{steps}", "tok/s"):
        table.add_column(col, justify="right", no_wrap=True, min_width=16 if col == "variant" else None)
    for r in rows:
        table.add_row(
            r.name,
            f"{r.params:,}",
            f"{r.nominal_flops:,.0f}",
            f"{r.executed_flops:,.0f}",
            f"{r.first_loss:.3f}",
            f"{r.last_loss:.3f}",
            f"{r.tokens_per_s:,.0f}",
        )
    console.print(table)
    return rows
