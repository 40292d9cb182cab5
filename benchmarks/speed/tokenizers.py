"""What the vocabulary changes: the same small search with bytes and with byte-level BPEs of 2k and 8k tokens.

    python -m benchmarks.speed.tokenizers                      # about 15 min on 2 cores
    python -m benchmarks.speed.tokenizers --trials 4           # a quick look
    python -m benchmarks.speed.tokenizers --only throughput    # the encoding speeds alone, into the same file

Writes results/tokenizers.json and results/tokenizers.png.

1. Search: `nas search` on the shipped corpus and the default space, one budget per trial (`--rungs 1`),
   `--sampler random --seed 0`, so that every tokenizer trains the same configs at the same training
   FLOPs (the vocabulary enters only through the embedding, the head and the data).  Per tokenizer: each
   trial's bits per byte and executed FLOPs per token, the front in bits per byte, the best config (the
   compute-optimal size among these: layers, width, parameters with and without the embedding and head)
   and its family, and the share of its executed FLOPs the head takes.
2. Throughput: BPE training seconds and encoding speed (MB of text per second) on the shipped corpus, in
   interleaved rounds (medians), of what a corpus build runs (`HFTokenizer.encode`: each distinct word once,
   `workers.data.word_encoding`, starting from no known word) beside the tokenizer's own parallel batch
   encoding of whole documents, and whether the two give the same ids and bytes per token.
3. Memory: K processes at once each read a synthetic shard of 100M uint16 tokens in full, memory-mapped
   (`workers.data.shards.open_stream`, as trials read) or read into a private array (`np.load`):
   each process's private memory (RssAnon) and proportional set size (Pss: shared pages split among the
   processes that map them), from /proc/self/smaps_rollup.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import machine_info, update_json, write_json

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
OUT = HERE / "results" / "tokenizers.json"
TOKENIZERS = ("bytes", "train:2048", "train:8192")
TRIAL_FLOPS = 2e12
SHARD_TOKENS = 100_000_000
PROCESSES = 4
log = logging.getLogger("tokenizers")


def _search(spec: str, trials: int, cache: Path, tmp: Path) -> dict:
    """One search with tokenizer `spec`; its trials as the store keeps them."""
    from nas.answer.pareto import pareto_rows
    from nas.store import Store
    from search_spaces.residual_lm import ArchConfig, flops_per_token, parameter_count

    db = f"sqlite:///{tmp}/{spec.replace(':', '_')}.db"
    cmd = [sys.executable, "-m", "nas.cli", "search", "--name", "t", "--trial-flops", str(TRIAL_FLOPS)]
    cmd += ["--trials", str(trials), "--rungs", "1", "--sampler", "random", "--seed", "0", "--workers", "2"]
    cmd += ["--min-tokens-per-param", "0"]  # the same configs for every tokenizer, plausible at T or not
    cmd += ["--tokenizer", spec, "--storage", db, "--no-progress"]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=tmp, env={**os.environ, "RESNAS_CACHE": str(cache)}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nas search --tokenizer {spec} failed ({done.returncode}): {done.stderr[-3000:]}")
    wall = time.perf_counter() - start
    store = Store(db)
    rows = [r for r in store.trials("t") if r.status == "completed" and math.isfinite(r.val_loss)]
    front = {r.number for r in pareto_rows(rows)}
    trials_out = []
    for r in rows:
        arch = ArchConfig(**r.config["arch"])
        embedding = 2 * arch.vocab_size * arch.d_model  # input embedding and output head (untied)
        trials_out.append(
            dict(
                number=r.number,
                residual=arch.residual,
                n_layers=arch.n_layers,
                d_model=arch.d_model,
                mod_rate=arch.mod_rate,
                vocab_size=arch.vocab_size,
                params=parameter_count(arch),
                non_embedding_params=parameter_count(arch) - embedding,
                executed_flops_per_token=r.executed_flops_per_token,
                head_flops_share=flops_per_token(arch).executed_breakdown["unembed"] / r.executed_flops_per_token,
                tokens_seen=r.tokens_seen,
                val_loss=r.val_loss,
                val_bpb=r.val_bpb,
                on_front=r.number in front,
            )
        )
    corpus = store.get_search("t").settings["corpus"]
    store.close()
    best = min(trials_out, key=lambda t: t["val_bpb"]) if trials_out else None
    return dict(tokenizer=spec, corpus=corpus, wall_s=wall, trials=trials_out, best=best)


def _throughput(rounds: int = 5) -> list[dict]:
    """Seconds to train each BPE and encoding MB/s of each tokenizer on the shipped corpus: by word (what a
    corpus build runs) and by the tokenizer itself, interleaved round by round; medians, and their ratio."""
    from workers.data.documents import read_shipped_texts
    from workers.data.tokenizer import ByteTokenizer, HFTokenizer, train_bpe
    from workers.data.word_encoding import WordEncoder

    docs = read_shipped_texts()
    n_bytes = sum(len(d.encode("utf-8")) for d in docs)
    out = []
    for spec in TOKENIZERS:
        start = time.perf_counter()
        tokenizer = ByteTokenizer() if spec == "bytes" else HFTokenizer(train_bpe(docs, int(spec.split(":")[1])), spec)
        train_s = 0.0 if spec == "bytes" else time.perf_counter() - start
        seconds: dict[str, list[float]] = {"by_word": [], "by_tokenizer": []}
        results = {}
        for _ in range(rounds if spec != "bytes" else 1):
            for path in seconds:
                words = getattr(tokenizer, "words", None)
                if words is not None:  # by word: a fresh encoder, knowing no word yet, as a corpus build starts
                    tokenizer.words = WordEncoder(words.tokenizer, words.separator) if path == "by_word" else None
                start = time.perf_counter()
                results[path] = tokenizer.encode(docs)
                seconds[path].append(time.perf_counter() - start)
                if words is not None:
                    tokenizer.words = words  # type: ignore[union-attr]
        ids, counts = results["by_word"]
        same = np.array_equal(ids, results["by_tokenizer"][0]) and np.array_equal(counts, results["by_tokenizer"][1])
        mb_s = {path: n_bytes / statistics.median(s) / 1e6 for path, s in seconds.items()}
        out.append(
            dict(
                tokenizer=spec,
                train_s=train_s,
                encode_s=statistics.median(seconds["by_word"]),
                encode_mb_per_s=mb_s["by_word"],
                encode_mb_per_s_by_tokenizer=mb_s["by_tokenizer"],
                by_word_vs_by_tokenizer=mb_s["by_word"] / mb_s["by_tokenizer"],
                same_ids_and_bytes=bool(same),
                rounds=len(seconds["by_word"]),
                bytes_per_token=n_bytes / ids.size,
                text_mb=n_bytes / 1e6,
            )
        )
        log.info("%s: %.1f MB/s by word, %.1f by the tokenizer", spec, mb_s["by_word"], mb_s["by_tokenizer"])
    return out


def _smaps_rollup() -> dict:
    fields = {}
    with open("/proc/self/smaps_rollup") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                fields[parts[0][:-1]] = int(parts[1]) / 1024  # kB -> MiB
    return fields


def _reader(path: str, n_tokens: int, mapped: bool, barrier, queue) -> None:
    """Read the whole shard (memory-mapped or into a private array), wait for the others, report memory."""
    import torch

    from workers.data.shards import open_stream

    barrier.wait()  # every process has imported what it needs: no library mapped later moves this one's Pss
    before = _smaps_rollup()
    if mapped:
        stream = open_stream(Path(path), "uint16", n_tokens)
    else:
        stream = torch.from_numpy(np.fromfile(path, dtype=np.uint16))
    total = int(stream.sum(dtype=torch.int64))  # touch every page
    barrier.wait()  # every process holds the shard now
    after = _smaps_rollup()
    queue.put(
        dict(
            checksum=total,
            rss_anon_mib=after["Anonymous"] - before["Anonymous"],
            pss_mib=after["Pss"] - before["Pss"],
            rss_mib=after["Rss"] - before["Rss"],
        )
    )
    barrier.wait()  # stay alive until every process has measured


def _memory(tmp: Path, n_tokens: int = SHARD_TOKENS) -> dict:
    path = tmp / "shard.bin"
    rng = np.random.default_rng(0)
    with path.open("wb") as fh:
        for _ in range(10):
            fh.write(rng.integers(0, 8192, n_tokens // 10, dtype=np.uint16).tobytes())
    ctx = mp.get_context("spawn")
    out = {"shard_mib": path.stat().st_size / 2**20, "processes": PROCESSES}
    for label, mapped in (("memory_mapped", True), ("private_array", False)):
        barrier, queue = ctx.Barrier(PROCESSES), ctx.Queue()
        procs = [
            ctx.Process(target=_reader, args=(str(path), n_tokens, mapped, barrier, queue)) for _ in range(PROCESSES)
        ]
        for p in procs:
            p.start()
        reports = [queue.get(timeout=600) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        out[label] = dict(
            per_process=reports,
            total_private_mib=sum(r["rss_anon_mib"] for r in reports),
            total_pss_mib=sum(r["pss_mib"] for r in reports),
        )
    path.unlink()
    return out


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for search in result["searches"]:
        trials = sorted(search["trials"], key=lambda t: t["executed_flops_per_token"])
        x = [t["executed_flops_per_token"] for t in trials]
        y = [t["val_bpb"] for t in trials]
        dots = left.scatter(x, y, s=18, alpha=0.5)
        front = [t for t in trials if t["on_front"]]
        left.step(
            [t["executed_flops_per_token"] for t in front],
            [t["val_bpb"] for t in front],
            where="post",
            color=dots.get_facecolor()[0],
            label=f"{search['tokenizer']} (best: {search['best']['residual']}, "
            f"{search['best']['n_layers']}x{search['best']['d_model']})",
        )
    left.set_xscale("log")
    left.set_xlabel("executed forward FLOPs per token")
    left.set_ylabel("validation bits per byte")
    left.set_title(f"Same {len(result['searches'][0]['trials'])} configs, {TRIAL_FLOPS:.0e} training FLOPs each")
    left.legend(fontsize=8)
    mem = result["memory"]
    labels = ["memory-mapped", "private array"]
    private = [mem["memory_mapped"]["total_private_mib"], mem["private_array"]["total_private_mib"]]
    pss = [mem["memory_mapped"]["total_pss_mib"], mem["private_array"]["total_pss_mib"]]
    xs = np.arange(2)
    right.bar(xs - 0.2, private, 0.4, label="private (RssAnon)")
    right.bar(xs + 0.2, pss, 0.4, label="proportional (Pss)")
    right.set_xticks(xs, labels)
    right.set_ylabel("MiB, summed over the processes")
    right.set_title(f"{mem['processes']} processes reading a {mem['shard_mib']:.0f} MiB shard")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10, help="configs per search")
    parser.add_argument("--only", choices=["throughput"], help="measure only this part; the rest of the file stays")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.only == "throughput":
        update_json(OUT, "throughput_alone", {"tokenizers": _throughput()})
        return
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        cache = tmp / "cache"
        searches = []
        for spec in TOKENIZERS:
            searches.append(_search(spec, args.trials, cache, tmp))
            print(json.dumps({k: searches[-1][k] for k in ("tokenizer", "wall_s", "best")}), flush=True)
        result = dict(
            machine=machine_info(),
            trial_flops=TRIAL_FLOPS,
            trials_per_search=args.trials,
            searches=searches,
            throughput=_throughput(),
            memory=_memory(tmp),
        )
    result["summary"] = {
        s["tokenizer"]: dict(
            best_bpb=s["best"]["val_bpb"],
            best_config=f"{s['best']['residual']} {s['best']['n_layers']}x{s['best']['d_model']} "
            f"mod {s['best']['mod_rate']:g}",
            best_params=s["best"]["params"],
            best_non_embedding_params=s["best"]["non_embedding_params"],
            best_head_flops_share=s["best"]["head_flops_share"],
            front_size=sum(t["on_front"] for t in s["trials"]),
        )
        for s in searches
    }
    write_json(OUT, result)
    _plot(result, OUT.with_suffix(".png"))
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
