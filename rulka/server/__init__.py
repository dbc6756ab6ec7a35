"""rulka.server: the relay (``Server``) and the ``rulka-server`` command."""

from __future__ import annotations

from rulka.server.server import Server

__all__ = ["Server"]
