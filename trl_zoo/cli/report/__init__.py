"""Finished runs read back and compared: `trl-zoo compare`, and the report `train` and `compare` write.

    run_log.py   the run log (metrics.jsonl, summary.json): written during training, read back as a `Run`
    verdict.py   the verdict on runs: the winner, identical runs, paired differences over seeds, evaluation noise
    report.py    the report: results.md's tables and verdict, metrics.csv / .jsonl, the curves
    compare.py   `trl-zoo compare`: one run per loss and seed, each a `trl-zoo train` process, then the report
"""
