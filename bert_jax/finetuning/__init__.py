"""Fine-tuning (§4): the run every task shares, its batches, outputs and sweep."""
