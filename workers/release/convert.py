"""A completed `nas pretrain` run as a Hugging Face model folder that loads without this project.

`convert(run_dir, out)` reads `run_dir/final.pt` and writes into `out`:

- `config.json`: `ResnasConfig` (the architecture, the schedule and optimiser, the search and trial the
  export came from, the tokenizer record), with `auto_map` naming the two classes below;
- `model.safetensors`: the weights (the router thresholds among them), keys `model.<project key>`;
- the tokenizer: `tokenizer.json` and `tokenizer_config.json` (the run's BPE, or for `bytes` a
  byte-level tokenizer whose ids are the UTF-8 bytes, `<|endoftext|>` standing for the separator 0);
- the modelling code: `configuration_resnas.py`, `modeling_resnas.py` and the model files they import,
  copied from `search_spaces/residual_lm` unchanged, except `fused.py`, which binds the fused ops to
  their PyTorch references (`REFERENCE_FUSED`): the folder carries no Triton kernel.

Copies, not a wrapper importing a pinned `resnas`: a model shared on a hub must load where this
project is not installed, and Hugging Face's remote-code loader copies a folder's flat relative imports
(`from .x import y`) and nothing else. The copied code needs `torch`, `transformers` and `pydantic`.
`AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)` and `AutoTokenizer.from_pretrained(out)`
load it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import torch

import search_spaces.residual_lm as residual_lm

from ..data.tokenizer import HFTokenizer
from ..pretrain.export_format import ExportedConfig
from ..pretrain.run import FINAL, TOKENIZER

__all__ = ["HF_FOLDER", "HFExportError", "REFERENCE_FUSED", "convert", "model_code", "require_extra"]

HF_FOLDER = "hf"  # the Hugging Face folder inside a run folder
SEPARATOR_TEXT = "<|endoftext|>"
MODEL_PACKAGE = Path(residual_lm.__file__).resolve().parent  # the model code the folder carries
ENTRY_FILES = ("configuration_resnas.py", "modeling_resnas.py")
REFERENCE_FUSED = '''"""The fused ops the families call, bound to their PyTorch references (no kernels here)."""

from .reference_ops import add_rmsnorm_reference as add_rmsnorm
from .reference_ops import AncreMixesReference as ancre_mixes
from .reference_ops import ancre_mix_reference as ancre_mix
from .reference_ops import nag_epilogue_reference as nag_epilogue

__all__ = ["add_rmsnorm", "ancre_mix", "ancre_mixes", "nag_epilogue"]
'''
AUTO_MAP = {
    "AutoConfig": "configuration_resnas.ResnasConfig",
    "AutoModelForCausalLM": "modeling_resnas.ResnasForCausalLM",
}
_RELATIVE_IMPORT = re.compile(r"^\s*from\s+\.(\S+)\s+import", re.MULTILINE)
EXTRA_PACKAGES = {"transformers": "transformers", "safetensors": "safetensors", "lm_eval": "lm-eval"}


class HFExportError(ValueError):
    """A one-line reason why a run cannot be converted, generated from or evaluated."""


def require_extra(*modules: str) -> None:
    """One-line HFExportError naming the `hf` extra when any of `modules` is not installed."""
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(EXTRA_PACKAGES.get(module, module))
    if missing:
        raise HFExportError(f"{', '.join(missing)} not installed: pip install 'resnas[hf]'")


def model_code() -> dict[str, str]:
    """File name -> source of the modelling code the folder ships: the entry files and, transitively,
    every module they import relatively, with `fused.py` replaced by `REFERENCE_FUSED`."""
    sources: dict[str, str] = {}
    pending = list(ENTRY_FILES)
    while pending:
        name = pending.pop()
        if name in sources:
            continue
        source = REFERENCE_FUSED if name == "fused.py" else (MODEL_PACKAGE / name).read_text(encoding="utf-8")
        sources[name] = source
        for module in _RELATIVE_IMPORT.findall(source):
            if "." in module:
                raise HFExportError(f"{name}: imports .{module}, which a flat model folder cannot hold")
            pending.append(f"{module}.py")
    return dict(sorted(sources.items()))


def convert(run_dir: Path, out: Path, tokenizer_file: Path | None = None) -> Path:
    """Write the Hugging Face folder of the completed run in `run_dir` to `out`; return `out`.

    The tokenizer is `tokenizer_file` if given, else the run's `tokenizer.json`, else (a `bytes` run)
    the byte-level one. HFExportError (one line) for a folder that is not a completed run.
    """
    require_extra("transformers", "safetensors")
    from search_spaces.residual_lm.configuration_resnas import ResnasConfig
    from search_spaces.residual_lm.modeling_resnas import ResnasForCausalLM

    final = Path(run_dir) / FINAL
    if not final.is_file():
        raise HFExportError(f"RUN_DIR: {run_dir} has no final.pt (not a completed nas pretrain run)")
    saved = torch.load(final, weights_only=True, map_location="cpu")
    exported = ExportedConfig.model_validate(saved["export"])
    tokenizer_file = tokenizer_file or _run_tokenizer(Path(run_dir), exported)
    tokenizer, separator = hf_tokenizer(tokenizer_file, exported.arch.seq_len)
    config = ResnasConfig(
        arch=saved["arch"],
        schedule=exported.optim.model_dump(mode="json"),
        search=exported.provenance.model_dump(mode="json") if exported.provenance else {},
        tokenizer=exported.tokenizer.model_dump(mode="json"),
        separator_token_id=separator,
    )
    config.auto_map = AUTO_MAP
    model = ResnasForCausalLM(config)
    model.model.load_state_dict(saved["model"])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    for name, source in model_code().items():
        (out / name).write_text(source, encoding="utf-8")
    return out


def _run_tokenizer(run_dir: Path, exported: ExportedConfig) -> Path | None:
    """The run's tokenizer.json, or None for a `bytes` run."""
    if (run_dir / TOKENIZER).is_file():
        return run_dir / TOKENIZER
    if exported.tokenizer.identity == "bytes":
        return None
    raise HFExportError(
        f"RUN_DIR: {run_dir} has no tokenizer.json for its tokenizer {exported.tokenizer.spec}: "
        "give one with nas convert --tokenizer FILE"
    )


def hf_tokenizer(tokenizer_file: Path | None, max_length: int) -> tuple[Any, int]:
    """(a `PreTrainedTokenizerFast`, the separator id): the BPE of `tokenizer_file`, or for None the byte
    tokenizer (id b for byte b, `SEPARATOR_TEXT` for the separator 0). The separator is BOS, EOS and padding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    if tokenizer_file is None:
        symbol = bytes_to_unicode()  # byte -> the printable character byte-level BPE writes it as
        vocab = {SEPARATOR_TEXT: 0, **{symbol[b]: b for b in range(1, 256)}}  # NUL never occurs in text
        backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        backend.decoder = decoders.ByteLevel()
        backend.add_special_tokens([SEPARATOR_TEXT])
        separator_text = SEPARATOR_TEXT
    else:
        backend = Tokenizer.from_file(str(tokenizer_file))
        project = HFTokenizer(backend, str(tokenizer_file))
        if project.separator == backend.get_vocab_size(with_added_tokens=True):  # the appended separator id
            backend.add_special_tokens([SEPARATOR_TEXT])
        separator_text = str(backend.id_to_token(project.separator))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=separator_text,
        eos_token=separator_text,
        pad_token=separator_text,
        model_max_length=max_length,
    )
    separator = backend.token_to_id(separator_text)
    assert separator is not None  # added above when the file lacked it
    return tokenizer, separator
