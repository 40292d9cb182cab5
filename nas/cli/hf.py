"""The `nas` commands that take a pretrained run into the Hugging Face ecosystem: `convert`, `generate`,
`evaluate` (they need the `hf` extra), and the folder `nas pretrain` writes after a completed run.
Registered on the app by `nas.cli.commands`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from .inputs import console, fail

RUN_DIR_HELP = "A completed `nas pretrain` run folder (with final.pt), or a Hugging Face folder from `nas convert`."


def write_hf_folder(run_dir: Path) -> None:
    """After `nas pretrain`: the run's Hugging Face folder in run_dir/hf, or one line saying what it needs.
    Said on stderr: `nas pretrain`'s stdout is its summary, one JSON document."""
    from workers.release.convert import HF_FOLDER, HFExportError, convert

    try:
        typer.echo(f"Hugging Face folder: {convert(run_dir, run_dir / HF_FOLDER)}", err=True)
    except HFExportError as err:
        typer.echo(f"no Hugging Face folder written: {err}", err=True)


def convert(
    run_dir: Path = typer.Argument(..., help="A completed `nas pretrain` run folder (with final.pt)."),
    out: Path = typer.Argument(..., help="The Hugging Face folder to write."),
    tokenizer: Path | None = typer.Option(None, help="tokenizer.json to ship (default: the run's)."),
) -> None:
    """Write a pretrained run as a Hugging Face model folder (config.json, model.safetensors, tokenizer,
    modelling code): AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True) loads it."""
    from workers.release.convert import HFExportError
    from workers.release.convert import convert as convert_run

    if tokenizer is not None and not tokenizer.is_file():
        fail(f"--tokenizer: {tokenizer} is not a file")
    if out.exists() and not out.is_dir():
        fail(f"OUT: must be a folder (created if missing), not the file {out}")
    try:
        console.print(str(convert_run(run_dir, out, tokenizer)))
    except HFExportError as err:
        fail(str(err))


def generate(
    run_dir: Path = typer.Argument(..., help=RUN_DIR_HELP),
    prompt: str = typer.Option(..., help="The text to continue (it starts a new document)."),
    max_new_tokens: int = typer.Option(64, min=1, help="Tokens to generate."),
    temperature: float = typer.Option(0.0, min=0.0, help="0: greedy; above 0: sampled at this temperature."),
    top_k: int | None = typer.Option(None, min=1, help="Sample from the k most likely tokens only."),
    seed: int = typer.Option(0, help="Seed for sampling."),
    cache: bool = typer.Option(True, help="Decode with a KV cache (where the routing allows one)."),
) -> None:
    """Print a continuation of --prompt by the pretrained model, through Hugging Face's generate."""
    from workers.release.convert import HFExportError
    from workers.release.generate import generate as continue_prompt
    from workers.release.generate import hf_folder, load

    try:
        model, tok = load(hf_folder(run_dir))
        out = continue_prompt(model, tok, prompt, max_new_tokens, temperature, top_k, seed, use_cache=cache)
    except HFExportError as err:
        fail(str(err))
    typer.echo(prompt + out.text)
    console.print(f"{out.new_tokens} tokens in {out.seconds:.2f} s ({out.tokens_per_second:.1f} tokens/s)", style="dim")


def evaluate(
    run_dir: Path = typer.Argument(..., help=RUN_DIR_HELP),
    text: Path = typer.Option(..., help="A local text file: its perplexity under the model."),
    out: Path | None = typer.Option(None, help="Where to write the harness's JSON (default: RUN_DIR/eval/)."),
    batch_size: int = typer.Option(1, min=1, help="Windows per forward pass."),
) -> None:
    """Perplexity of the pretrained model on a text file, by lm-evaluation-harness (a local task; no hub)."""
    from workers.release.convert import HFExportError, require_extra
    from workers.release.evaluate import TASK
    from workers.release.evaluate import evaluate as run_harness
    from workers.release.generate import hf_folder

    if not text.is_file():
        fail(f"--text: {text} is not a file")
    try:
        require_extra("transformers", "safetensors", "lm_eval")  # before anything is converted
        folder = hf_folder(run_dir)
        target = out or Path(run_dir) / "eval" / f"{TASK}-{text.stem}.json"
        summary = run_harness(folder, text, target, batch_size)
    except HFExportError as err:
        fail(str(err))
    console.print_json(json.dumps(summary))
