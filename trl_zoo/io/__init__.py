"""Files trl_zoo reads and writes outside a run: the policy cache and its lock, GGUF checkpoints, A*-PO's reference
rewards (a dataset column sampled before the run)."""
