"""A custom loss in ~20 lines: register it with `trl_zoo.register_loss`, then train with it by name.

The loss is a pure function of tensors (`PolicyBatch` in, `PolicyTerm` out); the trainer handles the model, the
masks, the KL term and the aggregation named at registration. This one keeps PPO's ratio but saturates it softly
instead of clipping it, f(r) = 1 + ε·tanh((r − 1)/ε): slope 1 at r = 1 (on-policy it is REINFORCE), and the term
can never move more than ε away from 1.

    python examples/custom_loss.py [any `trl-zoo train` flag, e.g. --max_steps 100]
"""

import sys

import torch

from trl_zoo import PolicyBatch, PolicyTerm, register_loss
from trl_zoo.cli import main


@register_loss(
    "tanh_clip",
    description="PPO ratio softly saturated, 1 + ε·tanh((r − 1)/ε), GRPO aggregation",
    aggregation="sequence_mean",
    source="examples/custom_loss.py",
)
def tanh_clip_loss(batch: PolicyBatch, args) -> PolicyTerm:
    ratio = torch.exp(batch.log_ratio)  # r = π_θ / π_old per token, (B, T)
    gated = 1 + args.epsilon * torch.tanh((ratio - 1) / args.epsilon)
    return PolicyTerm(loss=-gated * batch.advantages, metrics={"tanh_clip/ratio_mean": ratio.detach()})


if __name__ == "__main__":
    # Registered in this process, so the CLI (and GRPOConfig's validation) know the name now.
    sys.exit(main(["train", "--loss_type", "tanh_clip", *sys.argv[1:]]))
