"""The worker's components (issue 63): the network side and the episode runner share only what
they are handed (the inbox, the credit gate, the outbox, the counters), the env side never touches
the link, and no worker module grows past 400 lines."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from types import SimpleNamespace

from rulka.net.messages import CandidateRequest, WeightsHeader
from rulka.worker.network import CreditGate, WeightsInbox

WORKER = Path(__file__).resolve().parents[1] / "rulka" / "worker"
ENV_SIDE = ("episodes.py", "policy.py", "buffer.py")


def _blob(version: int) -> SimpleNamespace:
    return SimpleNamespace(version=version, run_id="r", tensors={}, header={})


def test_no_worker_module_is_over_400_lines():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in WORKER.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 400} == {}


def test_the_env_side_never_imports_the_transport():
    for name in ENV_SIDE:
        tree = ast.parse((WORKER / name).read_text(encoding="utf-8"))
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        assert not {m for m in imported if m and m.startswith(("rulka.net.link", "rulka.net.tls", "rulka.net.local"))}, name
        assert "link" not in {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}, name


def test_the_inbox_keeps_the_newest_version_and_the_evaluation_slot_apart():
    inbox = WeightsInbox()
    plain, candidate = WeightsHeader(), WeightsHeader(candidate=True, candidate_request=CandidateRequest(2))
    assert inbox.offer(_blob(2), candidate) and inbox.arrived.is_set()
    assert inbox.offer(_blob(3), plain)  # replaces v2 as the pending version, not as the evaluation one
    assert not inbox.offer(_blob(3), plain) and not inbox.offer(_blob(1), plain)  # not newer than pending
    assert inbox.take()[0].version == 3 and inbox.take() is None
    assert inbox.take_eval()[0].version == 2 and inbox.take_eval() is None
    inbox.loaded(3)
    assert not inbox.offer(_blob(3), plain)  # not newer than what runs
    assert inbox.offer(_blob(4), plain)


def test_the_credit_gate_holds_at_the_limit_and_lets_the_worker_give_up():
    gate = CreditGate()
    assert gate.over_limit(10**6)[0] is False  # no credit yet: act
    gate.grant(5)
    assert gate.wake.is_set() and gate.over_limit(4)[0] is False
    over, silent_s = gate.over_limit(5)
    assert over and 0.0 <= silent_s < 5.0
    time.sleep(0.01)
    assert gate.over_limit(5)[1] >= 0.01
    gate.give_up()
    assert gate.over_limit(5)[0] is False
    gate.wake.clear()
    gate.welcome()
    assert gate.welcomed.is_set() and gate.wake.is_set()
