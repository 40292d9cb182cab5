"""The `nas` command line: one small function per command, whose docstring is its help."""

from __future__ import annotations

import logging

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Architecture search over residual topologies and depth sparsity.")


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages.")) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")


@app.command()
def demo(
    steps: int = typer.Option(40, min=1, max=100_000, help="AdamW steps per variant."),
    batch: int = typer.Option(8, min=1, max=4096, help="Sequences per step."),
    seed: int = typer.Option(0, help="Seed for weights and batches."),
) -> None:
    """Build each residual family, print its parameters and FLOPs, and train it a few steps."""
    from .demo import run_demo

    run_demo(steps=steps, batch=batch, seed=seed)


if __name__ == "__main__":
    app()
