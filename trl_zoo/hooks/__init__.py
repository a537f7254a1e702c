"""Trainer mixins, one concept each, composed by `trl_zoo.GRPOTrainer` (its bases, in `trl_zoo/trainer.py`, are the
method resolution order). Each overrides a seam and calls `super()`: one of ours (the generation seam's hook points,
the loss step's), or the seam `_zoo_<name>` of a TRL method, to which the door (`trl_access.py`, the only module that
touches TRL's private names) forwards TRL's `_<name>`."""
