"""Provider options, the availability probe and the declared capabilities."""

from __future__ import annotations

import pytest
from pysb_bwrap import BwrapProvider
from pysb_bwrap.probe import _userns_fix, probe_bwrap

from pysb_core.errors import ProviderUnavailableError
from pysb_core.provider import Capability


def test_valid_options():
    assert BwrapProvider.validate_options({}) == []
    assert BwrapProvider.validate_options({"hostname": "box-1", "share-net": False}) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"extra-args": ["--bind", "/", "/"]}, "unknown option 'extra-args'"),
        ({"hostnme": "x"}, "did you mean 'hostname'"),
        ({"share-net": True}, "bypass"),
        ({"hostname": "bad name!"}, "hostname must be"),
        ({"hostname": 3}, "hostname must be"),
    ],
)
def test_invalid_options(options, message):
    errors = BwrapProvider.validate_options(options)
    assert len(errors) == 1 and message in errors[0]


def test_capabilities_declared():
    caps = BwrapProvider.capabilities
    for cap in (
        Capability.FILES,
        Capability.FILES_WRITE,
        Capability.IGNORE,
        Capability.RENAME,
        Capability.ENV,
        Capability.LIMITS,
    ):
        assert cap in caps
    assert BwrapProvider.name == "bwrap"


def test_missing_binary_reports_install_fix():
    status = probe_bwrap("pysb-no-such-bwrap")
    assert not status.available
    assert status.fix == "apt-get install bubblewrap"


def test_probe_of_real_bwrap(bwrap_available):
    status = BwrapProvider().probe()
    assert status.available and status.version
    assert BwrapProvider().probe() is status  # cached for the process


@pytest.mark.parametrize(
    ("stderr", "fix"),
    [
        ("bwrap: setting up uid map: Permission denied", "unprivileged_userns_clone"),
        ("bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted", "apparmor"),
        ("bwrap: Creating new namespace failed: No space left on device", "max_user_namespaces"),
        ("bwrap: Unknown option --disable-userns", "0.8.0"),
    ],
)
def test_userns_failures_map_to_fixes(stderr, fix):
    assert fix in _userns_fix(stderr)


def test_prepare_unavailable_raises_with_fix(monkeypatch, mkplan):
    import pysb_bwrap.provider as mod

    monkeypatch.setattr(mod, "probe_bwrap", lambda: probe_bwrap("pysb-no-such-bwrap"))
    with pytest.raises(ProviderUnavailableError, match="apt-get install bubblewrap"):
        BwrapProvider().prepare(mkplan(["/bin/true"]))


def test_userns_failure_is_unavailable_with_the_sysctl_fix(tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    status = probe_bwrap(str(fake))
    assert not status.available
    assert "uid map: Permission denied" in status.reason
    assert "sysctl" in status.fix
