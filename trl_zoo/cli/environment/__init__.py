"""What a command meets on the machine it runs on, and how it copes:

    cpu_threads.py             torch's threads on a CPU (`trl grpo`'s launcher's policy: one)
    cpu_run_notice.py          what a real model on a CPU will cost, said before training
    one_gpu.py                 several GPUs and no launcher: the first one, and how to use them all
    ddp_unused_parameters.py   DDP's unused-parameter search as the run's model needs it
    launch_errors.py           under a launch, an error of one process before training stops all, said once
    disk_errors.py             an unwritable output_dir or a full disk, in one line
"""
