"""Decode speed and KV-cache memory of Mixture-of-Depths against dense, per family, at three contexts.

Each family at the benchmark width (`harness.SIZE`: d 128, 4 layers; seq_len raised to 1024) decodes with
the KV cache, batch 1, on CPU: a prompt of C - 32 tokens in one forward, then 32 steps of one token each
(a forward and the greedy argmax), timed, ending at context C in `CONTEXTS`. Beside the dense model, MoD
at the published setting (every other block routed at 0.875, Raposo et al. 2024's best) and at 0.5 on the
same blocks. MoD models first run a few training forwards, so that their routers' thresholds skip at
their rate; the weights are random otherwise. The timed steps are fed a fixed random continuation, not
their own argmax: a step's cost depends on its token only through the routing, and a random-weight
model's greedy output loops over a few tokens, which its routers then skip at whatever rate that loop
gives rather than the setting's. The three models of a family and context are timed in interleaved
rounds. Per case:

- decode tokens/s (median over rounds) and, for MoD, the speed against dense (median of the per-round
  ratios), by two clocks: the process's CPU time, and wall time. Decoding runs on one torch thread, so
  on an idle machine the two agree; on one shared with other jobs wall time also counts the waits for
  a core, so the summary's ratios are by CPU time (wall's beside);
- the KV cache after the timed steps, measured: the bytes of the positions it holds and of its buffers;
  beside them `kv_cache_bytes` counted from the routers' realised decisions and at the expected rate;
- the realised skip rate of each routed block over the timed steps and over the whole context;
- whether greedy decoding with the cache gives the tokens of the uncached full forward (one full
  forward per new token), and the largest difference between their logits.

Apart: `width`, the published setting against dense at 1024 at wider models (d 256 and 512, head
size kept at 32), speed and the timed steps' skip rates only: a skipped block still pays its norm, its
router's score and the decision, a cost that does not grow with d as a block's does; and
`cache_growth`, the cache's buffers growing by `kv_cache.CHUNK` positions against one per step
(chunk=1: a copy of the whole cache every step, as concatenation does), cascaded at 1024.

    python -m benchmarks.speed.generation --out benchmarks/results/generation.json
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from torch import Tensor

from benchmarks.harness import FAMILIES, SIZE, machine_info, write_json
from search_spaces.residual_lm import ArchConfig, ResidualLM, build_model, kv_cache_bytes
from search_spaces.residual_lm.kv_cache import CHUNK, KVCache

log = logging.getLogger("generation")

CONTEXTS = (128, 512, 1024)
NEW_TOKENS = 32  # timed decode steps per round; the prompt is the rest of the context
PUBLISHED = "mod0.875"
SETTINGS: dict[str, dict] = {
    "dense": {},
    PUBLISHED: dict(mod_rate=0.875, mod_every=2, mod_granularity="block"),  # the MoD paper's best
    "mod0.5": dict(mod_rate=0.5, mod_every=2, mod_granularity="block"),
}
GOALS = {"cascaded": 1.5, "nag": 1.5, "ancre": 1.5}  # MoD / dense decode tokens/s at 1024, published setting
KV_GOAL = 0.6  # MoD / dense KV-cache bytes at 1024, published setting
WIDTHS = (256, 512)
HEAD_DIM = SIZE["d_model"] // SIZE["n_heads"]
CLOCKS = ("cpu", "wall")  # process CPU time (the work, whatever else the machine runs) and wall time


def build(family: str, setting: str, d_model: int = SIZE["d_model"]) -> ResidualLM:
    torch.manual_seed(0)
    size = {**SIZE, "seq_len": max(CONTEXTS), "d_model": d_model, "n_heads": d_model // HEAD_DIM}
    cfg = ArchConfig(**size, residual=family, **SETTINGS[setting])
    model = build_model(cfg)
    if cfg.mod_rate:
        with torch.no_grad():
            for _ in range(3):  # training forwards set the routers' thresholds
                model(torch.randint(0, cfg.vocab_size, (4, cfg.seq_len)))
    return model.eval()


def executed_positions(model: ResidualLM, counts: Counter[int]) -> None:
    """Add the positions each routed attention executed in the last forward (its router's decisions)."""
    for (kind, j), router in model.routers().items():
        if kind == "attn" and router.last_counts is not None:
            counts[j] += int(router.last_counts.sum())


def cached_greedy(model: ResidualLM, prompt: Tensor) -> tuple[Tensor, Tensor]:
    """The prompt in one forward, then NEW_TOKENS one-token forwards each fed the last argmax: the
    NEW_TOKENS + 1 greedy tokens and their logits (NEW_TOKENS + 1, V)."""
    logits = []
    with torch.no_grad(), model.decoding(KVCache()):
        logits.append(model(prompt)[0, -1])
        for _ in range(NEW_TOKENS):
            logits.append(model(logits[-1].argmax().view(1, 1))[0, -1])
    steps = torch.stack(logits)
    return steps.argmax(-1), steps


def uncached_greedy(model: ResidualLM, prompt: Tensor) -> tuple[Tensor, Tensor]:
    """The same greedy tokens and logits from full forwards over the whole sequence, one per new token."""
    seq, logits = prompt, []
    with torch.no_grad():
        for _ in range(NEW_TOKENS + 1):
            logits.append(model(seq)[0, -1])
            seq = torch.cat([seq, logits[-1].argmax().view(1, 1)], dim=1)
    steps = torch.stack(logits)
    return steps.argmax(-1), steps


def decode_seconds(model: ResidualLM, sequence: Tensor, chunk: int = CHUNK) -> dict[str, float]:
    """Seconds of the NEW_TOKENS one-token steps that end `sequence` (1, C), each a forward and the argmax a
    greedy step takes, after the rest's (untimed) forward, by both clocks."""
    prompt = sequence.shape[1] - NEW_TOKENS
    with torch.no_grad(), model.decoding(KVCache(chunk=chunk)):
        model(sequence[:, :prompt])
        wall, cpu = time.perf_counter(), time.process_time()
        for t in range(prompt, sequence.shape[1]):
            model(sequence[:, t : t + 1])[:, -1:].argmax(-1)
        return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def counted_steps(model: ResidualLM, sequence: Tensor) -> tuple[KVCache, dict[int, int], dict[int, int]]:
    """The timed steps again, counted: the cache, and the positions each routed attention executed over the
    whole sequence and over the steps alone."""
    prompt = sequence.shape[1] - NEW_TOKENS
    cache, on_prompt, held = KVCache(), Counter[int](), Counter[int]()
    with torch.no_grad(), model.decoding(cache):
        model(sequence[:, :prompt])
        executed_positions(model, on_prompt)
        for t in range(prompt, sequence.shape[1]):
            model(sequence[:, t : t + 1])
            executed_positions(model, held)
    routed = model.cfg.routed_blocks
    return cache, {j: held[j] + on_prompt[j] for j in routed}, {j: held[j] for j in routed}


def skip_rates(executed: dict[int, int], positions: int) -> dict[str, float]:
    return {f"block{j}": 1.0 - n / positions for j, n in executed.items()}


def check(model: ResidualLM, sequence: Tensor) -> dict:
    """The cache after the timed steps against its count, the realised skip rates, and greedy decoding
    from the same prompt, cached against uncached."""
    cfg, context, prompt = model.cfg, sequence.shape[1], sequence[:, :-NEW_TOKENS]
    cache, held, steps = counted_steps(model, sequence)
    tokens, logits = cached_greedy(model, prompt)
    full_tokens, full_logits = uncached_greedy(model, prompt)
    dtype = cache.layers[0].keys.dtype if cache.layers[0].keys is not None else torch.float32
    return {
        "kv_bytes": {
            "held": cache.nbytes,  # the positions the cache holds
            "reserved": cache.reserved_nbytes,  # its buffers
            "count_realised": kv_cache_bytes(cfg, context, dtype, held=held),
            "count_expected": kv_cache_bytes(cfg, context, dtype),
        },
        "skip_rate_timed_steps": skip_rates(steps, NEW_TOKENS),
        "skip_rate": skip_rates(held, context),
        "same_greedy_tokens": bool(torch.equal(tokens, full_tokens)),
        "max_abs_logit_diff": float((logits - full_logits).abs().max()),
    }


def interleaved(runs: dict[str, Callable[[], dict[str, float]]], rounds: int) -> dict[str, list[dict[str, float]]]:
    """Seconds of each run by each clock, round by round after one warm-up each, so drift hits every run alike."""
    for run in runs.values():
        run()
    times: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(run())
    return times


def tokens_per_s(samples: list[dict[str, float]]) -> dict[str, float]:
    """NEW_TOKENS over the median seconds, by each clock."""
    return {c: NEW_TOKENS / statistics.median(t[c] for t in samples) for c in CLOCKS}


def speed_ratio(samples: list[dict[str, float]], baseline: list[dict[str, float]]) -> dict[str, float]:
    """Speed against `baseline` timed in the same rounds, by each clock: the median of the per-round ratios
    (the two runs of a round share the machine's state; two medians need not)."""
    return {c: statistics.median(b[c] / t[c] for t, b in zip(samples, baseline, strict=True)) for c in CLOCKS}


def sequence_for(context: int) -> Tensor:
    """(1, context) random tokens: a prompt and the continuation the timed steps are fed."""
    return torch.randint(1, SIZE["vocab_size"], (1, context), generator=torch.Generator().manual_seed(context))


def measure(family: str, rounds: int) -> dict:
    models = {name: build(family, name) for name in SETTINGS}
    result: dict = {}
    for context in CONTEXTS:
        sequence = sequence_for(context)
        samples = interleaved(
            {name: partial(decode_seconds, model, sequence) for name, model in models.items()}, rounds
        )
        cases = {
            name: {
                "tokens_per_s": tokens_per_s(samples[name]),
                "speed_vs_dense": speed_ratio(samples[name], samples["dense"]),
                **check(model, sequence),
            }
            for name, model in models.items()
        }
        for case in cases.values():
            case["kv_held_vs_dense"] = case["kv_bytes"]["held"] / cases["dense"]["kv_bytes"]["held"]
            case["kv_reserved_vs_dense"] = case["kv_bytes"]["reserved"] / cases["dense"]["kv_bytes"]["reserved"]
        result[str(context)] = cases
        log.info("%s at %d: %s", family, context, {n: f"{c['speed_vs_dense']['cpu']:.2f}x" for n, c in cases.items()})
    return result


def cache_growth(rounds: int) -> dict:
    """Decode speed, cascaded at the longest context, with buffers grown by CHUNK positions against by 1."""
    sequence, result = sequence_for(max(CONTEXTS)), dict[str, dict]()
    for name in ("dense", PUBLISHED):
        model = build("cascaded", name)
        samples = interleaved({f"chunk_{c}": partial(decode_seconds, model, sequence, c) for c in (1, CHUNK)}, rounds)
        grown, one = samples[f"chunk_{CHUNK}"], samples["chunk_1"]
        result[name] = {"tokens_per_s": tokens_per_s(grown), f"chunk_{CHUNK}_vs_chunk_1": speed_ratio(grown, one)}
    return result


def width(rounds: int) -> dict:
    """The published setting against dense at the longest context, each family, at the wider `WIDTHS`."""
    sequence, result = sequence_for(max(CONTEXTS)), dict[str, dict]()
    for d_model in WIDTHS:
        result[str(d_model)] = {}
        for family in FAMILIES:
            models = {name: build(family, name, d_model) for name in ("dense", PUBLISHED)}
            samples = interleaved({n: partial(decode_seconds, m, sequence) for n, m in models.items()}, rounds)
            ratio = speed_ratio(samples[PUBLISHED], samples["dense"])
            result[str(d_model)][family] = {
                "tokens_per_s": {n: tokens_per_s(samples[n]) for n in models},
                "speed_vs_dense": ratio,
                "skip_rate_timed_steps": skip_rates(counted_steps(models[PUBLISHED], sequence)[2], NEW_TOKENS),
            }
            log.info("d %d %s: %.2fx", d_model, family, ratio["cpu"])
    return result


def summary(families: dict, widths: dict) -> dict:
    """The published setting at the longest context against the goals, and every case's checks."""
    at = {family: cases[str(max(CONTEXTS))][PUBLISHED] for family, cases in families.items()}
    cases = [case for family in families.values() for context in family.values() for case in context.values()]
    return {
        "published_speed_vs_dense": {f: a["speed_vs_dense"]["cpu"] for f, a in at.items()},
        "published_speed_vs_dense_wall": {f: a["speed_vs_dense"]["wall"] for f, a in at.items()},
        "published_kv_held_vs_dense": {f: a["kv_held_vs_dense"] for f, a in at.items()},
        "published_kv_reserved_vs_dense": {f: a["kv_reserved_vs_dense"] for f, a in at.items()},
        "published_kv_reserved_vs_dense_worst": max(a["kv_reserved_vs_dense"] for a in at.values()),
        "speed_goal_met": {f: a["speed_vs_dense"]["cpu"] >= GOALS[f] for f, a in at.items()},
        "published_speed_vs_dense_by_width": {
            d: {f: r["speed_vs_dense"]["cpu"] for f, r in by_family.items()} for d, by_family in widths.items()
        },
        "slowest_published_speed_vs_dense_by_width": {
            d: min(r["speed_vs_dense"]["cpu"] for r in by_family.values()) for d, by_family in widths.items()
        },
        "kv_goal_met": all(a["kv_reserved_vs_dense"] <= KV_GOAL for a in at.values()),  # buffers, slack included
        "kv_held_equals_count": all(c["kv_bytes"]["held"] == c["kv_bytes"]["count_realised"] for c in cases),
        "same_greedy_tokens": all(c["same_greedy_tokens"] for c in cases),
        "max_abs_logit_diff": max(c["max_abs_logit_diff"] for c in cases),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/generation.json"))
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (batch-1 decode is latency-bound)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)
    families = {family: measure(family, args.rounds) for family in FAMILIES}
    widths = width(max(3, args.rounds // 3))
    result = {
        "machine": machine_info(),
        "size": {**SIZE, "seq_len": max(CONTEXTS), "new_tokens": NEW_TOKENS, "rounds": args.rounds},
        "settings": SETTINGS,
        "goals": {"speed_vs_dense": GOALS, "kv_vs_dense": KV_GOAL},
        "summary": summary(families, widths),
        "families": families,
        "width": widths,
        "cache_growth": cache_growth(args.rounds),
    }
    write_json(args.out, result)
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
