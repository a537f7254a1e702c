"""skip_zero_advantage: sequences with Â = 0 leave the forward/backward, and the loss and gradients stay the same
(to 1e-6) for every row-local loss, off-policy (num_iterations = 2, ratios ≠ 1) and with gradient accumulation.
Losses or settings where Â = 0 rows still count are refused with a clear error."""

import pytest
import torch
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

import trl_zoo
from tests.scripts.resample_two_processes import half_constant_reward
from tests.tiny import make_trainer, relative_error
from tests.trl_internals import generate_and_score, metric_values, token_logps_and_entropies
from trl_zoo.config.compute import check_zero_advantage_skip
from trl_zoo.config.probes import zero_advantage_probe
from trl_zoo.config.run_plan import RunPlan
from trl_zoo.registry import LOSSES, Entry
from trl_zoo.specs import LossSpec

ROW_LOCAL_LOSSES = ["grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "gmpo", "vespo", "topr"]
COUPLED = "the other sequences' terms or gradients depend on the rows with Â = 0"


def _use_loss(trainer, name):
    trainer.args.loss_type = name
    trainer.plan = RunPlan.of(trainer.args)


@pytest.fixture(scope="module")
def setup():
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=half_constant_reward, skip_zero_advantage=True,
        num_iterations=2, gradient_accumulation_steps=2, max_completion_length=6,
    )
    assert trainer.pipeline.get("skip_zero_advantage").active
    torch.manual_seed(0)
    trainer.model.train()
    batch = generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))
    assert "old_per_token_logps" in batch
    torch.manual_seed(3)
    micro_batches = split_tensor_dict(shuffle_sequence_dict(batch), 2)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # move the policy away from π_old so that ratios ≠ 1 and the clips bite
        for parameter in trainer.model.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    forwarded = []
    trainer.model.register_forward_pre_hook(
        lambda module, args, kwargs: forwarded.append(kwargs["input_ids"].size(0)), with_kwargs=True
    )
    return trainer, micro_batches, forwarded


def _loss_and_gradients(trainer, micro_batches, forwarded, skip):
    trainer.pipeline.get("skip_zero_advantage").active = skip
    trainer.model.zero_grad()
    forwarded.clear()
    losses = []
    for micro_batch in micro_batches:
        trainer.current_gradient_accumulation_steps = len(micro_batches)
        loss = trainer.compute_loss(trainer.model, micro_batch)
        loss.backward()
        losses.append(loss.detach())
    gradients = {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.grad is not None}
    return torch.stack(losses), gradients, list(forwarded)


@pytest.mark.parametrize("loss_type", ROW_LOCAL_LOSSES)
def test_skipping_leaves_loss_and_gradients_unchanged(setup, loss_type):
    trainer, micro_batches, forwarded = setup
    _use_loss(trainer, loss_type)
    check_zero_advantage_skip(trainer.plan.loss_entry, trainer.args)  # accepted: no ValueError
    active_rows = [int((mb["advantages"] != 0).sum()) for mb in micro_batches]
    assert 0 < active_rows[0] < 8 and active_rows[1] == 0  # a mixed micro-batch, and one with nothing to train

    full_losses, full_gradients, full_rows = _loss_and_gradients(trainer, micro_batches, forwarded, skip=False)
    skip_losses, skip_gradients, skip_rows = _loss_and_gradients(trainer, micro_batches, forwarded, skip=True)

    assert full_rows == [mb["advantages"].numel() for mb in micro_batches]
    assert skip_rows == [max(active, 1) for active in active_rows]  # only the rows with Â ≠ 0 ran
    assert torch.any(full_losses != 0)
    # A 4-row and an 8-row forward round differently on different CPUs (measured up to 5e-7); a real leak is ~1e-2.
    assert relative_error(skip_losses, full_losses) <= 1e-5
    assert full_gradients.keys() == skip_gradients.keys() and full_gradients
    for name, gradient in full_gradients.items():
        assert relative_error(skip_gradients[name], gradient) <= 1e-5, name


def test_logged_entropy_is_that_of_the_trained_rows(setup):
    trainer, micro_batches, forwarded = setup
    _use_loss(trainer, "grpo")
    micro_batch = micro_batches[0]
    with torch.no_grad():
        _, entropies, _ = token_logps_and_entropies(
            trainer, trainer.model, torch.cat([micro_batch["prompt_ids"], micro_batch["completion_ids"]], 1),
            torch.cat([micro_batch["prompt_mask"], micro_batch["completion_mask"]], 1),
            micro_batch["completion_ids"].size(1), compute_entropy=True,
        )
    active = micro_batch["advantages"] != 0
    mask = micro_batch["completion_mask"][active].float()
    expected = ((entropies[active] * mask).sum() / mask.sum()).item()
    trainer.pipeline.get("skip_zero_advantage").active = True
    trainer.compute_loss(trainer.model, micro_batch)
    assert metric_values(trainer)["entropy"][-1] == pytest.approx(expected, rel=1e-5)


