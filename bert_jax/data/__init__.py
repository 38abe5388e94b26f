"""Pre-training data: text → tokens → instances → prepared records → batches → masks."""
