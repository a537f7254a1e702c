"""The plumbing of the trainer's step: the component base (`component.py`), the pipeline (`pipeline.py`) and its
table (`hook_points.py`: which component takes part in which hook point, in what order, and how the hook points nest),
the two seams the trainer builds on (`generation.py`, a generation batch of rounds; `loss_step.py`, the loss of a
micro-batch), and the door (`trl_access.py`, the only module that touches TRL's private names, whose overrides of
TRL's methods call the hook points). The components themselves are trl_zoo/components/."""