def test_skipping_waits_for_the_device_once_per_micro_batch(setup):
    """Finding the rows to run is one host sync (`nonzero`) on top of the full forward's, whether some rows, none
    or all of them have Â ≠ 0: on a GPU every sync drains the launch queue of a launch-bound model (the fourth
    time-to-target study found skipping slower per step on a 135 M model)."""
    from benchmarks.host_syncs import counting_syncs
    trainer, micro_batches, forwarded = setup
    _use_loss(trainer, "grpo")
    trainer.current_gradient_accumulation_steps = len(micro_batches)
    mixed = micro_batches[0]
    every_row = {**mixed, "advantages": torch.where(mixed["advantages"] == 0, 1.0, mixed["advantages"])}
    no_row = {**mixed, "advantages": torch.zeros_like(mixed["advantages"])}
    counts = {}
    for name, micro_batch, skip in (("full", mixed, False), ("mixed", mixed, True), ("every row", every_row, True),
                                    ("no row", no_row, True)):
        trainer.pipeline.get("skip_zero_advantage").active = skip
        with counting_syncs() as calls:
            trainer.compute_loss(trainer.model, micro_batch).backward()
        trainer.model.zero_grad()
        counts[name] = calls
    for name in ("mixed", "every row", "no row"):  # a one-row forward may skip one of transformers' mask checks
        others = {method: count for method, count in counts[name].items() if method != "nonzero"}
        assert counts[name]["nonzero"] == 1 and counts["full"]["nonzero"] == 0, (name, counts[name])
        assert all(count <= counts["full"][method] for method, count in others.items()), (name, counts)


def leaks_when_advantage_is_zero(batch, args):  # an entropy-like term every row gets
    return trl_zoo.PolicyTerm(-batch.advantages * batch.logps + 0.01 * batch.logps)


def couples_rows(batch, args):  # stop-gradient of the batch's lowest log-prob token, wherever it is
    lowest = batch.logps.detach() == batch.logps.detach().min()
    logps = torch.where(lowest, batch.logps.detach(), batch.logps)
    return trl_zoo.PolicyTerm(-batch.advantages * logps)


def divides_by_batch_tokens(batch, args):  # −r·Â·(B·T)/N: a token mean over the batch, inside the term
    return trl_zoo.PolicyTerm(-torch.exp(batch.log_ratio) * batch.advantages * batch.mask.numel() / batch.mask.sum())


def test_row_coupled_or_leaking_losses_are_refused(setup):
    trainer, _, _ = setup

    assert zero_advantage_probe(leaks_when_advantage_is_zero, trainer.args) == "its term is not 0 where Â = 0"
    assert zero_advantage_probe(couples_rows, trainer.args) == COUPLED
    for name in ROW_LOCAL_LOSSES:
        assert zero_advantage_probe(LOSSES.get(name).fn, trainer.args) is None

    leaky = Entry("leaky", leaks_when_advantage_is_zero, "test loss", spec=LossSpec())
    with pytest.raises(ValueError, match="^skip_zero_advantage: the loss 'leaky' is not inert for Â = 0"):
        check_zero_advantage_skip(leaky, trainer.args)
    declared = Entry("declared", couples_rows, "test loss", spec=LossSpec(zero_advantage_is_inert=False))
    with pytest.raises(ValueError, match="^skip_zero_advantage: the loss 'declared' declares"):
        check_zero_advantage_skip(declared, trainer.args)


def _rounded_differently_on_other_batch_sizes(loss_fn, factor):
    """`loss_fn` as on a CPU whose kernels round a batch of another size differently: its term × `factor` when the
    batch size differs from that of the first call. Returns the wrapped loss and the list of perturbed sizes."""
    sizes, perturbed = [], []

    def loss(batch, args):
        term = loss_fn(batch, args)
        sizes.append(batch.logps.size(0))
        if sizes[-1] == sizes[0]:
            return term
        perturbed.append(sizes[-1])
        return trl_zoo.PolicyTerm(term.loss * factor, term.metrics)

    return loss, perturbed


def test_probe_tolerates_rounding_that_depends_on_the_batch_size(setup):
    """The probe compares the kept rows with Â ≠ 0 of the full batch and of the batch without the Â = 0 rows; a
    few ulps apart (another CPU's vector tail) is rounding, a relative 1e-3 is a dependence on the other rows."""
    trainer, _, _ = setup
    few_ulps = 1 + 4 * torch.finfo(torch.float32).eps
    for name in ["grpo", "sapo", "gspo", "cispo"]:
        loss, perturbed = _rounded_differently_on_other_batch_sizes(LOSSES.get(name).fn, few_ulps)
        assert zero_advantage_probe(loss, trainer.args) is None, name
        assert perturbed == [4], name  # the one call without the four Â = 0 rows was off by a few ulps
        loss, _ = _rounded_differently_on_other_batch_sizes(LOSSES.get(name).fn, 1 + 1e-3)
        assert zero_advantage_probe(loss, trainer.args) == COUPLED, name

    for coupled in [couples_rows, divides_by_batch_tokens, LOSSES.get("clip_cov").fn, LOSSES.get("kl_cov").fn]:
        assert zero_advantage_probe(coupled, trainer.args) == COUPLED, coupled
        loss, _ = _rounded_differently_on_other_batch_sizes(coupled, few_ulps)
        assert zero_advantage_probe(loss, trainer.args) == COUPLED, coupled
    loss, _ = _rounded_differently_on_other_batch_sizes(leaks_when_advantage_is_zero, few_ulps)
    assert zero_advantage_probe(loss, trainer.args) == "its term is not 0 where Â = 0"


def test_kl_term_is_refused_at_init():
    with pytest.raises(ValueError, match=r"^skip_zero_advantage: .*beta=0.04"):
        make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, skip_zero_advantage=True, beta=0.04)
