"""The trust store of discovered profiles (pysb_core.profile.trust) and ``pysb trust``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pysb_core.errors import ProfileError, UntrustedProfileError
from pysb_core.profile import load_policy, trust
from pysb_core.testing import BASE_ENV, run_pysb


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state")}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def policy_of(path: Path, env: dict[str, str]):
    return load_policy(str(path), cwd=str(path.parent), environ=env)


def test_store_location_follows_xdg_state_home_then_home(tmp_path: Path) -> None:
    assert trust.trust_dir({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == "/s/pysb/trust"
    assert trust.trust_dir({"HOME": "/h"}) == "/h/.local/state/pysb/trust"
    assert trust.trust_dir({"XDG_STATE_HOME": "rel", "HOME": "/h"}) is None
    assert trust.trust_dir({}) is None


def test_untrusted_then_trusted_then_changed(tmp_path: Path, env: dict[str, str]) -> None:
    profile = write(tmp_path / "p" / ".pysb.yaml", "imports: [json]\n")
    policy = policy_of(profile, env)
    with pytest.raises(UntrustedProfileError, match="not trusted"):
        trust.require_trusted_policy(policy, env)
    files = trust.trust_profile(str(profile), cwd=str(tmp_path), environ=env)
    assert list(files) == [str(profile.resolve())]
    trust.require_trusted_policy(policy_of(profile, env), env)  # no exception
    profile.write_text("imports: [json, os]\n")
    with pytest.raises(UntrustedProfileError, match="changed since it was trusted"):
        trust.require_trusted_policy(policy_of(profile, env), env)


def test_digest_is_of_the_bytes_parsed_not_of_the_file_later(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The policy carries the digest of what was parsed: trusting the file after it was
    loaded, with other bytes, does not make the loaded policy trusted."""
    profile = write(tmp_path / ".pysb.yaml", "imports: [os]\n")
    policy = policy_of(profile, env)
    profile.write_text("imports: [json]\n")
    trust.trust_profile(str(profile), cwd=str(tmp_path), environ=env)
    with pytest.raises(UntrustedProfileError):
        trust.require_trusted_policy(policy, env)


def test_every_included_file_is_part_of_the_trust(tmp_path: Path, env: dict[str, str]) -> None:
    profile = write(tmp_path / ".pysb.yaml", "include: [rw/extra.yaml, rw/later.yaml]\n")
    extra = write(tmp_path / "rw" / "extra.yaml", "imports: [json]\n")
    trust.trust_profile(str(profile), cwd=str(tmp_path), environ=env)
    trust.require_trusted_policy(policy_of(profile, env), env)

    extra.write_text("imports: ['*']\n")  # an included file rewritten
    with pytest.raises(UntrustedProfileError, match=r"rw/extra.yaml changed"):
        trust.require_trusted_policy(policy_of(profile, env), env)
    extra.write_text("imports: [json]\n")
    trust.require_trusted_policy(policy_of(profile, env), env)

    write(tmp_path / "rw" / "later.yaml", "imports: ['*']\n")  # a missing include appears
    with pytest.raises(UntrustedProfileError, match=r"rw/later.yaml is new"):
        trust.require_trusted_policy(policy_of(profile, env), env)
    (tmp_path / "rw" / "later.yaml").unlink()
    extra.unlink()  # a trusted include disappears: its scalars (a lock) may go with it
    with pytest.raises(UntrustedProfileError, match=r"rw/extra.yaml is no longer there"):
        trust.require_trusted_policy(policy_of(profile, env), env)


def test_trust_is_per_profile_path(tmp_path: Path, env: dict[str, str]) -> None:
    """The same bytes at another path are not trusted."""
    a = write(tmp_path / "a" / ".pysb.yaml", "imports: [json]\n")
    b = write(tmp_path / "b" / ".pysb.yaml", "imports: [json]\n")
    trust.trust_profile(str(a), cwd=str(tmp_path), environ=env)
    with pytest.raises(UntrustedProfileError):
        trust.require_trusted_policy(policy_of(b, env), env)


