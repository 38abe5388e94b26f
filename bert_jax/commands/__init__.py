"""Subcommands of `bert-jax` (see `bert_jax.cli`)."""
