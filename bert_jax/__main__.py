"""`python -m bert_jax SUBCOMMAND ...` is the same as `bert-jax SUBCOMMAND ...`."""

from bert_jax.cli import run

run()