def test_a_record_anyone_else_could_write_is_ignored(tmp_path: Path, env: dict[str, str]) -> None:
    profile = write(tmp_path / ".pysb.yaml", "imports: [json]\n")
    record = trust.trust_profile(str(profile), cwd=str(tmp_path), environ=env)
    assert record
    store = trust.trust_dir(env)
    assert store is not None
    assert os.stat(store).st_mode & 0o777 == 0o700
    (entry,) = [os.path.join(store, n) for n in os.listdir(store)]
    assert os.stat(entry).st_mode & 0o777 == 0o600
    os.chmod(entry, 0o666)
    with pytest.raises(UntrustedProfileError):
        trust.require_trusted_policy(policy_of(profile, env), env)
    os.chmod(entry, 0o600)
    os.chmod(store, 0o777)
    with pytest.raises(UntrustedProfileError):
        trust.require_trusted_policy(policy_of(profile, env), env)


def test_a_corrupt_record_is_untrusted(tmp_path: Path, env: dict[str, str]) -> None:
    profile = write(tmp_path / ".pysb.yaml", "imports: [json]\n")
    trust.trust_profile(str(profile), cwd=str(tmp_path), environ=env)
    store = trust.trust_dir(env)
    assert store is not None
    (entry,) = [os.path.join(store, n) for n in os.listdir(store)]
    Path(entry).write_text("pysb-trust 1\nprofile x\nfile md5:00 /x\n")
    with pytest.raises(UntrustedProfileError):
        trust.require_trusted_policy(policy_of(profile, env), env)


def test_revoke_and_records(tmp_path: Path, env: dict[str, str]) -> None:
    a = write(tmp_path / "a" / ".pysb.yaml", "imports: [json]\n")
    b = write(tmp_path / "b" / "p.yaml", "include: [inc.yaml]\n")
    write(tmp_path / "b" / "inc.yaml", "imports: [os]\n")
    trust.trust_profile(str(a), cwd=str(tmp_path), environ=env)
    trust.trust_profile(str(b), cwd=str(tmp_path), environ=env)
    keys = [key for key, _ in trust.records(env)]
    assert keys == sorted([str(a.resolve()), str(b.resolve())])
    assert trust.revoke(str(a), env) is True
    assert trust.revoke(str(a), env) is False
    assert [key for key, _ in trust.records(env)] == [str(b.resolve())]


def test_an_unparsable_profile_is_not_trusted(tmp_path: Path, env: dict[str, str]) -> None:
    profile = write(tmp_path / ".pysb.yaml", "imports: [json\n")
    with pytest.raises(ProfileError):
        trust.trust_profile(str(profile), cwd=str(tmp_path), environ=env)
    assert trust.records(env) == []


def test_the_refusal_names_the_commands_to_review_and_trust(
    tmp_path: Path, env: dict[str, str]
) -> None:
    profile = write(tmp_path / "my dir" / ".pysb.yaml", "imports: [json]\n")
    policy = load_policy(str(profile), cwd=str(tmp_path), environ=env)
    with pytest.raises(UntrustedProfileError) as info:
        trust.require_trusted_policy(policy, env)
    text = str(info.value)
    assert "pysb check --profile 'my dir/.pysb.yaml'" in text
    assert "pysb trust 'my dir/.pysb.yaml'" in text


# -- the command -------------------------------------------------------------------------


