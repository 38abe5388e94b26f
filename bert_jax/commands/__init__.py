"""Subcommands of `bert-jax` (see `bert_jax.commands.cli`)."""
