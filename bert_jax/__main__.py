"""`python -m bert_jax SUBCOMMAND ...` is the same as `bert-jax SUBCOMMAND ...`."""

from bert_jax.commands.cli import run

if __name__ == "__main__":  # not when a spawned worker process imports it
    run()
