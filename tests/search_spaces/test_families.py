"""Each residual family does what docs/design.md §3 says it does."""

import math

import pytest
import torch

from helpers import FAMILIES, small_cfg, tokens, warmed_model
from search_spaces.residual_lm import build_model, count_parameters


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("tied", [False, True])
def test_forward_returns_logits(family, tied):
    cfg = small_cfg(residual=family, tie_embeddings=tied)
    logits = build_model(cfg)(tokens(cfg, batch=2, seq_len=7))
    assert logits.shape == (2, 7, cfg.vocab_size)
    assert torch.isfinite(logits).all()


def _ancre_forced_to_cascade(cascaded, cfg):
    ancre = build_model(cfg.model_copy(update={"residual": "ancre"}))
    missing, unexpected = ancre.load_state_dict(cascaded.state_dict(), strict=False)
    assert missing == ["connectivity.logits"] and not unexpected
    with torch.no_grad():  # c_{j-1, j} = 10 with tau = 0.01: p_{j-1,j} = 1 and exp(-1000) = 0 elsewhere
        for j in range(1, cfg.n_layers + 1):
            start = j * (j - 1) // 2
            ancre.connectivity.logits[start : start + j] = 0.0
            ancre.connectivity.logits[start + j - 1] = 10.0
    return ancre.eval()


@pytest.mark.parametrize("mod_rate", [0.0, 0.3])
def test_ancre_forced_to_the_cascade_equals_cascaded(mod_rate):
    cfg = small_cfg(residual="cascaded", mod_rate=mod_rate)
    cascaded = warmed_model(cfg)
    ancre = _ancre_forced_to_cascade(cascaded, cfg)
    idx = tokens(cfg, batch=3)
    torch.testing.assert_close(ancre(idx), cascaded(idx), rtol=1e-5, atol=1e-6)


def test_ancre_starts_with_equal_ingoing_coefficients():
    cfg = small_cfg(residual="ancre", n_layers=5)
    model = build_model(cfg)
    assert model.connectivity.logits.numel() == 5 * 6 // 2
    p = model.connectivity.matrix()
    for j in range(1, 6):
        torch.testing.assert_close(p[:j, j - 1], torch.full((j,), 1.0 / j))
        assert p[j:, j - 1].abs().sum() == 0
    assert torch.allclose(p.sum(0), torch.ones(5))


def test_ancre_differs_from_cascaded_at_init():
    """The equality above is not vacuous: with p_ij = 1/j the outputs differ."""
    cfg = small_cfg(residual="cascaded")
    cascaded = build_model(cfg).eval()
    ancre = build_model(cfg.model_copy(update={"residual": "ancre"})).eval()
    ancre.load_state_dict(cascaded.state_dict(), strict=False)
    idx = tokens(cfg)
    assert (ancre(idx) - cascaded(idx)).abs().max() > 1e-4


@pytest.mark.parametrize("mod_rate", [0.0, 0.3])
@pytest.mark.parametrize("scale", [1e-3, 0.37, 5.0, 1e3])
def test_nag_is_norm_agnostic(mod_rate, scale):
    """Scaling the embedding output by c > 0 leaves u unchanged and shifts s by log c."""
    cfg = small_cfg(residual="nag", mod_rate=mod_rate)
    model = warmed_model(cfg)
    idx = tokens(cfg)
    with torch.no_grad():
        u1, s1 = model.stream(idx)
        logits1 = model(idx)
        model.tok_emb.weight.mul_(scale)
        u2, s2 = model.stream(idx)
        logits2 = model(idx)
    torch.testing.assert_close(u2, u1, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(s2 - s1, torch.full_like(s1, math.log(scale)), rtol=0, atol=1e-4)
    torch.testing.assert_close(logits2, logits1 * scale, rtol=1e-3, atol=1e-5 * scale)
    assert torch.equal(logits2.argmax(-1), logits1.argmax(-1))


def test_nag_direction_lane_stays_on_the_sphere():
    cfg = small_cfg(residual="nag", mod_rate=0.3)
    model = warmed_model(cfg)
    u, s = model.stream(tokens(cfg))
    torch.testing.assert_close(u.norm(dim=-1), torch.full(u.shape[:-1], math.sqrt(cfg.d_model)))
    torch.testing.assert_close(u.mean(-1), torch.zeros(u.shape[:-1]), rtol=0, atol=1e-5)


def test_nag_update_is_a_rotation_by_atan_alpha_m():
    """u' = cos(theta) u + sin(theta) v with tan(theta) = alpha m, and s' - s = log1p(tan^2) / 2."""
    from search_spaces.residual_lm.nag_math import rotate

    d = 16
    u = torch.randn(5, d)
    u = u - u.mean(-1, keepdim=True)
    u = u * math.sqrt(d) / u.norm(dim=-1, keepdim=True)
    f = torch.randn(5, d) * 1e3  # the update's size does not depend on ||f||
    tan = torch.tensor([0.0, 0.1, 0.5, 1.0, 3.0])
    u_next, ds = rotate(u, f, tan)
    cos_angle = (u_next * u).sum(-1) / d
    torch.testing.assert_close(cos_angle, torch.cos(torch.atan(tan)))
    torch.testing.assert_close(ds, 0.5 * torch.log1p(tan**2))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("tied", [False, True])
def test_gradients_reach_every_parameter(family, tied):
    cfg = small_cfg(residual=family, mod_rate=0.3, tie_embeddings=tied)
    model = warmed_model(cfg).train()
    idx = tokens(cfg)
    logits = model(idx)
    torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten()).backward()
    starved = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert not starved, f"no gradient reaches {starved}"
    names = {n for n, _ in model.named_parameters()}
    expected = {"cascaded": "attn_router.scorer.weight", "nag": "alpha", "ancre": "connectivity.logits"}[family]
    assert any(n.endswith(expected) for n in names)


