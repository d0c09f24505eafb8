"""Leave the session keyring of whoever started pysb.

A process inherits its parent's session keyring: tokens, Kerberos tickets and secrets
that tools put there (``keyctl``) would be readable by the sandboxed program, whatever
the file rules say. Called as a child set-up by providers that confine files, it joins a
fresh anonymous session keyring, before the program runs.
"""

from __future__ import annotations

import errno
import os

# With the module, not in the call: the bootstrap imports every child set-up's module before
# it installs the guards and calls the set-ups after, and an import made then is judged by
# the import guard (``cfuncs`` with ``_ctypes`` took 2.2-3.5 ms of the set-ups there under
# bwrap, 0.2 ms now; the install takes ~1.5 ms more, the sensitive-API guard patching the
# loaded ``_ctypes``: ~0.6-1.4 ms less per start). Not ctypes: ~1 ms less again.
from pysb_core.linux import cfuncs

#: keyctl(2) syscall numbers.
_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 311, "s390x": 280}
KEYCTL_JOIN_SESSION_KEYRING = 1


def leave_session_keyring() -> None:
    """Join a new anonymous session keyring; EPERM/ENOSYS (keyctl filtered out by the
    provider's own seccomp policy, or no keys support) leave nothing to read anyway."""
    nr = _KEYCTL.get(os.uname().machine)
    if nr is None:
        raise OSError(errno.ENOSYS, f"keyctl: unknown machine {os.uname().machine}")
    syscall = cfuncs.function("syscall", cfuncs.Long)
    if syscall(cfuncs.Long(nr), cfuncs.Long(KEYCTL_JOIN_SESSION_KEYRING), None) < 0:
        err = cfuncs.get_errno()
        if err in (errno.EPERM, errno.ENOSYS, errno.EACCES):
            return
        raise OSError(err, f"keyctl(JOIN_SESSION_KEYRING): {os.strerror(err)}")
