"""The benchmarks index: which script answers which question, with headline figures read from its JSON.

    python -m benchmarks.index            # print the table
    python -m benchmarks.index --write    # rewrite the table in benchmarks/README.md
    python -m benchmarks.index --check    # exit 1, naming the file, if that table is not what --write writes,
                                          # or a doc points at a make target or result file that is not there

The table has one row per `benchmarks/results/*.json`, sorted by file name within its section (`SECTIONS`:
speed and service, then experiments): the question its benchmark answers, the command that writes it, the
file, the machine of its machine record, its run time (`run_seconds` there; "not recorded" in results
written before the harness stamped it) and its headline figures. What a row says lives in `ENTRIES`, one
`Entry` per result file: its section, the question, the command, and each figure as a label, a key path
into the JSON and a `str.format` template. A file without an entry gets a row saying "no headline figures
yet" in a last section, `UNINDEXED`; a key path the JSON lacks prints "missing"; a JSON null prints "n/a"
and a boolean "yes" or "no". An entry whose file is absent adds no row, and a section without rows no
heading.

The table sits in benchmarks/README.md between `<!-- index:start -->` and `<!-- index:end -->`; the
text outside the markers is left as it is. Most of this file is `ENTRIES`, the table's data.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
README = HERE / "README.md"
ROOT = HERE.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), README]
MAKEFILE = ROOT / "Makefile"
START, END = "<!-- index:start -->", "<!-- index:end -->"
MISSING = "missing"
NOT_RECORDED = "not recorded"
NO_FIGURES = "no headline figures yet"
SPEED, EXPERIMENTS = "Speed and service", "Experiments"
SECTIONS = (SPEED, EXPERIMENTS)
UNINDEXED = "Not in ENTRIES yet"

KeyPath = tuple[str | int, ...]  # dict keys, or list indices as ints


@dataclass(frozen=True)
class Figure:
    label: str
    path: KeyPath
    fmt: str  # a str.format template with one field, e.g. "{:.2f}x"


@dataclass(frozen=True)
class Entry:
    question: str
    command: str
    figures: tuple[Figure, ...]
    machine: KeyPath = ("machine",)  # where the JSON keeps its machine record
    section: str = EXPERIMENTS  # one of SECTIONS

    def __post_init__(self) -> None:
        if self.section not in SECTIONS:
            raise ValueError(f"section {self.section!r} is not one of {SECTIONS}")


CLAIM_MOD = ("summary", "loss_minus_full_depth")
CPU_RATIOS = ("ratios",)
DECODE = ("summary", "published_speed_vs_dense")
FIDELITY = ("summary", "headline")
GPU_STEPS = ("stages", "kernel_steps", "result", "ratios")
LADDER = ("summary", "random")
LADDER_FIGURES = (  # the same four strategies at 1T on each corpus
    Figure("HV/HV* at 1T: replica", (*LADDER, "replica", "hv_ratio_nadir", "1T"), "{:.2f}"),
    Figure("without noise rule", (*LADDER, "replica_without_noise_rule", "hv_ratio_nadir", "1T"), "{:.2f}"),
    Figure("budget ladder", (*LADDER, "ladder", "hv_ratio_nadir", "1T"), "{:.2f}"),
    Figure("target budget", (*LADDER, "target", "hv_ratio_nadir", "1T"), "{:.2f}"),
)
MOD_GAP = ("summary",)
TRANSFER = ("summary",)

ENTRIES: dict[str, Entry] = {
    "ancre_case_study.json": Entry(
        question="Do ANCRe's learned shortcuts reproduce the paper's exponential convergence gap on deep linear "
        "networks (Figs. 2, 3(d)), and under which reading?",
        command="make case-study",
        figures=(
            Figure("reading that reproduces", ("summary", "reading_reproducing_fig2_3d"), "{}"),
            Figure("gap K=3", ("summary", "exponential_gap_reproduced", "K=3"), "{}"),
            Figure("gap K=4", ("summary", "exponential_gap_reproduced", "K=4"), "{}"),
            Figure("run", ("runtime_seconds",), "{:.0f} s"),
        ),
    ),
    "claims_depth.json": Entry(
        question="Do NAG's and ANCRe's gains over cascaded grow with depth (2-16 layers, equal compute)?",
        command="python -m benchmarks.paper_claims depth",
        figures=(
            Figure("NAG gain at L16", ("summary", "gain_over_cascaded_nats", "nag", "16"), "{:+.3f} nats"),
            Figure("ANCRe gain at L16", ("summary", "gain_over_cascaded_nats", "ancre", "16"), "{:+.3f} nats"),
            Figure("NAG grows", ("summary", "gain_grows_with_depth", "nag"), "{}"),
            Figure("ANCRe grows", ("summary", "gain_grows_with_depth", "ancre"), "{}"),
        ),
    ),
    "claims_mod.json": Entry(
        question="Does a 20-25% MoD rate match full depth at equal training compute (NAG)?",
        command="python -m benchmarks.paper_claims mod",
        figures=(
            Figure("loss - full depth at 0.125", (*CLAIM_MOD, "0.125"), "{:+.3f} nats"),
            Figure("at 0.25", (*CLAIM_MOD, "0.25"), "{:+.3f} nats"),
            Figure("matches at 0.25", ("summary", "matches_full_depth_at_0.25"), "{}"),
        ),
    ),
    "claims_width.json": Entry(
        question="Does d_align grow and p_hat fall with width at fixed depth?",
        command="python -m benchmarks.paper_claims width",
        figures=(
            Figure("d_align at d32", ("summary", "d_align", "32"), "{:.3f}"),
            Figure("at d256", ("summary", "d_align", "256"), "{:.3f}"),
            Figure("d_align grows", ("summary", "d_align_grows"), "{}"),
            Figure("p_hat falls", ("summary", "p_hat_falls"), "{}"),
        ),
    ),
    "compile_cpu.json": Entry(
        section=SPEED,
        question="Does torch.compile's faster step repay its compile time within a CPU proxy trial?",
        command="make compile-cpu",
        figures=(
            Figure("cascaded compile", ("families", "cascaded", "compile_s"), "{:.1f} s"),
            Figure("compiled / eager step", ("families", "cascaded", "compiled_vs_eager"), "{:.2f}x"),
            Figure("break-even", ("families", "cascaded", "break_even_steps"), "{:.0f} steps"),
            Figure("ANCRe break-even", ("families", "ancre", "break_even_steps"), "{:.0f} steps"),
        ),
    ),
    "cpu_throughput.json": Entry(
        section=SPEED,
        question="How fast does each family train on CPU (2 threads) beside a nanoGPT-style reference?",
        command="make bench",
        figures=(
            Figure("cascaded / reference tokens/s", (*CPU_RATIOS, "cascaded_vs_reference_tokens_per_s"), "{:.2f}x"),
            Figure("NAG / cascaded step", (*CPU_RATIOS, "nag_vs_cascaded_step_time"), "{:.2f}x"),
            Figure("ANCRe / cascaded step", (*CPU_RATIOS, "ancre_vs_cascaded_step_time"), "{:.2f}x"),
            Figure("share of matmul peak", (*CPU_RATIOS, "fp32_share_of_matmul_peak"), "{:.1%}"),
        ),
    ),
    "cpu_throughput_1thread.json": Entry(
        section=SPEED,
        question="How fast does each family train on CPU on one torch thread, as a search's workers train?",
        command="make bench",
        figures=(
            Figure("cascaded", ("models", "cascaded", "tokens_per_s"), "{:.0f} tokens/s"),
            Figure("NAG / cascaded step", (*CPU_RATIOS, "nag_vs_cascaded_step_time"), "{:.2f}x"),
            Figure("ANCRe / cascaded step", (*CPU_RATIOS, "ancre_vs_cascaded_step_time"), "{:.2f}x"),
            Figure("share of matmul peak", (*CPU_RATIOS, "fp32_share_of_matmul_peak"), "{:.1%}"),
        ),
    ),
    "fidelity.json": Entry(
        question="Does the answer a search gives at the target budget match the same configs trained for real there "
        "(two corpora, as a search runs it)?",
        command="make fidelity",
        figures=(
            Figure("tau: plays", (*FIDELITY, "plays", "kendall_tau"), "{:+.2f}"),
            Figure("code", (*FIDELITY, "code", "kendall_tau"), "{:+.2f}"),
            Figure("top rung alone: plays", (*FIDELITY, "plays", "top_rung_alone_kendall_tau"), "{:+.2f}"),
            Figure("code", (*FIDELITY, "code", "top_rung_alone_kendall_tau"), "{:+.2f}"),
            Figure("80% band coverage: plays", (*FIDELITY, "plays", "band_coverage"), "{:.0%}"),
            Figure("code", (*FIDELITY, "code", "band_coverage"), "{:.0%}"),
            Figure("compute: plays", (*FIDELITY, "plays", "compute_share"), "{:.1%}"),
            Figure("code", (*FIDELITY, "code", "compute_share"), "{:.1%}"),
        ),
    ),
    "generation.json": Entry(
        section=SPEED,
        question="Does Mixture-of-Depths decode faster than dense with the KV cache, and cache less (CPU, batch 1)?",
        command="make generation",
        figures=(
            Figure("MoD 0.875 / dense tok/s at 1024: cascaded", (*DECODE, "cascaded"), "{:.2f}x"),
            Figure("NAG", (*DECODE, "nag"), "{:.2f}x"),
            Figure("ANCRe", (*DECODE, "ancre"), "{:.2f}x"),
            Figure("at d 512, slowest", ("summary", "slowest_published_speed_vs_dense_by_width", "512"), "{:.2f}x"),
            Figure("KV cache MoD / dense", ("summary", "published_kv_reserved_vs_dense_worst"), "{:.2f}x"),
            Figure("held = counted", ("summary", "kv_held_equals_count"), "{}"),
            Figure("greedy = uncached", ("summary", "same_greedy_tokens"), "{}"),
        ),
    ),
    "hf_perplexity.json": Entry(
        question="Does lm-evaluation-harness on the converted model measure nas pretrain's validation loss?",
        command="make hf-perplexity",
        figures=(
            Figure("plays, NAG + MoD: pretrain", ("corpora", "plays", "nag", "pretrain_val_loss"), "{:.4f}"),
            Figure("harness", ("corpora", "plays", "nag", "harness_nats_per_token"), "{:.4f} nats/token"),
            Figure("largest gap, 2 corpora x 3 families", ("max_abs_gap_nats",), "{:.4f} nats"),
        ),
    ),
    "gpu_kernels.json": Entry(
        section=SPEED,
        question="Do the fused Triton kernels beat eager PyTorch, and how do whole training steps compare per "
        "family on a GPU?",
        command="make gpu-kernels",
        figures=(
            Figure("NAG / cascaded step", ("ratios", "nag_vs_cascaded_step_time/triton"), "{:.2f}x"),
            Figure("ANCRe / cascaded step", ("ratios", "ancre_vs_cascaded_step_time/triton"), "{:.2f}x"),
            Figure("MoD 0.25 / dense", ("ratios", "cascaded_mod0.25_vs_dense_step_time/triton"), "{:.2f}x"),
            Figure("Triton / reference step", ("ratios", "cascaded_triton_vs_reference_step_time"), "{:.2f}x"),
        ),
    ),
    "gpu_session.json": Entry(
        section=SPEED,
        question="Every GPU question in one prepared session: kernels, steps per family, MoD ratios, proxy trials.",
        command="bash benchmarks/gpu_session.sh",
        figures=(
            Figure("NAG / cascaded step", (*GPU_STEPS, "nag_vs_cascaded_step_time/triton"), "{:.2f}x"),
            Figure("ANCRe / cascaded step", (*GPU_STEPS, "ancre_vs_cascaded_step_time/triton"), "{:.2f}x"),
            Figure("MoD 0.25 / dense", (*GPU_STEPS, "cascaded_mod0.25_vs_dense_step_time/triton"), "{:.2f}x"),
            Figure(
                "cascaded proxy trial",
                ("stages", "proxy_trials", "result", "trials", "cascaded", "tokens_per_s"),
                "{:.0f} tokens/s",
            ),
        ),
        machine=("stages", "env", "result"),
    ),
    "ladder_efficiency.json": Entry(
        question="At equal compute, which front at the target does a replica ladder (with and without the noise "
        "rule), a budget ladder or a target-budget search buy (plays, random proposer)?",
        command="make ladder-efficiency",
        figures=LADDER_FIGURES,
    ),
    "ladder_efficiency_code.json": Entry(
        question="The same on the Python-source corpus?",
        command="make ladder-efficiency",
        figures=LADDER_FIGURES,
    ),
    "mod_published.json": Entry(
        question="Does Mixture-of-Depths as published (blocks routed at 0.875, every other block) beat dense at "
        "equal compute?",
        command="make mod-published",
        figures=(
            Figure("gap to dense: cascaded", (*MOD_GAP, "cascaded", "gap_to_dense", "block_0.875"), "{:+.3f} nats"),
            Figure("NAG", (*MOD_GAP, "nag", "gap_to_dense", "block_0.875"), "{:+.3f} nats"),
            Figure("ANCRe", (*MOD_GAP, "ancre", "gap_to_dense", "block_0.875"), "{:+.3f} nats"),
            Figure("build", ("build_seconds",), "{:.0f} s"),
        ),
    ),
    "precision.json": Entry(
        section=SPEED,
        question="fp32 or bf16 autocast on this CPU: step time and loss?",
        command="make precision",
        figures=(
            Figure("bf16 / fp32 step: cascaded", ("families", "cascaded", "bf16_over_fp32_step_time"), "{:.2f}x"),
            Figure("NAG", ("families", "nag", "bf16_over_fp32_step_time"), "{:.2f}x"),
            Figure("ANCRe", ("families", "ancre", "bf16_over_fp32_step_time"), "{:.2f}x"),
            Figure("default", ("recommended_default",), "{}"),
        ),
    ),
    "proxy_trial.json": Entry(
        section=SPEED,
        question="The default proxy trial: wall time, share outside training steps, peak memory?",
        command="make proxy",
        figures=(
            Figure("cascaded wall", ("trials", "cascaded", "wall_time_s"), "{:.1f} s"),
            Figure("NAG wall", ("trials", "nag", "wall_time_s"), "{:.1f} s"),
            Figure("outside steps", ("trials", "cascaded", "outside_steps_share"), "{:.1%}"),
            Figure("peak memory", ("trials", "cascaded", "peak_memory_mb"), "{:.0f} MB"),
        ),
    ),
    "reference_ops_cpu.json": Entry(
        section=SPEED,
        question="What share of each family's CPU training step do the reference ops the kernels fuse take?",
        command="make reference-ops",
        figures=(
            Figure("cascaded", ("reference_overhead", "cascaded", "share_of_step"), "{:.1%}"),
            Figure("NAG", ("reference_overhead", "nag", "share_of_step"), "{:.1%}"),
            Figure("ANCRe", ("reference_overhead", "ancre", "share_of_step"), "{:.1%}"),
        ),
    ),
    "replica_wall.json": Entry(
        section=SPEED,
        question="How long does a replica-ladder trial take against a budget-ladder trial at the same rung budgets?",
        command="make replica-wall",
        figures=(
            Figure(
                "wall / budget ladder: floor 8",
                ("summary", "wall_over_budget_ladder", "replica_min_width_8"),
                "{:.2f}x",
            ),
            Figure("floor 32", ("summary", "wall_over_budget_ladder", "replica_min_width_32"), "{:.2f}x"),
            Figure("steps, floor 8", ("summary", "steps_over_budget_ladder", "replica_min_width_8"), "{:.2f}x"),
            Figure("FLOPs, floor 8", ("summary", "flops_over_budget_ladder", "replica_min_width_8"), "{:.2f}x"),
        ),
    ),
    "search_efficiency.json": Entry(
        question="How much hypervolume does TPE reach against random search in the same trials?",
        command="make search-efficiency",
        figures=(
            Figure("final HV share: TPE", ("summary", "tpe", "final_mean_share_of_grid_hv"), "{:.1%}"),
            Figure("random", ("summary", "random", "final_mean_share_of_grid_hv"), "{:.1%}"),
            Figure("trials to 99%: TPE", ("summary", "tpe", "trials_to_99pct_of_grid_hv"), "{}"),
            Figure("random", ("summary", "random", "trials_to_99pct_of_grid_hv"), "{}"),
        ),
    ),
    "service_overhead.json": Entry(
        section=SPEED,
        question="What does the search service itself cost per trial, against Optuna's ask/tell in one process?",
        command="make service",
        figures=(
            Figure("service", ("summary", "service_per_trial_s"), "{:.3f} s/trial"),
            Figure("ask/tell in memory", ("summary", "direct_in_memory_per_trial_s"), "{:.3f} s/trial"),
            Figure("Ray start", ("summary", "ray_startup_s"), "{:.1f} s"),
            Figure("service / ask/tell on SQLite", ("summary", "service_vs_direct_sqlite"), "{:.1f}x"),
        ),
    ),
    "small_configs.json": Entry(
        section=SPEED,
        question="Tokens/s and share of the matmul peak across the space's sizes, CPU path before and after?",
        command="retired script (result kept)",
        figures=(
            Figure("peak share: cascaded L2 d64", ("configs", "cascaded_L2_d64", "current", "share_of_peak"), "{:.1%}"),
            Figure("L8 d192", ("configs", "cascaded_L8_d192", "current", "share_of_peak"), "{:.1%}"),
            Figure("speed-up cascaded L2 d64", ("configs", "cascaded_L2_d64", "speedup"), "{:.2f}x"),
            Figure("NAG L2 d64", ("configs", "nag_L2_d64", "speedup"), "{:.2f}x"),
        ),
    ),
    "soak.json": Entry(
        section=SPEED,
        question="Do 200 no-op trials survive worker kills, a PostgreSQL restart and a driver SIGTERM + resume?",
        command="make soak",
        figures=(
            Figure("final", ("final",), "{} trials"),
            Figure("lost", ("lost",), "{}"),
            Figure("duplicated", ("duplicated",), "{}"),
            Figure("Optuna disagreements", ("optuna_disagreements",), "{}"),
            Figure("kills", ("faults", "worker_kills"), "{}"),
            Figure("retries", ("retries",), "{}"),
            Figure("wall", ("wall_s",), "{:.0f} s"),
        ),
    ),
    "store_load.json": Entry(
        section=SPEED,
        question="Does a PostgreSQL store take 500 no-op trials, 8 at a time, through the search service?",
        command="make load",
        figures=(
            Figure("throughput", ("summary", "trials_per_s"), "{:.2f} trials/s"),
            Figure("write median", ("summary", "store_write_ms_median"), "{:.1f} ms"),
            Figure("p99", ("summary", "store_write_ms_p99"), "{:.1f} ms"),
            Figure("none lost or duplicated", ("summary", "no_trial_lost_or_duplicated"), "{}"),
        ),
    ),
    "tokenizers.json": Entry(
        question="How do the front, the best size and family move from bytes to BPEs of 2k and 8k tokens?",
        command="make tokenizers",
        figures=(
            Figure("best bpb: bytes", ("summary", "bytes", "best_bpb"), "{:.3f}"),
            Figure("2k", ("summary", "train:2048", "best_bpb"), "{:.3f}"),
            Figure("8k", ("summary", "train:8192", "best_bpb"), "{:.3f}"),
            Figure("best: bytes", ("summary", "bytes", "best_config"), "{}"),
            Figure("8k", ("summary", "train:8192", "best_config"), "{}"),
            Figure("8k head share of FLOPs", ("summary", "train:8192", "best_head_flops_share"), "{:.0%}"),
        ),
    ),
    "transfer.json": Entry(
        question="Does the best learning rate stay put across widths and depths, standard versus completep?",
        command="make transfer",
        figures=(
            Figure("cascaded width drift: standard", (*TRANSFER, "cascaded", "standard", "width_drift"), "{:.2f}x"),
            Figure("completep", (*TRANSFER, "cascaded", "completep", "width_drift"), "{:.2f}x"),
            Figure("NAG completep + horizon: width", (*TRANSFER, "nag", "completep_horizon", "width_drift"), "{:.2f}x"),
            Figure("depth", (*TRANSFER, "nag", "completep_horizon", "depth_drift"), "{:.2f}x"),
        ),
    ),
}


def lookup(data: Any, path: KeyPath) -> Any:
    """The value at `path` in `data`; KeyError when a step is absent (or a list index is out of range)."""
    for key in path:
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif isinstance(data, list) and isinstance(key, int) and -len(data) <= key < len(data):
            data = data[key]
        else:
            raise KeyError(key)
    return data


def format_value(value: Any, fmt: str) -> str:
    """`fmt` applied to `value`; "yes"/"no" for a boolean, "n/a" for null, the plain text if `fmt` does not apply."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "n/a"
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


