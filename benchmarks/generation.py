"""Generation speed with and without the KV cache, side by side, per family, dense and with MoD.

At the benchmark size (`harness.SIZE`: d 128, 4 layers, seq_len 128), a model behind Hugging Face's
`generate` (`ResnasForCausalLM`, the converted folder's class) continues a 16-token prompt greedily by
112 tokens, to the end of its context; MoD models (every block routed at 0.5) first run a few training
forwards so their routers skip tokens. Cached and uncached runs are interleaved, and the greedy tokens
of both are compared. The weights are random: speed does not depend on them.

    python -m benchmarks.generation --out benchmarks/results/generation.json
"""

from __future__ import annotations

import argparse
import logging
import statistics
from pathlib import Path

import torch

from benchmarks.harness import FAMILIES, SIZE, machine_info, time_interleaved, write_json
from search_spaces.residual_lm import ArchConfig
from search_spaces.residual_lm.configuration_resnas import ResnasConfig
from search_spaces.residual_lm.modeling_resnas import ResnasForCausalLM

log = logging.getLogger("generation")

PROMPT = 16
MOD_RATES = (0.0, 0.5)


def routed_model(family: str, mod_rate: float) -> ResnasForCausalLM:
    torch.manual_seed(0)
    arch = ArchConfig(**SIZE, residual=family, mod_rate=mod_rate, mod_every=1)
    model = ResnasForCausalLM(ResnasConfig(arch=arch.model_dump()))
    if mod_rate:
        with torch.no_grad():
            for _ in range(3):  # training forwards set the routers' thresholds
                model.model(torch.randint(0, arch.vocab_size, (8, arch.seq_len)))
    return model.eval()


def measure(family: str, mod_rate: float, rounds: int) -> dict:
    model = routed_model(family, mod_rate)
    prompt = torch.randint(1, SIZE["vocab_size"], (1, PROMPT), generator=torch.Generator().manual_seed(1))
    new_tokens = SIZE["seq_len"] - PROMPT
    outputs: dict[bool, torch.Tensor] = {}

    def run(use_cache: bool):
        def step() -> None:
            with torch.no_grad():
                outputs[use_cache] = model.generate(
                    prompt,
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,
                    do_sample=False,
                    use_cache=use_cache,
                    pad_token_id=0,
                )

        return step

    times = time_interleaved({"cache": run(True), "no_cache": run(False)}, rounds, warmup=1)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    return {
        "new_tokens": new_tokens,
        "median_s": med,
        "tokens_per_s": {name: new_tokens / s for name, s in med.items()},
        "cache_speedup": med["no_cache"] / med["cache"],
        "same_greedy_tokens": bool(torch.equal(outputs[True], outputs[False])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/generation.json"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    result = {
        "machine": machine_info(),
        "size": {**SIZE, "prompt": PROMPT},
        "families": {
            family: {f"mod_{rate}": measure(family, rate, args.rounds) for rate in MOD_RATES} for family in FAMILIES
        },
    }
    write_json(args.out, result)
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
