"""Sampling from a converted run through Hugging Face's `generate`, timed.

`hf_folder(path)` finds (or writes, with `convert.convert`) the Hugging Face folder of a run;
`load(folder)` loads it as any remote-code model is loaded; `generate(...)` continues a prompt,
which starts a new document (the separator first, as every training document did).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .convert import HF_FOLDER, HFExportError, convert, require_extra

__all__ = ["Generation", "generate", "hf_folder", "load"]


@dataclass(frozen=True)
class Generation:
    text: str  # the continuation alone
    new_tokens: int
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else float("inf")


def hf_folder(path: Path) -> Path:
    """`path` itself if it is a Hugging Face folder, else the run's `hf/` folder, converted on first use."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    folder = path / HF_FOLDER
    if (folder / "config.json").is_file():
        return folder
    return convert(path, folder)


def load(folder: Path) -> tuple[Any, Any]:
    """(model in eval mode, tokenizer), through the Auto classes with the folder's own code."""
    require_extra("transformers", "safetensors")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32)
    return model.eval(), AutoTokenizer.from_pretrained(folder, trust_remote_code=True)


def generate(
    model: Any,
    tokenizer: Any,
    prompt: str,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_k: int | None = None,
    seed: int = 0,
    use_cache: bool = True,
) -> Generation:
    """Continue `prompt`: greedy at temperature 0, else sampled (optionally from the top k). HFExportError
    when prompt and continuation do not fit in the model's `max_position_embeddings`."""
    ids = [tokenizer.bos_token_id, *tokenizer(prompt, add_special_tokens=False).input_ids]
    room = model.config.max_position_embeddings - len(ids)
    if max_new_tokens > room:
        raise HFExportError(
            f"--max-new-tokens: at most {max(room, 0)} after a prompt of {len(ids)} tokens "
            f"(the model's seq_len is {model.config.max_position_embeddings})"
        )
    sampling: dict[str, Any] = {"do_sample": False}
    if temperature > 0:
        sampling = {"do_sample": True, "temperature": temperature, "top_k": top_k or 0}
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            use_cache=use_cache,
            pad_token_id=tokenizer.pad_token_id,
            **sampling,
        )
    seconds = time.perf_counter() - start
    new = out[0, len(ids) :].tolist()
    return Generation(tokenizer.decode(new, skip_special_tokens=False), len(new), seconds)