def figure_text(data: Any, figure: Figure) -> str:
    try:
        return f"{figure.label} {format_value(lookup(data, figure.path), figure.fmt)}"
    except KeyError:
        return f"{figure.label} {MISSING}"


def machine_text(record: Any) -> str:
    """'AMD EPYC, 2 threads, torch 2.13.0+cpu': the GPU's name in place of the CPU's when the record has one."""
    if not isinstance(record, dict):
        return MISSING
    parts = [str(record.get("gpu") or record.get("cpu") or "unknown")]
    if "threads" in record:
        parts.append(f"{record['threads']} thread{'' if record['threads'] == 1 else 's'}")
    if "torch" in record:
        parts.append(f"torch {record['torch']}")
    return ", ".join(parts)


def run_time_text(data: Any, entry: Entry | None) -> str:
    """'447 s' or '12 min' from the machine record's `run_seconds` (`harness.write_json`); 'not recorded' before."""
    try:
        seconds = lookup(data, (*(entry.machine if entry else ("machine",)), "run_seconds"))
    except KeyError:
        return NOT_RECORDED
    if not isinstance(seconds, (int, float)):
        return NOT_RECORDED
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 60:.0f} min"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def row(name: str, data: Any, entry: Entry | None) -> str:
    """One table row for the result file `name` holding `data` (None when it is not valid JSON)."""
    try:
        machine = machine_text(lookup(data, entry.machine if entry else ("machine",)))
    except KeyError:
        machine = MISSING
    if data is None:
        figures = "not valid JSON"
    elif entry is None or not entry.figures:
        figures = NO_FIGURES
    else:
        figures = "; ".join(figure_text(data, f) for f in entry.figures)
    question, command = (entry.question, f"`{entry.command}`") if entry else ("", "")
    cells = [question, command, f"[{name}](results/{name})", machine, run_time_text(data, entry), figures]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


