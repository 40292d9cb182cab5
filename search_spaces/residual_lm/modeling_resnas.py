"""`ResnasForCausalLM`: a residual_lm model (`build_model`) behind Hugging Face's causal-LM interface.

The module is the project's own model code, reference path (`fused` binds the ops to `reference_ops`
in an exported folder): `forward(input_ids)` returns the same logits. `generate` works greedy or
sampled; with `use_cache` (the default) each step runs only the new token against a `KVCache` where
the routing allows it (`ArchConfig.eval_is_causal`; `topk` routing recomputes the whole sequence
every step). Sequences are limited to `max_position_embeddings` (the trained seq_len). Padding must
be on the right (a left-padded batch is refused): the model has no position offsets. Beam search is
not supported (the cache does not reorder).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .common import CausalSelfAttention, rope_frequencies
from .config import ArchConfig
from .configuration_resnas import ResnasConfig
from .kv_cache import KVCache
from .model import build_model

# The name Hugging Face's outputs and generation loop give the cache: `cache` from transformers 5.24,
# `past_key_values` before. The model takes either and answers under the installed one.
CACHE_NAME = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"


class ResnasForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = ResnasConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules: list[str] = []

    def __init__(self, config: ResnasConfig):
        super().__init__(config)
        self.model = build_model(ArchConfig(**config.arch))
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: torch.nn.Module) -> None:
        """RoPE's frequencies, which no checkpoint holds (a non-persistent buffer), computed again; every
        other tensor was initialised by `build_model` (the project's rules) or comes from the checkpoint."""
        if isinstance(module, CausalSelfAttention):
            module.freqs.copy_(rope_frequencies(module.freqs.shape[0], module.head_dim))

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the model keeps its own `KVCache` (a routed attention holds only the positions it executed)

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.model.tok_emb

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        past_key_values: KVCache | None = None,
        use_cache: bool | None = None,
        labels: torch.LongTensor | None = None,
        cache: KVCache | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        """Logits (B, T, V) of `input_ids` (B, T), continuing the `KVCache` when given (`cache`, named
        `past_key_values` before transformers 5.24); with `labels`,
        the mean next-token cross-entropy (labels -100 ignored), as Hugging Face's causal LMs compute it."""
        if attention_mask is not None and bool((attention_mask.diff(dim=1) > 0).any()):
            raise ValueError("attention_mask: only right padding is supported (pad after the tokens)")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        cache = cache if cache is not None else past_key_values
        cache = cache if cache is not None else KVCache() if use_cache else None
        if cache is not None and (self.training or not self.model.cfg.eval_is_causal):
            cache = None  # no cache: training, or routing that is not causal
        if cache is None:
            logits = self.model(input_ids)
        else:
            with self.model.decoding(cache):
                logits = self.model(input_ids)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        # Hugging Face types the field as its own Cache; generate only hands it back to prepare_inputs_for_generation.
        returned: dict[str, Any] = {CACHE_NAME: cache}
        return CausalLMOutputWithPast(loss=loss, logits=logits, **returned)

    def prepare_inputs_for_generation(self, input_ids: torch.LongTensor, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The tokens the cache has not seen (all of them without a cache); generate passes the rest by name."""
        given = kwargs.get("cache", kwargs.get("past_key_values"))
        cache = given if isinstance(given, KVCache) else None
        return {
            "input_ids": input_ids[:, cache.length :] if cache is not None else input_ids,
            CACHE_NAME: cache,
            "attention_mask": kwargs.get("attention_mask"),
            "use_cache": kwargs.get("use_cache"),
        }
