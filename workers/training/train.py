"""Iso-FLOP proxy training (docs/design.md §3.6): every trial gets the same training compute C.

A config whose executed forward pass costs F FLOPs per token trains on D = C / (3 F) tokens,
rounded to whole batches (so within half a batch of D). F is the expected executed count at the
target skip rate, so a model that skips 25% of its routed sublayers trains on more tokens.
The FLOPs actually spent are counted from the pairs each batch really executed.

The loop reads top to bottom: plan the budget, build model/optimiser/data, resume from the last
checkpoint if there is one, then step (schedule, forward, backward, clip, update), evaluate,
report, checkpoint. A NaN or inf loss ends the run as `diverged`; it never raises.
"""

from __future__ import annotations

import copy
import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from search_spaces.residual_lm import (
    TRAINING_FLOPS_PER_FORWARD_FLOP,
    ArchConfig,
    ResidualLM,
    build_model,
)
from search_spaces.residual_lm.parametrization import tensor_rules

from ..data.batches import TrainBatches, validation_batches
from ..data.corpus import TokenizedCorpus
from ..ladder.plans import BudgetPlan, Rung, RungSpacing, plan_budget, plan_ladder
from ..status import TrialStatus
from .checkpoints import TrainState, load_checkpoint, save_checkpoint
from .config import OptimConfig, Precision, RunConfig
from .records import CurvePoint, RungRecord
from .schedules import Schedule

log = logging.getLogger(__name__)

ADAM_EPS = 1e-8  # torch's default; scaled per tensor under `completep`
FUSED_ADAMW_DEVICES = ("cpu", "cuda")  # where torch has a fused AdamW kernel


