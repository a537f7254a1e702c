"""Files trl_zoo reads and writes outside a run: the policy cache and its lock, GGUF checkpoints, A*-PO's reference
rewards (a dataset column sampled before the run); and how it writes a run's own files (`run_files.py`: never through
a symbolic link)."""
