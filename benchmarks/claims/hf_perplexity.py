"""Does lm-evaluation-harness, on the converted model, measure what `nas pretrain` measured?

On each corpus (the shipped plays, bytes; the Python standard library, bytes) a small model of each
family with MoD (d 64, 2 layers, seq_len 64, every block routed at 0.5) is pretrained for 400 steps of
batch 8, validated on every held-out window. The run is converted (`nas convert`'s code) and the
harness scores the held-out text (documents joined by the separator) through the converted folder;
`nats_per_token` from its bits per byte is set beside `nas pretrain`'s validation loss.

    python -m benchmarks.claims.hf_perplexity --out benchmarks/results/hf_perplexity.json
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from benchmarks.harness import FAMILIES, machine_info, write_json
from search_spaces.residual_lm import ArchConfig
from workers.data.config import DataConfig
from workers.data.corpus import load_corpus
from workers.data.tokenizer import ByteTokenizer
from workers.pretrain.export_format import ExportedConfig
from workers.pretrain.run import pretrain
from workers.release.convert import SEPARATOR_TEXT, convert
from workers.release.evaluate import evaluate

log = logging.getLogger("hf_perplexity")

CORPORA = {"plays": "shipped", "code": str(Path(__file__).resolve().parents[1] / "data" / "python_stdlib.jsonl.gz")}
STEPS, BATCH, SEQ_LEN = 400, 8, 64


def measure(source: str, family: str, work: Path) -> dict:
    data = DataConfig(source=source, cache_dir=str(work / "cache"))
    corpus = load_corpus(data)
    arch = ArchConfig(
        vocab_size=256, seq_len=SEQ_LEN, n_layers=2, d_model=64, n_heads=2, residual=family, mod_rate=0.5, mod_every=1
    )
    windows = corpus.val.numel() // SEQ_LEN
    exported = ExportedConfig(arch=arch, run={"batch_size": BATCH, "eval_sequences": windows + 1, "evals": 1})
    run_dir = work / f"{family}-{Path(source).stem}"
    summary = pretrain(exported, tokens=STEPS * BATCH * SEQ_LEN, data=data, out_dir=run_dir)
    folder = convert(run_dir, run_dir / "hf")
    text = work / "held_out.txt"
    text.write_text(SEPARATOR_TEXT.join(ByteTokenizer().decode(corpus.val.numpy())), encoding="utf-8")
    harness = evaluate(folder, text, run_dir / "eval.json", batch_size=32)
    log.info("%s on %s: pretrain %.4f, harness %.4f", family, source, summary["val_loss"], harness["nats_per_token"])
    return {
        "pretrain_val_loss": summary["val_loss"],
        "harness_nats_per_token": harness["nats_per_token"],
        "harness_minus_pretrain": harness["nats_per_token"] - summary["val_loss"],
        "harness_token_perplexity": harness["token_perplexity"],
        "harness_bits_per_byte": harness["bits_per_byte"],
        "held_out_tokens": harness["tokens"],
        "steps": summary["steps"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/hf_perplexity.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        corpora = {
            name: {family: measure(source, family, Path(tmp)) for family in FAMILIES}
            for name, source in CORPORA.items()
        }
    gaps = [abs(r["harness_minus_pretrain"]) for runs in corpora.values() for r in runs.values()]
    result = {
        "machine": machine_info(),
        "size": {"d_model": 64, "n_layers": 2, "seq_len": SEQ_LEN, "batch": BATCH, "steps": STEPS, "mod_rate": 0.5},
        "corpora": corpora,
        "max_abs_gap_nats": max(gaps),
    }
    write_json(args.out, result)
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
