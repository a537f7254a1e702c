"""Files trl_zoo reads and writes outside a run: the policy cache and its lock, GGUF checkpoints, A*-PO's reference
rewards (a dataset column sampled before the run). A run's own files are written by `trl_zoo/run_files.py` (never
through a symbolic link), below every layer that writes one."""
