"""Shared fixtures for every test directory (tests/ and plugins/*/tests)."""

import signal

pytest_plugins = ["pysb_core.testing"]


def pytest_configure() -> None:
    """Give the programs the tests start the signal dispositions of a shell's command.

    A shell without job control (``make test &``, a CI step started in the background,
    ``nohup``) starts its background commands with SIGINT and SIGQUIT ignored, and an
    ignored disposition survives ``exec``: every program a test starts would then ignore
    Ctrl-C, and Python would raise no ``KeyboardInterrupt`` -- exactly as under plain
    ``python``, so the signal tests would fail for a reason that is not pysb's.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
