"""`ArchConfig`: the validated description of one `residual_lm` architecture, and named flavours.

Every knob a search proposes lives here. Construction validates each field and raises
`pydantic.ValidationError` (a `ValueError`) naming the field and the accepted range;
`config_error_message` turns that into the one-line message the CLI prints.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

ResidualFamily = Literal["cascaded", "nag", "ancre"]
ModRouting = Literal["causal_threshold", "topk", "predictor"]
ModGranularity = Literal["sublayer", "block"]
Parametrization = Literal["standard", "completep"]
PREDICTOR_HIDDEN = 32  # hidden width of mod_routing="predictor"'s MLP (`routing`): 2 (d + 1) * 32 FLOPs per token


class ArchConfig(BaseModel):
    """A decoder-only LLaMA-style language model with a choice of residual family and depth sparsity."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vocab_size: int = Field(256, ge=2, description="tokens in the vocabulary (256 = bytes)")
    seq_len: int = Field(128, ge=1, le=1 << 20, description="maximum context length")
    n_layers: int = Field(4, ge=1, le=512, description="transformer blocks L")
    d_model: int = Field(128, ge=2, description="residual width d")
    n_heads: int = Field(4, ge=1, description="attention heads; d_model / n_heads must be even (RoPE)")
    mlp_ratio: float = Field(8 / 3, gt=0, le=64, description="SwiGLU hidden = mlp_ratio * d, rounded to 32")
    residual: ResidualFamily = "cascaded"
    ancre_tau: float = Field(0.01, gt=0, le=100, description="ANCRe softmax temperature (paper: 0.01 for LMs)")
    mod_rate: float = Field(0.0, ge=0, lt=0.9, description="share of tokens skipped by each routed sublayer (or block)")
    mod_every: int = Field(2, ge=1, description="route every mod_every-th block (never the first)")
    # "topk": per-sequence expert choice, NOT causal; "predictor": top-k in training, the MoD paper's auxiliary
    # predictor at evaluation (causal there only)
    mod_routing: ModRouting = "causal_threshold"
    # "sublayer": attention and MLP of a routed block each decide per token; "block": one decision per token
    # for the whole block, as in the MoD paper (Raposo et al. 2024; its best: mod_rate 0.875, mod_every 2).
    mod_granularity: ModGranularity = "sublayer"
    nag_gate_components: int = Field(32, ge=1, le=1024, description="C in the NAG sigmoid-mixture gate")
    tie_embeddings: bool = False
    # "standard": GPT-2 init, one learning rate; "completep": muP in width and CompleteP in depth, equal to
    # "standard" at (base_width, base_depth), so that the best learning rate stays put as d and L change
    # (`parametrization.py` has the rules).
    parametrization: Parametrization = "standard"
    base_width: int = Field(128, ge=2, description="d_model at which 'completep' equals 'standard'")
    base_depth: int = Field(4, ge=1, le=512, description="n_layers at which 'completep' equals 'standard'")
    # the head size hd_0 of the base shape, whose attention 'completep' scales from: None is base_width / n_heads
    # (heads that widen at a fixed count); a model with fewer, base-sized heads sets it to keep 1 / sqrt(hd)
    base_head_dim: int | None = Field(
        None, ge=2, description="head size at the base shape (None: base_width / n_heads)"
    )

    @model_validator(mode="after")
    def _check_heads(self) -> ArchConfig:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model / n_heads = {self.d_model // self.n_heads} must be even (RoPE rotates pairs)")
        return self

    @model_validator(mode="after")
    def _check_routing(self) -> ArchConfig:
        """mod_rate > 0 must route at least one block (every mod_every-th of blocks 2..n_layers)."""
        if self.mod_rate > 0 and not self.routed_blocks:
            raise ValueError(
                f"mod_rate={self.mod_rate} routes no block: needs n_layers >= 2 and 1 <= mod_every <= n_layers "
                f"(got n_layers={self.n_layers}, mod_every={self.mod_every})"
            )
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def mlp_hidden(self) -> int:
        """SwiGLU hidden width: mlp_ratio * d rounded to the nearest multiple of 32 (at least 32)."""
        return max(32, 32 * round(self.mlp_ratio * self.d_model / 32))

    @property
    def routed_blocks(self) -> list[int]:
        """1-based indices of blocks whose sublayers are routed (every mod_every-th, never block 1)."""
        if self.mod_rate == 0:
            return []
        return [j for j in range(2, self.n_layers + 1) if j % self.mod_every == 0]

    @property
    def is_causal(self) -> bool:
        """True unless per-sequence top-k routing lets a token's fate depend on later tokens (in training;
        with "predictor" evaluation is causal, see `eval_is_causal`)."""
        return not (self.routed_blocks and self.mod_routing in ("topk", "predictor"))

    @property
    def eval_is_causal(self) -> bool:
        """True unless evaluation (and generation) routes by per-sequence top-k."""
        return not (self.routed_blocks and self.mod_routing == "topk")


def config_error_message(err: ValidationError, prefix: str = "") -> str:
    """One line naming each offending field and what it accepts, e.g. `mod_rate: Input should be less than 0.9`."""
    parts = []
    for e in err.errors():
        field = ".".join(str(x) for x in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{prefix}{field}: {msg} (got {e.get('input')!r})" if e["loc"] else f"{msg}")
    return "; ".join(parts)


# Named flavours, smallest first. `debug` is for tests; `bench` is the CPU benchmark size.
FLAVOURS: dict[str, ArchConfig] = {
    "debug": ArchConfig(vocab_size=64, seq_len=16, n_layers=3, d_model=32, n_heads=2, mod_every=1),
    "bench": ArchConfig(vocab_size=256, seq_len=128, n_layers=4, d_model=128, n_heads=4),
    "proxy": ArchConfig(vocab_size=256, seq_len=256, n_layers=8, d_model=256, n_heads=4),
}


def flavour(name: str, **overrides) -> ArchConfig:
    """A named flavour with some fields replaced (validated again)."""
    if name not in FLAVOURS:
        raise ValueError(f"flavour: unknown name {name!r}; known: {sorted(FLAVOURS)}")
    return ArchConfig(**{**FLAVOURS[name].model_dump(), **overrides})
