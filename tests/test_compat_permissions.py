"""A directory's own permissions answer as they do under plain Python (issue 17, item 6).

Removing a name in a directory the program may not search (mode 0400) is refused by the
kernel with EACCES. The file guard looks the name up before judging a removal, and used to
take any failed look-up for a missing name (FileNotFoundError): `tempfile.TemporaryDirectory`
then skipped the entry instead of restoring the directory's permissions, and its cleanup of
a read-only tree failed (CPython's test_tempfile `test_modes`, under bwrap, which runs the
program without capabilities). Root ignores directory permissions (CAP_DAC_OVERRIDE), so the
program runs without capabilities (``setpriv``) where pysb itself runs as root, except
under bwrap and unshare, which drop them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, Project, pysb_command, require_provider

PROVIDERS = ["subprocess", "landlock", "bwrap", "unshare"]

PROGRAM = r"""
import os, tempfile
os.makedirs("box/inner")
open("box/inner/f", "w").close()
os.chmod("box/inner", 0o400)
try:
    os.unlink("box/inner/f")
except OSError as exc:
    print(type(exc).__name__)
else:
    print("removed")  # with CAP_DAC_OVERRIDE: the test could not show anything
os.chmod("box/inner", 0o700)
with tempfile.TemporaryDirectory(dir="box") as tree:
    os.makedirs(os.path.join(tree, "a", "b"))
    open(os.path.join(tree, "a", "b", "f"), "w").close()
    for root, dirs, files in os.walk(tree, topdown=False):
        for name in files:
            os.chmod(os.path.join(root, name), 0o400)
        os.chmod(root, 0o400)
print("cleaned" if not os.path.exists(tree) else "left")
"""

PROFILE = "version: 1\nimports: [os, tempfile]\nfiles:\n  expose-rw: [.]\n"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_directory_without_search_permission_refuses_as_the_kernel_does(provider: str) -> None:
    if provider != "subprocess":
        require_provider(provider)
    prefix: list[str] = []
    # bwrap and unshare run the program without capabilities themselves (and need theirs to
    # map the user namespace); the others keep root's, so pysb runs without any
    if os.geteuid() == 0 and provider in ("subprocess", "landlock"):
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv (util-linux) to drop capabilities")
        # landlock as root needs CAP_SYS_ADMIN for its read-only mounts (pysb_landlock.rofs),
        # and drops it before the program runs
        keep = ",+sys_admin" if provider == "landlock" else ""
        prefix = [setpriv, f"--bounding-set=-all{keep}", "--inh-caps=-all"]
    # in the home directory: the namespace providers give the program a /tmp of its own
    root = Path(tempfile.mkdtemp(prefix=".pysb-perm-", dir=Path.home()))
    try:
        project = Project(root)
        project.profile(PROFILE)
        project.file("app.py", PROGRAM)
        res = subprocess.run(
            [*prefix, *pysb_command(), "run", "--provider", provider, "app.py"],
            cwd=root,
            env=BASE_ENV,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert lines == ["PermissionError", "cleaned"], res.stdout + res.stderr
    finally:
        for parent, dirs, _ in os.walk(root):
            for name in dirs:
                os.chmod(os.path.join(parent, name), 0o700)
        shutil.rmtree(root, ignore_errors=True)


IDENTITY_PROGRAM = r"""
import errno, json, os, tarfile, io
open("owned", "w").close()
out = {}
def t(name, fn):
    try:
        fn()
        out[name] = "done"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, e.errno)
other = 12345
t("chown other", lambda: os.chown("owned", other, -1))
t("chown other group", lambda: os.chown("owned", -1, other))
t("lchown other", lambda: os.lchown("owned", other, other))
fd = os.open("owned", os.O_RDONLY)
t("fchown other", lambda: os.fchown(fd, other, -1))
t("chown own", lambda: os.chown("owned", os.getuid(), os.getgid()))
t("chown unchanged", lambda: os.chown("owned", -1, -1))
t("setuid other", lambda: os.setuid(other))
t("setgid other", lambda: os.setgid(other))
t("setresuid other", lambda: os.setresuid(-1, other, -1))
t("setregid other", lambda: os.setregid(other, -1))
# tarfile as root restores owners: with errorlevel 2 a refused chown is its ExtractError
data = io.BytesIO()
with tarfile.open(fileobj=data, mode="w") as tar:
    info = tarfile.TarInfo("member")
    info.uid = info.gid = other
    tar.addfile(info, io.BytesIO(b""))
data.seek(0)
with tarfile.open(fileobj=data) as tar:
    tar.errorlevel = 2
    try:
        # extraction filters are 3.11.4+ (Debian 12 has 3.11.2)
        trusted = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
        tar.extractall("out", numeric_owner=True, **trusted)
        out["tarfile"] = "done"
    except tarfile.ExtractError as e:
        out["tarfile"] = errno.errorcode.get(getattr(e.__cause__, "errno", None), "?")
if os.geteuid() != 0:
    del out["tarfile"]  # it changes owners as root only
print(json.dumps(out))
"""


@pytest.mark.parametrize("provider", ["landlock", "bwrap", "unshare", "firejail"])
def test_a_refused_identity_change_is_eperm(
    project: Project, provider: str, pysb_python: str
) -> None:
    """A change to another owner or identity is refused with EPERM under every OS
    provider, as CPython's code expects of a refused ``chown`` / ``setuid`` (tarfile,
    shutil, the regression suite): in bwrap's and unshare's one-id user namespaces the
    kernel said EINVAL (the id does not exist there). The sandbox's own ids and -1 still
    pass. On 3.11 to 3.13."""
    require_provider(provider)
    project.profile(
        "version: 1\nimports: [errno, json, os, tarfile, io]\n"
        "files:\n  expose-rw: [.]\napi:\n  allow: [privileges]\n"
    )
    project.file("app.py", IDENTITY_PROGRAM)
    res = project.run("run", "--provider", provider, "app.py", python=pysb_python)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out.pop("chown own") == out.pop("chown unchanged") == "done", out
    assert set(out.values()) == {"EPERM"}, out
