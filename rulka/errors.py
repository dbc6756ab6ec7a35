"""Errors a user can fix. Commands print them as one line and exit non-zero (no traceback)."""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix: a missing file, bad YAML, an unreachable server, a bad value.

    Command-line entry points catch it, print ``error: <message>`` on one line and exit with
    ``exit_code``.
    """

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(UserError):
    """The run configuration is invalid: unknown key, wrong type, inconsistent values."""


class BadInput(Exception):
    """Bytes that came from the network or a file are malformed, oversized or unauthenticated.

    Never fatal: the receiver logs one line, bumps a counter and drops the input.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``exc`` as one line of at most ``limit`` characters (for ``error: ...`` messages)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
