"""Perplexity of a converted run on a local text file, measured by lm-evaluation-harness.

The task is defined by a YAML written next to nothing but itself: `dataset_path: text` with the file as
its test split, read whole (`sample_by: document`), scored by `loglikelihood_rolling` (disjoint windows
of the model's seq_len, the first token of the file predicted after the separator). No hub is
contacted. The harness reports word and byte perplexity and bits per byte of the file's UTF-8 text;
`token_perplexity` = exp(nats per token), with the file's tokens counted by the model's tokenizer, is
the figure `nas pretrain`'s validation loss (nats per token) compares with.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from .convert import HFExportError, require_extra

__all__ = ["TASK", "evaluate", "task_yaml"]

TASK = "resnas_text_perplexity"


def task_yaml(text_file: Path) -> str:
    """The harness task: perplexity of `text_file` read as one document."""
    data_files = json.dumps(str(Path(text_file).resolve()))
    return f"""task: {TASK}
dataset_path: text
dataset_kwargs:
  data_files:
    test: {data_files}
  sample_by: document
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
"""


def evaluate(folder: Path, text_file: Path, out_json: Path, batch_size: int = 1) -> dict[str, Any]:
    """Run the harness on `folder` (a Hugging Face folder) over `text_file`; write its results JSON to
    `out_json`; return the summary (the harness's three metrics, tokens, bytes and token perplexity)."""
    require_extra("transformers", "lm_eval")
    text_file = Path(text_file)
    if not text_file.is_file():
        raise HFExportError(f"--text: {text_file} is not a file")
    text = text_file.read_text(encoding="utf-8")
    if not text.strip():
        raise HFExportError(f"--text: {text_file} holds no text")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # a local file: nothing to fetch
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import handle_non_serializable
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tasks:
        (Path(tasks) / f"{TASK}.yaml").write_text(task_yaml(text_file), encoding="utf-8")
        results = simple_evaluate(
            model="hf",
            model_args={"pretrained": str(folder), "trust_remote_code": True, "dtype": "float32"},
            tasks=[TASK],
            task_manager=TaskManager(include_path=tasks),
            batch_size=batch_size,
            device="cpu",
            log_samples=False,
        )
    if results is None:
        raise HFExportError("lm-eval returned no results")
    out_json = Path(out_json)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(results, indent=2, default=handle_non_serializable) + "\n")
    metrics = results["results"][TASK]
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    tokens = len(tokenizer(text, add_special_tokens=False).input_ids)
    n_bytes = len(text.encode("utf-8"))
    bpb = metrics["bits_per_byte,none"]
    nats_per_token = bpb * math.log(2) * n_bytes / tokens
    return {
        "word_perplexity": metrics["word_perplexity,none"],
        "byte_perplexity": metrics["byte_perplexity,none"],
        "bits_per_byte": bpb,
        "tokens": tokens,
        "bytes": n_bytes,
        "nats_per_token": nats_per_token,
        "token_perplexity": math.exp(nats_per_token),
        "harness_results": str(out_json),
    }
