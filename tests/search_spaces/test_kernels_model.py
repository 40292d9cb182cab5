"""Through the real model, the Triton path and the PyTorch reference path agree.

On CPU the Triton kernels run in Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1
before they are imported); on a CUDA machine they run natively on the same small batch.
"""

import pytest
import torch
import torch.nn.functional as F

from helpers import FAMILIES, small_cfg, tokens, warmed_model
from kernel_helpers import DEVICE, autograd_node_names, needs_triton
from search_spaces.residual_lm import build_model
from search_spaces.residual_lm.ops import backend, use_backend

pytestmark = needs_triton


def loss_and_grads(model, idx, path: str):
    model.zero_grad(set_to_none=True)
    with use_backend(path):
        logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("mod_rate", [0.0, 0.3])
@pytest.mark.parametrize("family", FAMILIES)
def test_kernel_and_reference_paths_give_the_same_loss_and_gradients(family, mod_rate):
    cfg = small_cfg(residual=family, mod_rate=mod_rate)
    model = warmed_model(cfg).to(DEVICE).eval()  # eval: both passes route with the same frozen threshold
    idx = tokens(cfg, batch=4, seq_len=cfg.seq_len + 1, seed=3).to(DEVICE)
    ref_loss, ref_grads = loss_and_grads(model, idx, "reference")
    ker_loss, ker_grads = loss_and_grads(model, idx, "triton")
    torch.testing.assert_close(ker_loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert ker_grads.keys() == ref_grads.keys() and len(ref_grads) > 5
    for name, grad in ref_grads.items():
        scale = grad.abs().max().clamp_min(1e-6)
        torch.testing.assert_close(ker_grads[name] / scale, grad / scale, rtol=0, atol=2e-5, msg=name)


def test_the_kernel_path_really_runs_inside_the_model():
    """Every fused op shows up as its own autograd node when the Triton path is forced."""
    expected = {
        "cascaded": {"_AddRMSNormBackward"},
        "ancre": {"_AddRMSNormBackward", "_AncreMixBackward"},
        "nag": {"_NagEpilogueBackward"},
    }
    for family in FAMILIES:
        cfg = small_cfg(residual=family)
        model = build_model(cfg).to(DEVICE)
        with use_backend("triton"):
            loss = model(tokens(cfg, batch=2).to(DEVICE)).sum()
        names = autograd_node_names(loss)
        assert expected[family] <= names, (family, expected[family] - names)


def test_auto_dispatch_follows_the_device():
    t = torch.zeros(2)
    assert backend(t) == "reference"  # CPU tensors: the reference, interpreter or not
    if torch.cuda.is_available():
        assert backend(t.cuda()) == "triton"
