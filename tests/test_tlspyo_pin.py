"""rulka.net.endpoint subclasses tlspyo and reaches past its documented API (tlspyo has no hooks
for a guarded child, a zero-copy receive path or a signed HELLO). Each internal it relies on is
listed there (``TLSPYO_INTERNALS``); these tests check the installed tlspyo still has every one,
built the way rulka builds them, and name what moved when it does not."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re

from rulka.net import endpoint as ep
from rulka.net.wire import deserialize, serialize

REVIEW = ("rulka.net.endpoint was written against tlspyo {tested} and relies on tlspyo internals "
          "(TLSPYO_INTERNALS there): review GuardedEndpoint, GuardedClient and the protocol "
          "subclasses against the installed tlspyo before changing TLSPYO_TESTED")


def _class(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _instances() -> dict[str, object]:
    """One of each tlspyo class, built as rulka's subclasses build them (no process, no socket)."""
    client = ep.GuardedClient(
        ip_server="127.0.0.1", port_server=1, password="pw", serializer=serialize, deserializer=deserialize,
        groups=("g",), local_com_port=1, header_size=10, security="TCP", keys_dir=None, hostname="localhost",
        recon_max_delay=60.0, recon_initial_delay=10.0, recon_factor=1.5, recon_jitter=0.1)
    return {
        "tlspyo.client.Client": client,
        "tlspyo.client.ClientProtocol": ep._Protocol(client=client, password="pw", groups=("g",), header_size=10),
        "tlspyo.client.TLSClientFactory": ep._Factory(client=client),
        "tlspyo.local_protocol_for_client.LocalProtocolForClient": ep._LocalProtocol(client),
        "tlspyo.local_protocol_for_client.LocalProtocolForClientFactory": ep._LocalFactory(client),
    }


def test_the_installed_tlspyo_is_the_release_the_endpoint_was_checked_against():
    installed = importlib.metadata.version("tlspyo")
    assert installed == ep.TLSPYO_TESTED, f"tlspyo {installed} is installed. " + REVIEW.format(tested=ep.TLSPYO_TESTED)


def test_every_tlspyo_internal_the_endpoint_relies_on_is_still_there():
    instances = _instances()
    missing = []
    for dotted, names in ep.TLSPYO_INTERNALS.items():
        cls = _class(dotted)
        target = instances.get(dotted, cls)
        assert isinstance(target, cls) or target is cls, dotted
        missing += [f"{dotted}.{name}" for name in names if not hasattr(target, name)]
    assert not missing, f"gone from tlspyo {importlib.metadata.version('tlspyo')}: {', '.join(missing)}. " \
        + REVIEW.format(tested=ep.TLSPYO_TESTED)


def test_the_endpoint_methods_rulka_calls_read_only_what_guarded_endpoint_sets():
    """GuardedEndpoint skips ``Endpoint.__init__``: the tlspyo methods it calls may read only the
    attributes it sets itself."""
    endpoint_cls = _class("tlspyo.Endpoint")
    read = set()
    for name in ("send_object", "notify", "_send_local", "_deserialize"):
        read |= set(re.findall(r"self\.(\w+)", inspect.getsource(getattr(endpoint_cls, name))))
    methods = {n for n in read if callable(getattr(endpoint_cls, n, None))}
    unknown = read - methods - set(ep.TLSPYO_ENDPOINT_READS)
    assert not unknown, f"tlspyo's Endpoint methods now read {sorted(unknown)}. " + REVIEW.format(tested=ep.TLSPYO_TESTED)
    assigned = set(re.findall(r"self\.(\w+)\s*[,:=]", inspect.getsource(ep.GuardedEndpoint.__init__)))
    assert set(ep.TLSPYO_ENDPOINT_READS) <= assigned
