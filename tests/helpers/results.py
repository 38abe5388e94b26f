"""The result protocol of the tests' subprocess workers: a worker prints one line
``RESULT {json}`` (`emit`); the test reads it back (`parse`), whatever else was printed."""

import json

PREFIX = "RESULT "


def emit(result: object) -> None:
    print(PREFIX + json.dumps(result), flush=True)


def parse(stdout: str) -> dict:
    """The worker's result; a clear failure (with the output's tail) when it printed none."""
    for line in stdout.splitlines():
        if line.startswith(PREFIX):
            return json.loads(line[len(PREFIX) :])
    raise AssertionError(f"the worker printed no {PREFIX.strip()} line; its output ended:\n{stdout[-2000:]}")
