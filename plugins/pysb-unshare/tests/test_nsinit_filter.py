"""``nsinit.load_filter``: how the namespace's init runs the packet filter's commands.

Run here with harmless commands (a shell), outside any namespace: the input each command
gets, the fds it does not get, and that any failure stops the set-up with the command's
own message.
"""

from __future__ import annotations

import os

import pytest
from pysb_unshare import nsinit


def test_each_command_reads_its_input_and_must_succeed():
    ok = [["/bin/sh", "-c", 'test "$(cat)" = "table inet pysb {}"'], b"table inet pysb {}"]
    nsinit.load_filter({"commands": [ok, ok]}, [])
    failing = [["/bin/sh", "-c", "cat >&2; exit 3"], b"nft: syntax error near 'nonsense'"]
    with pytest.raises(nsinit.SetupError) as info:
        nsinit.load_filter({"commands": [ok, failing]}, [])
    message = str(info.value)
    assert "network filter could not be loaded" in message
    assert "syntax error near 'nonsense'" in message


def test_commands_get_none_of_the_inherited_fds():
    r, w = os.pipe()
    os.set_inheritable(w, True)  # as pysb's pass_fds reach P0
    try:
        listing = [["/bin/sh", "-c", "ls /proc/self/fd >&2; exit 1"], b""]
        with pytest.raises(nsinit.SetupError) as info:
            nsinit.load_filter({"commands": [listing]}, [w])
        fds = str(info.value).rsplit(":", 1)[1].split()
        assert str(w) not in fds and str(r) not in fds
        assert {"0", "1", "2"} <= set(fds)
    finally:
        os.close(r)
        os.close(w)


def test_a_missing_command_is_a_setup_error():
    with pytest.raises(nsinit.SetupError, match="cannot run /nonexistent/nft"):
        nsinit.load_filter({"commands": [[["/nonexistent/nft", "-f", "-"], b""]]}, [])
