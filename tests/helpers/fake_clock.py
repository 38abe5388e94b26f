"""A clock the test moves by hand (``clock.now += 4``), for code that takes a `clock`."""


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
