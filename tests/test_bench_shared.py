"""The timing loops the bench scripts share: the bare learner's (bench/learner.py, used by allocator
and trainer_loop) and the tlspyo relay's (bench/transport.py, used by peer_tmrl for TMRL's Server)."""

from __future__ import annotations

from typing import Any

from bench.learner import train_for
from bench.transport import tlspyo_throughput


class CountingAgent:
    def __init__(self) -> None:
        self.batches: list[Any] = []

    def train(self, batch: Any) -> None:
        self.batches.append(batch)


class Memory:
    def __init__(self) -> None:
        self.asked: list[int] = []

    def sample(self, batch_size: int) -> tuple[str, int]:
        self.asked.append(batch_size)
        return ("batch", len(self.asked))


def test_train_for_trains_on_sampled_batches_and_counts_every_update() -> None:
    agent, memory = CountingAgent(), Memory()
    n, elapsed = train_for(agent, memory, 32, seconds=0.0, min_updates=5)
    assert n == 5 and memory.asked == [32] * 5
    assert agent.batches == [("batch", i) for i in range(1, 6)]  # each update on its own fresh sample
    assert elapsed >= 0.0
    n, elapsed = train_for(agent, memory, 8, seconds=0.05)
    assert n == len(agent.batches) - 5 >= 1 and elapsed >= 0.05


class Relay:
    """A tlspyo relay in miniature: what is produced waits until the consumer notifies, then
    ``receive_all`` hands over what it asked for; ``lose`` messages never arrive."""

    def __init__(self, lose: int = 0) -> None:
        self.held: list[bytes] = []
        self.ready: list[bytes] = []
        self.lose = lose
        self.notified: list[dict[str, int]] = []

    def produce(self, obj: bytes, group: str) -> None:
        assert group == "trainers"
        if self.lose:
            self.lose -= 1
            return
        self.held.append(obj)

    def notify(self, groups: dict[str, int]) -> None:
        self.notified.append(groups)
        self.ready += self.held
        self.held = []

    def receive_all(self, blocking: bool = False) -> list[bytes]:
        out, self.ready = self.ready, []
        return out


def test_tlspyo_throughput_fetches_as_tmrls_trainer_until_all_arrive() -> None:
    relay = Relay()
    got, seconds = tlspyo_throughput(relay, relay, "trainers", 1000, 7)
    assert got == 7 and seconds > 0
    assert relay.notified[0] == {"trainers": -1} and len(relay.notified) >= 2  # asks before and after sending


def test_tlspyo_throughput_gives_up_after_its_timeout_and_says_how_many_came() -> None:
    relay = Relay(lose=2)
    got, seconds = tlspyo_throughput(relay, relay, "trainers", 10, 5, timeout_s=0.1)
    assert got == 3 and 0.1 <= seconds < 5
