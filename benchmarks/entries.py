"""The rows of the benchmarks index (`benchmarks.index`): for each result file, the question its benchmark
answers, the command that writes it, and its headline figures as key paths into the JSON.

A figure is a label, a key path into the result's JSON and a `str.format` template; a result whose script is
retired keeps its row, its command "retired script (result kept)".
"""

from __future__ import annotations

from dataclasses import dataclass

SPEED, EXPERIMENTS = "Speed and service", "Experiments"
SECTIONS = (SPEED, EXPERIMENTS)

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
CPU_FAMILIES = ("families", "ratios")
DECODE = ("summary", "published_speed_vs_dense")
EFFECTS = ("summary", "headline")
FIDELITY = ("summary", "headline")
GPU_STEPS = ("stages", "kernel_steps", "result", "ratios")
LADDER = ("summary", "random")
TOKENISING = ("throughput_alone", "tokenizers")
LADDER_FIGURES = (  # the same four strategies at 1T on each corpus
    Figure("HV/HV* at 1T: replica", (*LADDER, "replica", "hv_ratio_nadir", "1T"), "{:.2f}"),
    Figure("without noise rule", (*LADDER, "replica_without_noise_rule", "hv_ratio_nadir", "1T"), "{:.2f}"),
    Figure("budget ladder", (*LADDER, "ladder", "hv_ratio_nadir", "1T"), "{:.2f}"),
    Figure("target budget", (*LADDER, "target", "hv_ratio_nadir", "1T"), "{:.2f}"),
)
MOD_GAP = ("summary",)
TRANSFER = ("summary",)
REPLAY = ("search_replay", "strategies")

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
        command="python -m benchmarks.claims.paper_claims depth",
        figures=(
            Figure("NAG gain at L16", ("summary", "gain_over_cascaded_nats", "nag", "16"), "{:+.3f} nats"),
            Figure("ANCRe gain at L16", ("summary", "gain_over_cascaded_nats", "ancre", "16"), "{:+.3f} nats"),
            Figure("NAG grows", ("summary", "gain_grows_with_depth", "nag"), "{}"),
            Figure("ANCRe grows", ("summary", "gain_grows_with_depth", "ancre"), "{}"),
        ),
    ),
    "claims_mod.json": Entry(
        question="Does a 20-25% MoD rate match full depth at equal training compute (NAG)?",
        command="python -m benchmarks.claims.paper_claims mod",
        figures=(
            Figure("loss - full depth at 0.125", (*CLAIM_MOD, "0.125"), "{:+.3f} nats"),
            Figure("at 0.25", (*CLAIM_MOD, "0.25"), "{:+.3f} nats"),
            Figure("matches at 0.25", ("summary", "matches_full_depth_at_0.25"), "{}"),
        ),
    ),
    "claims_width.json": Entry(
        question="Does d_align grow and p_hat fall with width at fixed depth?",
        command="python -m benchmarks.claims.paper_claims width",
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
            Figure("measured alone: NAG / cascaded step", (*CPU_FAMILIES, "nag_vs_cascaded_step_time"), "{:.2f}x"),
            Figure(
                "cascaded / LLaMA-style tokens/s",
                (*CPU_FAMILIES, "cascaded_vs_reference_llama_tokens_per_s"),
                "{:.2f}x",
            ),
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
    "effects.json": Entry(
        question="Are the knob effects `nas effects` reports at T (family, MoD, depth vs width at matched cost) "
        "those of the configs trained for real there (three corpora, as a search runs it)?",
        command="make effects",
        figures=(
            Figure("signs right: plays", (*EFFECTS, "plays", "sign_agreement"), "{:.0%}"),
            Figure("code", (*EFFECTS, "code", "sign_agreement"), "{:.0%}"),
            Figure("handbook", (*EFFECTS, "handbook", "sign_agreement"), "{:.0%}"),
            Figure("80% intervals hold truth: plays", (*EFFECTS, "plays", "interval_coverage"), "{:.0%}"),
            Figure("code", (*EFFECTS, "code", "interval_coverage"), "{:.0%}"),
            Figure("handbook", (*EFFECTS, "handbook", "interval_coverage"), "{:.0%}"),
        ),
    ),
    "fidelity.json": Entry(
        question="Does the answer a search gives at the target budget match the same configs trained for real there "
        "(three corpora, the third held out from every choice, as a search runs it)?",
        command="make fidelity",
        figures=(
            Figure("tau: plays", (*FIDELITY, "plays", "kendall_tau"), "{:+.2f}"),
            Figure("code", (*FIDELITY, "code", "kendall_tau"), "{:+.2f}"),
            Figure("handbook", (*FIDELITY, "handbook", "kendall_tau"), "{:+.2f}"),
            Figure("top rung alone: plays", (*FIDELITY, "plays", "top_rung_alone_kendall_tau"), "{:+.2f}"),
            Figure("code", (*FIDELITY, "code", "top_rung_alone_kendall_tau"), "{:+.2f}"),
            Figure("handbook", (*FIDELITY, "handbook", "top_rung_alone_kendall_tau"), "{:+.2f}"),
            Figure("80% band coverage: plays", (*FIDELITY, "plays", "band_coverage"), "{:.0%}"),
            Figure("code", (*FIDELITY, "code", "band_coverage"), "{:.0%}"),
            Figure("handbook", (*FIDELITY, "handbook", "band_coverage"), "{:.0%}"),
            Figure("compute: plays", (*FIDELITY, "plays", "compute_share"), "{:.1%}"),
            Figure("code", (*FIDELITY, "code", "compute_share"), "{:.1%}"),
            Figure("handbook", (*FIDELITY, "handbook", "compute_share"), "{:.1%}"),
            Figure("best size rule's tau: plays", (*FIDELITY, "plays", "best_size_rule_kendall_tau"), "{:+.2f}"),
            Figure("code", (*FIDELITY, "code", "best_size_rule_kendall_tau"), "{:+.2f}"),
            Figure("handbook", (*FIDELITY, "handbook", "best_size_rule_kendall_tau"), "{:+.2f}"),
            Figure("architecture tau: plays", (*FIDELITY, "plays", "architecture_tau"), "{:+.2f}"),
            Figure("ceiling", (*FIDELITY, "plays", "architecture_tau_ceiling"), "{:+.2f}"),
            Figure("code", (*FIDELITY, "code", "architecture_tau"), "{:+.2f}"),
            Figure("ceiling", (*FIDELITY, "code", "architecture_tau_ceiling"), "{:+.2f}"),
            Figure("handbook", (*FIDELITY, "handbook", "architecture_tau"), "{:+.2f}"),
            Figure("ceiling", (*FIDELITY, "handbook", "architecture_tau_ceiling"), "{:+.2f}"),
            Figure("decisions at matched cost: plays", (*FIDELITY, "plays", "decision_accuracy"), "{:.0%}"),
            Figure("code", (*FIDELITY, "code", "decision_accuracy"), "{:.0%}"),
            Figure("handbook", (*FIDELITY, "handbook", "decision_accuracy"), "{:.0%}"),
            Figure("level error at T: plays", (*FIDELITY, "plays", "level_error_mean"), "{:+.3f} nats"),
            Figure("code", (*FIDELITY, "code", "level_error_mean"), "{:+.3f} nats"),
            Figure("handbook", (*FIDELITY, "handbook", "level_error_mean"), "{:+.3f} nats"),
            Figure("resolved calls right: plays", (*FIDELITY, "plays", "resolved_call_accuracy"), "{:.0%}"),
            Figure("code", (*FIDELITY, "code", "resolved_call_accuracy"), "{:.0%}"),
            Figure("handbook", (*FIDELITY, "handbook", "resolved_call_accuracy"), "{:.0%}"),
        ),
    ),
    "forecast_constants.json": Entry(
        question="What are the error model's constants (the bias, the misfit per family, the level's exponent and "
        "offset), measured on each corpus and fitted with each held out?",
        command="python -m benchmarks.trust.forecast_constants",
        figures=(
            Figure("level exponent: plays", ("per_corpus", "plays", "alpha"), "{:.3f}"),
            Figure("code", ("per_corpus", "code", "alpha"), "{:.3f}"),
            Figure("handbook", ("per_corpus", "handbook", "alpha"), "{:.3f}"),
            Figure("shipped", ("shipped", "level", "alpha"), "{:.3f}"),
            Figure("level error no fit sees", ("shipped", "level", "systematic_sd"), "{:.3f} nats"),
            Figure("ANCRe offset", ("shipped", "bias", "family", "ancre"), "{:+.3f}"),
            Figure("± across corpora", ("shipped", "bias", "family_sd", "ancre"), "{:.3f}"),
        ),
    ),
    "replica_bias.json": Entry(
        question="What biases a replica's view of the architecture, and does a correction chosen on one corpus "
        "help on the other?",
        command="make replica-bias",
        figures=(
            Figure("chosen on code, read on plays", ("leave_one_corpus_out", "plays", "chosen_on_the_others"), "{}"),
            Figure("architecture tau", ("leave_one_corpus_out", "plays", "chosen", "architecture_tau"), "{:+.2f}"),
            Figure("default", ("leave_one_corpus_out", "plays", "default", "architecture_tau"), "{:+.2f}"),
            Figure("decisions", ("leave_one_corpus_out", "plays", "chosen", "decision_accuracy"), "{:.0%}"),
            Figure("default", ("leave_one_corpus_out", "plays", "default", "decision_accuracy"), "{:.0%}"),
            Figure(
                "on code: architecture tau", ("leave_one_corpus_out", "code", "chosen", "architecture_tau"), "{:+.2f}"
            ),  # fmt: skip
            Figure("default", ("leave_one_corpus_out", "code", "default", "architecture_tau"), "{:+.2f}"),
            Figure("decisions", ("leave_one_corpus_out", "code", "chosen", "decision_accuracy"), "{:.0%}"),
            Figure("default", ("leave_one_corpus_out", "code", "default", "decision_accuracy"), "{:.0%}"),
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
            Figure("at d 256, slowest", ("summary", "slowest_published_speed_vs_dense_by_width", "256"), "{:.2f}x"),
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
        command="bash benchmarks/speed/gpu_session.sh",
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
            Figure("encoding 2k", (*TOKENISING, 1, "encode_mb_per_s"), "{:.1f} MB/s"),
            Figure("8k", (*TOKENISING, 2, "encode_mb_per_s"), "{:.1f} MB/s"),
            Figure("the tokenizer's own, 8k", (*TOKENISING, 2, "encode_mb_per_s_by_tokenizer"), "{:.1f} MB/s"),
            Figure("same ids", (*TOKENISING, 2, "same_ids_and_bytes"), "{}"),
        ),
    ),
    "transfer_checks.json": Entry(
        question="Does a best-rate drift survive equal step counts (iso-token) and a second seed, and what does a "
        "search at the base shape's rate give up against one that samples the rate?",
        command="retired script (result kept)",
        figures=(
            Figure(
                "cascaded completep depth drift: iso-token, L2-L16",
                ("iso_token_check", "cascaded", "completep", "depth", "drift"),
                "{:.2f}x",
            ),
            Figure("mean of 2 seeds, L2-L4", ("seed_check", "cascaded", "drift_seed_mean"), "{:.2f}x"),
            Figure(
                "TPE trials to 95% HV: rate sampled",
                (*REPLAY, "standard_lr_searched", "tpe", "median_trials_to_95pct"),
                "{:g}",
            ),
            Figure("completep base rate", (*REPLAY, "completep_base_lr", "tpe", "median_trials_to_95pct"), "{:g}"),
            Figure("its HV ceiling", (*REPLAY, "completep_base_lr", "ceiling_share"), "{:.1%}"),
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
