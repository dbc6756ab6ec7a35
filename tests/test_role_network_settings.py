"""The role commands hand the transport the whole network section, not a subset."""

from __future__ import annotations

from rulka.config import load_config
from rulka.plugins import network_settings


def test_every_network_key_reaches_the_transport_and_the_command_line_wins():
    cfg = load_config(overrides=["network.tls=false", "network.allow_plain_tcp=true", "network.heartbeat_s=2.5",
                                 "network.outbox_messages=17", "network.reconnect_backoff_s=[1.0, 8.0]",
                                 "network.server_host=relay.example", "network.port=40000"], env_file=None)
    s = network_settings(cfg)
    assert (s.host, s.port, s.allow_plain_tcp, s.heartbeat_s, s.outbox_messages) == (
        "relay.example", 40000, True, 2.5, 17)
    assert (s.reconnect_backoff_s, s.reconnect_backoff_max_s) == (1.0, 8.0)
    s = network_settings(cfg, host="10.0.0.5", port=41000)
    assert (s.host, s.port) == ("10.0.0.5", 41000)


def test_no_config_gives_the_defaults():
    s = network_settings(None, host="h")
    assert (s.host, s.port, s.allow_plain_tcp) == ("h", 55555, False)
