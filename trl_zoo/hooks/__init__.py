"""Trainer mixins, one concept each, composed by `trl_zoo.GRPOTrainer` (its bases, in `trl_zoo/trainer.py`, are the
method resolution order). Each overrides TRL's methods, or a seam of the loss step (`trl_zoo/hooks/loss_step.py`), and
calls `super()`."""
