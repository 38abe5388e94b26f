"""The engine every job shares: state, steps, optimizer, sharding, checkpoints, logging."""
