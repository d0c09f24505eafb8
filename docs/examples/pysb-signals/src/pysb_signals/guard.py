"""The ``signals`` guard, inside the sandbox: ``signal.signal`` refuses a handler for a
signal the profile does not list (in a learning run: records it and lets it through)."""

from __future__ import annotations

import signal
from typing import Any

from pysb_core.guardkit import ApiDeniedError, Policy, Recorder

FAMILY = "signals"


def pysb_child_install(policy: Policy, recorder: Recorder) -> str | None:
    names = policy.extra.get(FAMILY)
    if names is None and not recorder.learning:
        return None  # no rule: nothing to enforce
    allowed = {signal.Signals[name] for name in names or ()}
    install_handler = signal.signal

    def guarded_signal(signalnum: int, handler: Any) -> Any:
        sig = signal.Signals(signalnum)
        if sig not in allowed:
            rule = f"signals: [{sig.name}]"
            if recorder.learning:
                recorder.learn(FAMILY, sig.name, "signal.signal", rule)
            else:
                recorder.deny(FAMILY, sig.name, "signal.signal", rule)
                raise ApiDeniedError(
                    f"a handler for {sig.name} is not allowed; the profile line that "
                    f"allows it: {rule}",
                    qualname="signal.signal",
                    category=FAMILY,
                    suggested_rule=rule,
                )
        return install_handler(signalnum, handler)

    signal.signal = guarded_signal
    return FAMILY
