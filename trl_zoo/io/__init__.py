"""Files trl_zoo reads and writes outside a run: the policy cache and its lock, GGUF checkpoints."""
