"""Pre-training (§3.1): the MLM/NSP objective, the run, its evaluation, and the TPU plan."""
