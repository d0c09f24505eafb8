"""A guard family for pysb: the ``signals:`` profile section lists the signals a program
may install a handler for (``signal.signal``); any other is refused.

Host side: :mod:`pysb_signals.hooks`. Inside the sandbox: :mod:`pysb_signals.guard`.
"""