def test_parameter_count_matches_the_shapes():
    cfg = small_cfg(residual="cascaded", tie_embeddings=True)
    d, h, L, V = cfg.d_model, cfg.mlp_hidden, cfg.n_layers, cfg.vocab_size
    per_block = 4 * d * d + 3 * d * h + 2 * d  # attention, SwiGLU, two RMSNorm gains
    assert count_parameters(build_model(cfg)) == V * d + L * per_block + d


def test_diagnostics_report_each_family_state():
    for family in FAMILIES:
        cfg = small_cfg(residual=family, mod_rate=0.3)
        model = warmed_model(cfg)
        with model.recording_diagnostics():
            model(tokens(cfg))
        diag = model.diagnostics()
        assert len(diag["residual_rms"]) == cfg.n_layers + 1
        assert set(diag["skip_rate"]) == {f"{k}{j}" for j in cfg.routed_blocks for k in ("attn", "mlp")}
        assert diag["executed_flops_per_token"] > 0
        if family == "nag":
            assert len(diag["nag_angle"]) == len(diag["nag_gate"]) == 2 * cfg.n_layers
            assert all(0 < a < math.pi / 2 for a in diag["nag_angle"])
        if family == "ancre":
            assert len(diag["ancre_p"]) == cfg.n_layers + 1


@pytest.mark.parametrize("mod_rate", [0.0, 0.5])
def test_ancre_forward_is_the_block_by_block_definition(mod_rate):
    """Every block's coefficients from one softmax over the laid-out logits, and the mix of the states, give the
    logits of the definition block by block: p_ij = softmax_i(c_ij / tau) over block j's own logits, then
    sum_i p_ij o_i accumulated in order (to rounding)."""
    cfg = small_cfg(residual="ancre", n_layers=5, ancre_tau=0.3, mod_rate=mod_rate, mod_every=1)
    model = warmed_model(cfg)
    with torch.no_grad():
        model.connectivity.logits.normal_()
        idx = tokens(cfg, batch=2)
        logits = model(idx)
        states = [model.tok_emb(idx)]
        for j, block in enumerate(model.blocks, start=1):
            start = j * (j - 1) // 2
            p = torch.softmax(model.connectivity.logits[start : start + j] / cfg.ancre_tau, dim=0)
            mixed = p[0] * states[0]
            for p_i, state in zip(p[1:], states[1:], strict=True):
                mixed = mixed + p_i * state
            states.append(block(states[-1], base=mixed))
        torch.testing.assert_close(logits, model.head(states[-1]), rtol=1e-6, atol=1e-6)


def test_ancre_keeps_its_coefficients_without_autograd_until_the_logits_change():
    """Decoding reuses p_ij step after step; an optimiser step or an in-place write to the logits gives the new
    ones, and a forward with autograd always computes them (so that its graph reaches the logits)."""
    cfg = small_cfg(residual="ancre", n_layers=4, ancre_tau=1.0)  # a softmax far from saturating
    model = build_model(cfg)
    conn = model.connectivity
    with torch.no_grad():
        kept = conn.ingoing()
        assert conn.ingoing() is kept
        conn.logits.add_(torch.randn_like(conn.logits))
        changed = conn.ingoing()
    assert changed is not kept and not torch.equal(changed, kept)
    loss = model(tokens(cfg, batch=2)).logsumexp(-1).mean()
    loss.backward()
    assert conn.logits.grad is not None and conn.logits.grad.abs().sum() > 0
    torch.optim.AdamW(model.parameters(), lr=1.0).step()  # the trainer's optimiser: it writes without a new version
    with torch.no_grad():
        stepped = conn.ingoing()
    assert not torch.equal(stepped, changed)
    torch.testing.assert_close(stepped[:, 3], torch.softmax(conn.logits[6:10] / cfg.ancre_tau, 0))  # block 4's
