"""The `completep` parametrization (muP in width, CompleteP in depth): its rules, and that it transfers.

The coordinate check is the muP papers' test: after a few AdamW steps at one learning rate, the
change of a hidden activation and of the logits stays of the same size as the width grows under
`completep`, and grows with width under `standard`.
"""

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from helpers import FAMILIES
from search_spaces.residual_lm import ArchConfig, build_model
from search_spaces.residual_lm.parametrization import INIT_STD, TensorGrowth, nag_rotation_multiplier, tensor_rules
from workers.training.config import OptimConfig
from workers.training.train import ADAM_EPS, build_optimizer

BASE = {"base_width": 64, "base_depth": 2}


def cfg_of(family: str, d_model: int, n_layers: int, parametrization: str, **extra) -> ArchConfig:
    return ArchConfig(
        residual=family, d_model=d_model, n_layers=n_layers, n_heads=4, seq_len=32,
        parametrization=parametrization, **BASE, **extra,
    )  # fmt: skip


def train_steps(model, steps: int, lr: float, seed: int = 1) -> None:
    """`steps` AdamW steps on one fixed batch of next-token prediction, at the schedule's per-group scales."""
    opt = build_optimizer(model, OptimConfig(lr=lr, weight_decay=0.1))
    x = torch.randint(0, model.cfg.vocab_size, (8, model.cfg.seq_len), generator=torch.Generator().manual_seed(seed))
    for _ in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * group["lr_scale"]
        loss = F.cross_entropy(model(x).flatten(0, 1), x.roll(-1, 1).flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mod", [{}, {"mod_rate": 0.5, "mod_every": 1}, {"mod_rate": 0.5, "mod_granularity": "block"}])
def test_completep_at_its_base_shape_is_standard_bit_for_bit(family, mod):
    """At d = d_0 and L = L_0 every factor is 1: same init, same optimizer groups, same three steps."""
    params = []
    for parametrization in ("standard", "completep"):
        torch.manual_seed(0)
        model = build_model(cfg_of(family, 64, 2, parametrization, **mod))
        train_steps(model, 3, 3e-3)
        params.append([p.detach() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*params, strict=True))


def test_standard_ignores_the_base_shape():
    """Under `standard` base_width and base_depth change nothing (the defaults are not special)."""
    models = []
    for base in ({"base_width": 64, "base_depth": 2}, {"base_width": 512, "base_depth": 16}):
        torch.manual_seed(0)
        models.append(build_model(ArchConfig(residual="cascaded", d_model=128, n_layers=4, **base)))
    x = torch.randint(0, 256, (2, 16))
    assert torch.equal(models[0](x), models[1](x))


KINDS = {  # parameter-name suffix -> the kind the width rule must give it, in every family that has it
    "qkv.weight": "hidden",
    "out_proj.weight": "hidden",
    "w_in.weight": "hidden",
    "w_out.weight": "hidden",
    "scorer.weight": "readout",
    "gate.pre.weight": "readout",
    "predictor.0.weight": "readout",
    "predictor.2.weight": "finite",
    "tok_emb.weight": "input",
    "norm.weight": "input",
    "lm_head.weight": "unembed",
    "alpha": "finite",
    "mix_logits": "finite",
    "connectivity.logits": "finite",
}


@pytest.mark.parametrize("family", FAMILIES)
def test_rules_per_tensor_match_the_table(family):
    """At m_d = 4, m_L = 2: kinds, measured init stds, and every optimizer group's lr / wd / eps factors."""
    cfg = cfg_of(family, 256, 4, "completep", mod_rate=0.5, mod_routing="predictor")
    m_d, m_l = 4.0, 2.0
    torch.manual_seed(0)
    model = build_model(cfg)
    rules = tensor_rules(model)
    expected_factors = {  # kind -> (init, lr, wd, eps)
        "hidden": (m_d**-0.5, 1 / m_d, m_d, 1 / (m_d * m_l)),
        "readout": (1 / m_d, 1 / m_d, m_d, 1 / m_d),
        "input": (1.0, 1.0, 1.0, 1.0),
        "finite": (1.0, 1.0, 1.0, 1.0),
        "unembed": (1.0, 1.0, 1.0, 1.0),
    }
    seen = set()
    for name, p in model.named_parameters():
        suffix = next((s for s in KINDS if name.endswith(s)), None)
        if suffix is not None:
            assert rules[name].kind == KINDS[suffix], name
            seen.add(suffix)
        rule = rules[name]
        assert (rule.init_scale, rule.lr_scale, rule.weight_decay_scale, rule.eps_scale) == pytest.approx(
            expected_factors[rule.kind]
        ), name
        if p.dim() == 2 and name != "tok_emb.weight" and p.numel() >= 4096:  # measured init std, 5% tolerance
            depth_factor = math.sqrt(2 * cfg.base_depth) if name.endswith(("out_proj.weight", "w_out.weight")) else 1
            assert p.std().item() == pytest.approx(INIT_STD / depth_factor * rule.init_scale, rel=0.05), name
    assert {"qkv.weight", "w_out.weight", "lm_head.weight", "tok_emb.weight"} <= seen

    optim = OptimConfig(lr=1e-2, weight_decay=0.1, nag_gate_lr=1e-3)
    opt = build_optimizer(model, optim)
    group_of = {id(p): g for g in opt.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        group, rule = group_of[id(p)], rules[name]
        gate = ".gate." in name or name.endswith(".alpha")
        assert group["lr_scale"] == pytest.approx((0.1 if gate else 1.0) * rule.lr_scale), name
        decayed = p.dim() >= 2 and not gate
        assert group["weight_decay"] == pytest.approx(0.1 * rule.weight_decay_scale if decayed else 0.0), name
        assert group["eps"] == pytest.approx(ADAM_EPS * rule.eps_scale), name


def test_rules_are_read_from_plain_data():
    """`tensor_rules` needs no model: a config and each tensor's growth with width are enough."""
    growth = {
        "qkv": TensorGrowth(True, True),
        "gate": TensorGrowth(False, True),
        "gain": TensorGrowth(True, False),
        "alpha": TensorGrowth(False, False),
        "table": TensorGrowth(False, True, "embedding"),
        "head": TensorGrowth(False, True, "unembedding"),
    }
    kinds = {
        "qkv": "hidden",
        "gate": "readout",
        "gain": "input",
        "alpha": "finite",
        "table": "input",
        "head": "unembed",
    }
    completep = SimpleNamespace(cfg=cfg_of("cascaded", 256, 4, "completep"), width_growth=growth)
    assert {name: rule.kind for name, rule in tensor_rules(completep).items()} == kinds
    standard = SimpleNamespace(cfg=cfg_of("cascaded", 256, 4, "standard"), width_growth=growth)
    assert {(r.kind, r.init_scale, r.lr_scale) for r in tensor_rules(standard).values()} == {("finite", 1.0, 1.0)}


def test_forward_multipliers():
    """Logits carry 1/m_d (cascaded, ANCRe), branches 1/m_L, NAG's rotation c_L with sum c_L alpha_l fixed."""
    torch.manual_seed(0)
    model = build_model(cfg_of("cascaded", 256, 8, "completep"))
    z = torch.randn(2, 5, 256)
    expected = F.rms_norm(z, (256,), model.norm.weight, 1e-6) @ model.unembedding.T / 4
    torch.testing.assert_close(model.head(z), expected)
    assert model.blocks[0].attn.output_multiplier == model.blocks[0].mlp.output_multiplier == 0.25

    def total_rotation(n_layers):
        nag = build_model(cfg_of("nag", 64, n_layers, "completep"))
        return sum(float(sub.scaled_alpha().detach()) for block in nag.blocks for sub in (block.attn, block.mlp))

    assert total_rotation(8) == pytest.approx(total_rotation(2)) == pytest.approx(sum(k**-0.5 for k in range(1, 5)))
    assert nag_rotation_multiplier(cfg_of("nag", 64, 8, "standard")) == 1.0


def coordinate_change(family: str, parametrization: str, d_model: int) -> tuple[float, float]:
    """RMS change of the logits and of the last block's MLP output after 4 AdamW steps at lr 1e-2."""
    torch.manual_seed(0)
    model = build_model(cfg_of(family, d_model, 2, parametrization))
    block = model.blocks[-1]
    mlp = block.mlp.inner if family == "nag" else block.mlp
    seen = {}
    mlp.register_forward_hook(lambda module, args, out: seen.__setitem__("mlp", out.detach()))
    x = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        logits0, mlp0 = model(x), seen["mlp"]
    train_steps(model, 4, 1e-2)
    with torch.no_grad():
        logits1, mlp1 = model(x), seen["mlp"]
    rms = lambda t: t.pow(2).mean().sqrt().item()  # noqa: E731
    return rms(logits1 - logits0), rms(mlp1 - mlp0)


@pytest.mark.parametrize("family", FAMILIES)
def test_coordinate_check(family):
    """Width 64 -> 256 at one learning rate: under completep both changes stay within 2.5x of each other;
    under standard the MLP output's change grows more than 10x (Adam's update adds up over d inputs)."""
    widths = (64, 128, 256)
    completep = [coordinate_change(family, "completep", d) for d in widths]
    standard = [coordinate_change(family, "standard", d) for d in widths]
    for which in (0, 1):
        values = [c[which] for c in completep]
        assert max(values) / min(values) < 2.5, (which, values)
    assert standard[-1][1] / standard[0][1] > 10, standard


def test_unknown_parametrization_is_refused_with_the_field_named():
    with pytest.raises(ValidationError, match="parametrization"):
        ArchConfig(parametrization="mup")
    with pytest.raises(ValidationError, match="base_depth"):
        ArchConfig(parametrization="completep", base_depth=0)