HEADER = [
    "| Question | Command | Result | Machine | Run time | Headline figures |",
    "| --- | --- | --- | --- | --- | --- |",
]


def render_table(results: Path, entries: Mapping[str, Entry] | None = None) -> str:
    """The Markdown tables of every `*.json` in `results`, one per section, from `entries` (default `ENTRIES`)."""
    entries = ENTRIES if entries is None else entries
    rows: dict[str, list[str]] = {section: [] for section in (*SECTIONS, UNINDEXED)}
    for path in sorted(results.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            data = None
        entry = entries.get(path.name)
        rows[entry.section if entry else UNINDEXED].append(row(path.name, data, entry))
    lines = [
        "_Generated by `python -m benchmarks.index --write` from `results/*.json`: edit `ENTRIES` in index.py, "
        "not these tables._",
    ]
    for section, section_rows in rows.items():
        if section_rows:
            lines += ["", f"### {section}", "", *HEADER, *section_rows]
    return "\n".join(lines)


def splice(text: str, table: str) -> str:
    """`text` with what lies between the markers replaced by `table`; ValueError if the markers are not there."""
    head, found, rest = text.partition(START)
    if not found:
        raise ValueError(f"no {START} marker")
    _, found, tail = rest.partition(END)
    if not found:
        raise ValueError(f"no {END} marker after {START}")
    return f"{head}{START}\n{table}\n{END}{tail}"


def shown(path: Path) -> str:
    """`path` relative to the working directory when it lies below it (benchmarks/README.md from the repo root)."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def stale_doc_references(docs: list[Path], makefile: Path, results: Path) -> list[str]:
    """Each `make TARGET` a doc names that the Makefile lacks, and each `results/NAME.json` that is not there:
    the docs point at the figures instead of retelling them, so a pointer must lead somewhere."""
    targets = set(re.findall(r"^([A-Za-z0-9_.-]+):", makefile.read_text(), flags=re.MULTILINE))
    problems = []
    for doc in docs:
        text = doc.read_text()
        for target in sorted(set(re.findall(r"`make ([A-Za-z0-9_.-]+)", text)) - targets):
            problems.append(f"{shown(doc)}: names `make {target}`, which {shown(makefile)} does not define")
        for name in sorted(set(re.findall(r"results/([A-Za-z0-9_.-]+\.json)", text))):
            if not (results / name).is_file():
                problems.append(f"{shown(doc)}: names results/{name}, which does not exist")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the table in the README")
    mode.add_argument("--check", action="store_true", help="exit 1 if the README's table is out of date")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of result JSONs")
    parser.add_argument("--readme", type=Path, default=README, help="Markdown file holding the table")
    parser.add_argument("--docs", type=Path, nargs="*", default=DOCS, help="Markdown files --check reads for pointers")
    parser.add_argument("--makefile", type=Path, default=MAKEFILE, help="the Makefile whose targets docs name")
    args = parser.parse_args(argv)

    table = render_table(args.results)
    if not (args.write or args.check):
        print(table)
        return 0
    try:
        current = args.readme.read_text()
        updated = splice(current, table)
    except (OSError, ValueError) as err:
        print(f"{shown(args.readme)}: {getattr(err, 'strerror', None) or err}", file=sys.stderr)
        return 1
    if args.check:
        problems = stale_doc_references(args.docs, args.makefile, RESULTS)  # the docs point at the committed results
        if updated != current:
            problems.insert(
                0, f"{shown(args.readme)}: the benchmarks table is out of date; run python -m benchmarks.index --write"
            )
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    args.readme.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
