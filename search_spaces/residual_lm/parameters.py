"""`parameter_count(cfg)`: the trainable parameters of `build_model(cfg)`, in closed form (no model built).

Term by term, with d = d_model, h = mlp_hidden, V = vocab_size, L = n_layers, C = nag_gate_components and
R = the routed blocks (`ArchConfig.routed_blocks`):

    embedding           V d, and the head V d more unless tied
    attention           4 d^2          (q, k, v and output projections, no biases)
    SwiGLU MLP          3 d h          (gate and up d x 2h, down h x d)
    cascaded / ancre    per block: attention + MLP + 2 d (two RMSNorm gains); final RMSNorm d
    ancre               L (L + 1) / 2 connectivity logits
    nag                 per sublayer: its inner sublayer + d C + C (the gate's pre-activations and biases)
                        + C (mixing logits) + 2 (beta and alpha); g_encode 1
    router              cascaded / ancre: d (the linear score w . norm(x)); nag: 0 (it scores by its gate);
                        with `mod_routing="predictor"` the predictor MLP as well, (d + 1) 32 + 33;
                        one per routed sublayer, or one per routed block with `mod_granularity="block"`

`count_parameters(build_model(cfg))` equals it for every family and knob (tested).
"""

from __future__ import annotations

from .config import PREDICTOR_HIDDEN, ArchConfig

__all__ = ["parameter_count"]


def parameter_count(cfg: ArchConfig) -> int:
    """Trainable parameters of `build_model(cfg)` (a tied embedding counted once)."""
    d, h = cfg.d_model, cfg.mlp_hidden
    embedding = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
    attention, mlp = 4 * d * d, 3 * d * h
    routers_per_block = 1 if cfg.mod_granularity == "block" else 2
    routers = routers_per_block * len(cfg.routed_blocks) * _router(cfg)
    if cfg.residual == "nag":
        gate = d * cfg.nag_gate_components + 2 * cfg.nag_gate_components + 2
        return embedding + cfg.n_layers * (attention + mlp + 2 * gate) + routers + 1
    blocks = cfg.n_layers * (attention + mlp + 2 * d) + d + routers
    if cfg.residual == "ancre":
        blocks += cfg.n_layers * (cfg.n_layers + 1) // 2
    return embedding + blocks


def _router(cfg: ArchConfig) -> int:
    """One router's parameters: the linear score (not NAG's: its gate scores), and the predictor if any."""
    score = 0 if cfg.residual == "nag" else cfg.d_model
    predictor = (cfg.d_model + 1) * PREDICTOR_HIDDEN + PREDICTOR_HIDDEN + 1 if cfg.mod_routing == "predictor" else 0
    return score + predictor