def build_optimizer(model: ResidualLM, optim: OptimConfig) -> torch.optim.AdamW:
    """AdamW over three kinds of parameter: decayed matrices, undecayed vectors and scalars, and NAG's
    gates and alphas at a capped learning rate; each kind split further by the parametrization's
    per-tensor learning-rate, weight-decay and epsilon factors (`parametrization.tensor_rules`;
    all 1 under `standard`, which leaves exactly these three groups). A group's `lr_scale` is
    what the schedule's rate is multiplied by.

    The step is torch's fused AdamW (one kernel over all tensors, not a Python loop of per-tensor
    ops) wherever every parameter sits on a device it supports (CPU, CUDA): the same update to
    rounding, in less than half the loop's time on CPU."""
    rules = tensor_rules(model)
    gate_scale = min(1.0, optim.nag_gate_lr / optim.lr)
    groups: dict[tuple, dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:  # e.g. frozen ANCRe coefficients
            continue
        gate = ".gate." in name or name.endswith(".alpha")
        kind = "gate" if gate else "decay" if p.dim() >= 2 else "no_decay"
        rule = rules[name]
        lr_scale = (gate_scale if gate else 1.0) * rule.lr_scale
        decay = optim.weight_decay * rule.weight_decay_scale if kind == "decay" else 0.0
        eps = ADAM_EPS * rule.eps_scale
        group = groups.setdefault(
            (kind, lr_scale, decay, eps), {"params": [], "weight_decay": decay, "lr_scale": lr_scale, "eps": eps}
        )
        group["params"].append(p)
    order = ("decay", "no_decay", "gate")  # groups by kind: matrices, vectors and scalars, NAG gates
    ordered = [group for _, group in sorted(groups.items(), key=lambda item: order.index(item[0][0]))]
    fused = all(p.device.type in FUSED_ADAMW_DEVICES for p in model.parameters())
    return torch.optim.AdamW(
        ordered, lr=optim.lr, betas=(optim.beta1, optim.beta2), eps=ADAM_EPS, fused=True if fused else None
    )


@dataclass
class TrainOutcome:
    status: TrialStatus  # completed, diverged or stopped
    model: ResidualLM
    state: TrainState
    plan: BudgetPlan
    val_batches: list
    failure_reason: str | None = None


Report = Callable[[CurvePoint], "bool | None"]  # told each point of the curve; return True to stop the run early
OnRung = Callable[[RungRecord], bool]  # told each rung's record; return False to end the run at that rung


def autocast(precision: Precision, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


@torch.no_grad()
def evaluate(model: ResidualLM, batches: list, precision: Precision) -> float:
    """Mean next-token cross-entropy (nats per token) over the fixed held-out batches."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for x, y in batches:
        with autocast(precision, x.device):
            logits = model(x)
        total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
    model.train(was_training)
    return total / count


def _checkpoint_path(run: RunConfig) -> Path | None:
    return Path(run.checkpoint_dir) / "last.pt" if run.checkpoint_dir else None


def _eval_steps(steps: int, evals: int) -> set[int]:
    """Steps after which to validate: evenly spaced, the last one at the end."""
    return {max(1, round(steps * (i + 1) / evals)) for i in range(evals)}


def train(
    cfg: ArchConfig,
    budget_flops: float,
    corpus: TokenizedCorpus,
    *,
    optim: OptimConfig = OptimConfig(),
    run: RunConfig = RunConfig(),
    seed: int = 0,
    report: Report | None = None,
    model_hook: Callable[[ResidualLM], object] | None = None,
    spacing: RungSpacing | None = None,
    on_rung: OnRung | None = None,
) -> TrainOutcome:
    """Train `cfg` on `corpus` for the iso-FLOP token budget of `budget_flops`. Raises InfeasibleBudget.

    `model_hook(model)` runs right after the model is built, before the optimiser is built and
    before any checkpoint is loaded (pretraining uses it to load frozen ANCRe coefficients). Training
    and validation batches go to the device the model is on after the hook.

    The learning rate follows `optim.schedule` (`workers.training.schedules`). With `spacing` the run is a budget
    ladder (`workers.ladder.plans`, warmup-stable-decay only): `budget_flops` is the top rung, each lower rung
    is measured on a cooldown branch, and `on_rung(record)` is told every rung's `RungRecord` in order;
    returning False ends the run there (status completed, the rung's loss).

    The loop stays whole, in numbered steps, so that the order of a step's parts reads in one place.
    """
    # 1. Plan the budget and build everything under the seed.
    rungs, plan, optim, schedule = _plan(cfg, budget_flops, corpus, optim, run, spacing)
    torch.manual_seed(seed)
    model = build_model(cfg).train()
    if model_hook is not None:
        model_hook(model)
    opt = build_optimizer(model, optim)
    batches = TrainBatches(corpus.train, cfg.seq_len, run.batch_size, seed)
    device = next(model.parameters()).device  # where model_hook put the model
    val = [
        (x.to(device), y.to(device))
        for x, y in validation_batches(corpus.val, cfg.seq_len, run.eval_sequences, run.batch_size)
    ]
    # 2. Resume from the last checkpoint, if any.
    ckpt = _checkpoint_path(run)
    state = load_checkpoint(ckpt, cfg, model, opt, batches) if ckpt and ckpt.exists() else TrainState()
    eval_at = sorted(_eval_steps(plan.steps, run.evals))
    while state.step < plan.steps:
        # 3. At a lower rung's branch point: measure that rung on a cooldown branch.
        while (rung := schedule.rung_branching_at(state.step, done=len(state.rungs))) is not None:
            ended = _branch_rung(model, opt, batches, val, optim, run, device, state, schedule, rung, on_rung, seed)
            if ended is not None:
                return ended
        # 4. One optimisation step; a non-finite loss ends the run.
        lr = schedule.at(state.step)
        loss = _train_step(model, opt, next(batches), lr, optim, run.precision, device, state)
        if not math.isfinite(loss):
            return TrainOutcome(
                TrialStatus.DIVERGED, model, state, plan, val, f"non-finite training loss at step {state.step}"
            )
        # 5. Validate, report, checkpoint.
        if state.step in eval_at:
            state.val_loss = evaluate(model, val, run.precision)
            if not math.isfinite(state.val_loss):
                return TrainOutcome(
                    TrialStatus.DIVERGED, model, state, plan, val, f"non-finite validation loss at step {state.step}"
                )
        eval_point = (eval_at.index(state.step) + 1, len(eval_at)) if state.step in eval_at else None
        stop = _record_progress(state, plan, run, report, eval_point, lr)
        if ckpt and run.checkpoint_every and state.step % run.checkpoint_every == 0:
            save_checkpoint(ckpt, cfg, optim, model, opt, batches, state)
        if stop and state.step < plan.steps:
            return TrainOutcome(TrialStatus.STOPPED, model, state, plan, val, f"stopped early at step {state.step}")
    # 6. The top rung is the main run itself.
    if rungs and len(state.rungs) < len(rungs):
        state.rungs.append(_rung_record(rungs[-1], state.val_loss, state, state.training_flops, seed))
        if on_rung is not None:
            on_rung(state.rungs[-1])
    return TrainOutcome(TrialStatus.COMPLETED, model, state, plan, val)


def _branch_rung(
    model, opt, batches, val, optim, run, device, state, schedule, rung, on_rung, seed
) -> TrainOutcome | None:
    """Measure `rung` on a cooldown branch; the outcome if the run ends there (a diverged branch, or
    `on_rung` declining to promote: the run ends as the cooled branch), else None."""
    branch, branch_state = _measure_rung_on_a_branch(
        model, opt, batches, val, optim, run, device, state, schedule, rung, seed
    )
    result = state.rungs[-1]
    if not math.isfinite(result.val_loss):
        reason = f"non-finite loss in the cooldown of rung {rung.index} (step {branch_state.step})"
        return TrainOutcome(TrialStatus.DIVERGED, branch, branch_state, rung.plan, val, reason)
    if on_rung is not None and not on_rung(result):
        return TrainOutcome(TrialStatus.COMPLETED, branch, branch_state, rung.plan, val)
    return None


def _plan(
    cfg: ArchConfig,
    budget_flops: float,
    corpus: TokenizedCorpus,
    optim: OptimConfig,
    run: RunConfig,
    spacing: RungSpacing | None,
) -> tuple[list[Rung], BudgetPlan, OptimConfig, Schedule]:
    """The run's rungs (none without a ladder), its budget plan, the optimiser settings at its token
    horizon, and the learning-rate schedule it follows."""
    if cfg.vocab_size < corpus.vocab_size:
        raise ValueError(f"vocab_size={cfg.vocab_size} is smaller than the corpus vocabulary ({corpus.vocab_size})")
    rungs = plan_ladder(cfg, budget_flops, spacing, run.batch_size) if spacing else []
    plan = rungs[-1].plan if rungs else plan_budget(cfg, budget_flops, run.batch_size)
    requested_lr, optim = optim.lr, optim.at_horizon(cfg.residual, plan.tokens)
    if optim.lr != requested_lr:
        log.info("horizon rule: lr %.3g for %d tokens (%.3g requested)", optim.lr, plan.tokens, requested_lr)
    schedule = Schedule(
        optim.schedule,
        optim.lr,
        optim.min_lr_ratio,
        optim.warmup,
        plan.steps,
        rungs or [Rung(0, budget_flops, plan)],  # a plain run is a ladder of one rung
        optim.cooldown,
    )
    return rungs, plan, optim, schedule


def _rung_record(rung: Rung, val_loss: float, state: TrainState, training_flops: float, seed: int) -> RungRecord:
    """What a rung measured: its budget, tokens (D_r), loss after its cooldown, the FLOPs that bought it, and the
    seconds spent training so far (the main run and every branch up to this rung)."""
    return RungRecord(
        rung=rung.index,
        seed=seed,
        budget_flops=rung.budget_flops,
        steps=rung.steps,
        tokens=rung.plan.tokens,
        val_loss=val_loss,
        training_flops=training_flops,
        train_seconds=state.step_seconds,
    )


def _measure_rung_on_a_branch(model, opt, batches, val, optim, run, device, state, schedule, rung, seed):
    """Copy the main run's model, optimiser and data position, decay the copy over `rung`'s cooldown,
    evaluate it, and put the data position and RNG back: the main run goes on bit-exactly as without.

    Appends the rung's result to `state.rungs`; returns the branch's model and its state (what a run
    ending at this rung ends as: the cooled model, the rung's tokens and FLOPs, the curve so far)."""
    rng, position = torch.get_rng_state(), batches.state_dict()
    opt.zero_grad(set_to_none=True)  # the last step's gradients are never read again: not worth copying
    branch = copy.deepcopy(model)
    branch_opt = build_optimizer(branch, optim)
    branch_opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # load_state_dict alone would share tensors
    branch_state = TrainState(step=state.step, tokens_seen=state.tokens_seen, training_flops=state.training_flops)
    loss = 0.0
    while branch_state.step < rung.steps and math.isfinite(loss):
        loss = _train_step(
            branch,
            branch_opt,
            next(batches),
            schedule.at(branch_state.step, rung),
            optim,
            run.precision,
            device,
            branch_state,
        )
    val_loss = evaluate(branch, val, run.precision) if math.isfinite(loss) else math.inf
    batches.load_state_dict(position)
    torch.set_rng_state(rng)
    state.step_seconds += branch_state.step_seconds
    state.rungs.append(_rung_record(rung, val_loss, state, branch_state.training_flops, seed))
    ended = replace(
        branch_state,
        val_loss=val_loss,
        curve=state.curve,
        rungs=state.rungs,
        step_seconds=state.step_seconds,
        branch_flops=state.branch_flops,
    )
    state.branch_flops += branch_state.training_flops - state.training_flops
    return branch, ended


def _train_step(
    model, opt, batch, lr: float, optim: OptimConfig, precision: Precision, device, state: TrainState
) -> float:
    """Forward, backward, clip, update at learning rate `lr`. Returns the batch loss (nats/token)."""
    start = time.perf_counter()
    for group in opt.param_groups:
        group["lr"] = lr * group["lr_scale"]
    x, y = (t.to(device, non_blocking=True) for t in batch)
    with autocast(precision, device):
        logits = model(x)
    loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    value = loss.item()  # syncs with the device once per step ...
    executed = sum(model.last_executed_flops().values())  # ... so reading the routers' counts stalls nothing more
    aux = model.auxiliary_loss()  # MoD predictors' cross-entropy (mod_routing="predictor"), else None
    if math.isfinite(value):
        opt.zero_grad(set_to_none=True)
        (loss if aux is None else loss + aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), optim.grad_clip)
        opt.step()
        state.step += 1
        state.tokens_seen += y.numel()
        state.training_flops += TRAINING_FLOPS_PER_FORWARD_FLOP * executed
        state.train_loss = value if math.isnan(state.train_loss) else 0.9 * state.train_loss + 0.1 * value
    state.step_seconds += time.perf_counter() - start
    return value


def measured_step_seconds(
    cfg: ArchConfig, batch_size: int, optim: OptimConfig = OptimConfig(), steps: int = 3
) -> float:
    """Seconds of one training step of `cfg` on `batch_size` random sequences (forward, backward, clip and update as
    the trainer runs them; the median of `steps` after one untimed step), on the CPU with torch's threads as they
    are set: what a plan of a run's wall time is read from."""
    torch.manual_seed(0)
    model = build_model(cfg).train()
    opt = build_optimizer(model, optim)
    tokens = torch.randint(cfg.vocab_size, (batch_size, cfg.seq_len + 1))
    batch, state, times = (tokens[:, :-1], tokens[:, 1:]), TrainState(), []
    for _ in range(steps + 2):
        start = time.perf_counter()
        _train_step(model, opt, batch, optim.lr, optim, "fp32", torch.device("cpu"), state)
        times.append(time.perf_counter() - start)
    return statistics.median(times[2:])


def _record_progress(
    state: TrainState,
    plan: BudgetPlan,
    run: RunConfig,
    report: Report | None,
    eval_point: tuple[int, int] | None,
    lr: float,
) -> bool:
    """Append to the loss curve (with `lr`, the schedule's rate of the step just taken) and call `report`;
    True if the caller asked to stop.

    Validation points carry `eval_index` k of `evals` (at fixed shares of the budget), so trials
    of different lengths can be compared point for point (nas.search.early_stop).
    """
    evaluated = eval_point is not None
    if not (evaluated or state.step % run.report_every == 0 or state.step == plan.steps):
        return False
    point = CurvePoint(
        step=state.step,
        tokens=state.tokens_seen,
        train_loss=state.train_loss,
        training_flops=state.training_flops,
        lr=lr,
        planned_steps=plan.steps,
        val_loss=state.val_loss if evaluated else None,
        eval_index=eval_point[0] if eval_point is not None else None,
        evals=eval_point[1] if eval_point is not None else None,
    )
    state.curve.append(point)
    return bool(report(point)) if report else False
