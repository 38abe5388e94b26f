"""Files: atomic writes (and, for buckets, the paths they go to)."""
