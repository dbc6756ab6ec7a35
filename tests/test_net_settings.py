from __future__ import annotations

import pytest

from rulka.errors import ConfigError
from rulka.net.settings import NetworkSettings


def test_defaults_and_dict():
    s = NetworkSettings.from_config({"host": "box.lan", "port": 6000, "partial_timeout_s": 5})
    assert (s.host, s.port, s.partial_timeout_s, s.chunk_bytes) == ("box.lan", 6000, 5.0, 262144)
    assert NetworkSettings.from_config(None) == NetworkSettings()


def test_overrides_win_and_none_is_ignored():
    s = NetworkSettings.from_config({"port": 6000}, port=0, host=None)
    assert (s.port, s.host) == (0, "127.0.0.1")


def test_run_config_section_is_mapped():
    from rulka.config import load_config

    net = load_config(None, overrides=["network.server_host=10.1.2.3", "network.tls=false",
                                       "network.allow_plain_tcp=true",
                                       "network.reconnect_backoff_s=[0.25, 4.0]"], env_file=None).network
    s = NetworkSettings.from_config(net)
    assert (s.host, s.allow_plain_tcp, s.reconnect_backoff_s, s.reconnect_backoff_max_s) == (
        "10.1.2.3", True, 0.25, 4.0)


def test_dumped_run_config_section_is_mapped():
    from rulka.config import load_config

    net = load_config(None, overrides=["network.server_host=box", "network.port=7000"], env_file=None).network
    s = NetworkSettings.from_config(dict(net.model_dump()))
    assert (s.host, s.port, s.reconnect_backoff_s, s.allow_plain_tcp) == ("box", 7000, 0.5, False)
    assert s.reconnect_backoff_max_s == net.reconnect_backoff_s[1]


@pytest.mark.parametrize("bad", [{"port": "x"}, {"chunk_bytes": 0}, {"allow_plain_tcp": "yes"},
                                 {"port": 70000}, {"chunk_bytes": 64 << 20}, {"heartbeat_s": -1}])
def test_bad_values_are_config_errors(bad):
    with pytest.raises(ConfigError, match="network"):
        NetworkSettings.from_config(bad)