def test_pysb_trust_command(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    project = tmp_path / "project"
    write(project / ".pysb.yaml", "include: [local.yaml]\nimports: [json]\n")
    write(project / "local.yaml", "imports: [os]\n")
    write(project / "app.py", "print('ran')\n")

    refused = run_pysb("run", "app.py", cwd=project, env=env)
    assert refused.returncode == 125
    assert "pysb trust .pysb.yaml" in refused.stderr
    assert "ran" not in refused.stdout

    checked = run_pysb("check", cwd=project, env=env)
    assert checked.returncode == 0, checked.stderr
    assert "not trusted" in checked.stdout

    trusted = run_pysb("trust", cwd=project, env=env)
    assert trusted.returncode == 0, trusted.stderr
    assert "trusted .pysb.yaml, with local.yaml" in trusted.stdout
    assert run_pysb("run", "app.py", cwd=project, env=env).stdout == "ran\n"

    listed = run_pysb("trust", "--list", cwd=project, env=env)
    assert listed.stdout == ".pysb.yaml (with local.yaml)\n"

    assert run_pysb("trust", "--revoke", ".pysb.yaml", cwd=project, env=env).returncode == 0
    assert run_pysb("run", "app.py", cwd=project, env=env).returncode == 125
    again = run_pysb("trust", "--revoke", cwd=project, env=env)
    assert again.returncode == 125 and "was not trusted" in again.stderr
    missing = run_pysb("trust", "nosuch.yaml", cwd=project, env=env)
    assert missing.returncode == 125 and "no such profile" in missing.stderr


def test_a_named_profile_needs_no_trust(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    write(tmp_path / "p.yaml", "imports: [json]\n")
    write(tmp_path / "app.py", "print('ran')\n")
    named = run_pysb("run", "--profile", "p.yaml", "app.py", cwd=tmp_path, env=env)
    assert named.returncode == 0, named.stderr
    by_env = run_pysb("run", "app.py", cwd=tmp_path, env={**env, "PYSB_PROFILE": "p.yaml"})
    assert by_env.returncode == 0, by_env.stderr


def test_a_learning_run_trusts_what_it_writes(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    write(tmp_path / "app.py", "import json\nprint('ran')\n")
    learned = run_pysb("run", "--learn", "app.py", cwd=tmp_path, env=env)
    assert learned.returncode == 0, learned.stderr
    assert (tmp_path / ".pysb.yaml").is_file()
    enforced = run_pysb("run", "app.py", cwd=tmp_path, env=env)
    assert enforced.returncode == 0, enforced.stderr
    assert enforced.stdout == "ran\n"
    # edited by hand afterwards: the user trusts the edit explicitly
    with open(tmp_path / ".pysb.yaml", "a") as f:
        f.write("# edited\n")
    assert run_pysb("run", "app.py", cwd=tmp_path, env=env).returncode == 125


def test_a_learning_run_refuses_an_untrusted_discovered_profile(tmp_path: Path) -> None:
    """Learning into a planted profile would launder it: refused like any run."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    planted = write(tmp_path / ".pysb.yaml", "files:\n  expose-rw: [/tmp]\n")
    write(tmp_path / "app.py", "print('ran')\n")
    r = run_pysb("run", "--learn", "app.py", cwd=tmp_path, env=env)
    assert r.returncode == 125
    assert "not trusted" in r.stderr
    assert planted.read_text() == "files:\n  expose-rw: [/tmp]\n"
    assert trust.records({**BASE_ENV, **env}) == []


def test_check_json_says_whether_a_found_profile_is_trusted(tmp_path: Path) -> None:
    import json

    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    write(tmp_path / ".pysb.yaml", "imports: [json]\n")
    found = json.loads(run_pysb("check", "--json", cwd=tmp_path, env=env).stdout)
    assert found["trusted"] is False and found["valid"] is True
    assert run_pysb("trust", cwd=tmp_path, env=env).returncode == 0
    assert json.loads(run_pysb("check", "--json", cwd=tmp_path, env=env).stdout)["trusted"] is True
    named = run_pysb("check", "--json", "--profile", ".pysb.yaml", cwd=tmp_path, env=env)
    assert json.loads(named.stdout)["trusted"] is None  # named: nothing to trust
