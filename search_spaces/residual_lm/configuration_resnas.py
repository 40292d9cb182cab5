"""`ResnasConfig`: the Hugging Face configuration of a residual_lm model (`config.json`).

It carries the architecture (`arch`: every `ArchConfig` field), the learning-rate schedule and
optimiser it was trained with (`schedule`), the search and trial it came from (`search`) and the
tokenizer record (`tokenizer`), and mirrors the fields the Hugging Face tools read by their usual
names (`vocab_size`, `hidden_size`, `num_hidden_layers`, `num_attention_heads`,
`max_position_embeddings` = seq_len). The document separator is the BOS, EOS and padding token.
This file imports only `transformers`: it travels into the exported folder as it is.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig


class ResnasConfig(PretrainedConfig):
    model_type = "resnas"

    def __init__(
        self,
        arch: dict[str, Any] | None = None,
        schedule: dict[str, Any] | None = None,
        search: dict[str, Any] | None = None,
        tokenizer: dict[str, Any] | None = None,
        separator_token_id: int = 0,
        **kwargs: Any,
    ):
        self.arch = dict(arch or {})
        self.schedule = dict(schedule or {})
        self.search = dict(search or {})
        self.tokenizer = dict(tokenizer or {})
        self.separator_token_id = separator_token_id
        self.vocab_size = self.arch.get("vocab_size", 256)
        self.hidden_size = self.arch.get("d_model")
        self.num_hidden_layers = self.arch.get("n_layers")
        self.num_attention_heads = self.arch.get("n_heads")
        self.max_position_embeddings = self.arch.get("seq_len")
        self.use_cache = kwargs.pop("use_cache", True)
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            kwargs.setdefault(name, separator_token_id)
        kwargs["tie_word_embeddings"] = False  # the model ties its own embedding (arch.tie_embeddings)
        super().__init__(**kwargs)
