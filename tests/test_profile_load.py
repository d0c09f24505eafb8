"""Loading profiles: every error of every file with FILE:LINE, includes, merging, lock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pysb_core.errors import ProfileError
from pysb_core.profile import CliRules, ProfileSchema, load_policy


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def load(tmp_path: Path, env: dict[str, str], name: str = ".pysb.yaml", **kw):
    return load_policy(name, cwd=str(tmp_path), environ=env, **kw)


def errors_of(tmp_path: Path, env: dict[str, str], name: str = ".pysb.yaml", **kw) -> list[str]:
    with pytest.raises(ProfileError) as info:
        load(tmp_path, env, name, **kw)
    return info.value.errors


def test_three_mistakes_in_two_files_are_all_reported(tmp_path: Path, env) -> None:
    write(
        tmp_path / ".pysb.yaml",
        "version: 1\ninclude: [local.yaml]\nfiels:\n  expose-ro: [.]\nimports: [json]\n",
    )
    write(
        tmp_path / "local.yaml",
        "# local additions\nimports: [os]\nlimits:\n  memroy: 1G\nnetwork: ${A:B}\n",
    )
    errors = errors_of(tmp_path, env)
    assert len(errors) == 3, errors
    assert errors[0] == ".pysb.yaml:3: unknown key 'fiels' (did you mean 'files'?)"
    assert errors[1] == "local.yaml:4: limits: unknown key 'memroy' (did you mean 'memory'?)"
    assert errors[2].startswith("local.yaml:5: network: invalid variable '${A:B}'")


def test_error_message_joins_all_errors(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "improts: [json]\nprovder: x\n")
    with pytest.raises(ProfileError) as info:
        load(tmp_path, env)
    assert str(info.value) == (
        ".pysb.yaml:1: unknown key 'improts' (did you mean 'imports'?)\n"
        ".pysb.yaml:2: unknown key 'provder' (did you mean 'provider'?)"
    )


def test_unknown_key_without_close_match_has_no_hint(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "zzzzzz: 1\n")
    assert errors_of(tmp_path, env) == [".pysb.yaml:1: unknown key 'zzzzzz'"]


def test_yaml_syntax_error_has_line(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "version: 1\nimports: [json\nprovider: x\n")
    errors = errors_of(tmp_path, env)
    assert len(errors) == 1
    assert errors[0].startswith(".pysb.yaml:")
    assert "invalid YAML" in errors[0]


def test_syntax_error_in_include_and_mistake_in_main_both_reported(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "include: [sub/bad.yaml]\nlimits: {memory: lots}\n")
    write(tmp_path / "sub" / "bad.yaml", "imports: [a\n  b: c\n")
    errors = errors_of(tmp_path, env)
    assert any(e.startswith("sub/bad.yaml:") and "invalid YAML" in e for e in errors)
    assert any(e.startswith(".pysb.yaml:2: limits.memory: expected a size") for e in errors)


def test_file_outside_cwd_is_shown_absolute(tmp_path: Path, env) -> None:
    other = write(tmp_path / "elsewhere" / "p.yaml", "versoin: 1\n")
    cwd = tmp_path / "work"
    cwd.mkdir()
    with pytest.raises(ProfileError) as info:
        load_policy(str(other), cwd=str(cwd), environ=env)
    assert info.value.errors == [f"{other}:1: unknown key 'versoin' (did you mean 'version'?)"]


def test_scalar_conflict_across_includes_names_both_places(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "provider: bwrap\ninclude: [more.yaml]\n")
    write(tmp_path / "more.yaml", "\n\nprovider: landlock\n")
    errors = errors_of(tmp_path, env)
    assert len(errors) == 1
    assert errors[0].startswith("more.yaml:3: provider:")
    assert "'landlock'" in errors[0] and "'bwrap'" in errors[0]
    assert ".pysb.yaml:1" in errors[0]


def test_same_scalar_in_two_files_is_fine(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "provider: bwrap\ninclude: [more.yaml]\n")
    write(tmp_path / "more.yaml", "provider: bwrap\n")
    assert load(tmp_path, env).provider == "bwrap"


def test_lists_concatenate_across_includes(tmp_path: Path, env) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write(
        tmp_path / ".pysb.yaml",
        "include: [inc/one.yaml]\nimports: [json]\nfiles: {expose-ro: [a]}\n",
    )
    write(tmp_path / "inc" / "one.yaml", "include: [two.yaml]\nimports: [os]\n")
    write(tmp_path / "inc" / "two.yaml", "imports: [re, json]\nfiles:\n  expose-ro:\n    - b\n")
    policy = load(tmp_path, env)
    assert policy.imports == ("json", "os", "re")
    assert [e.path for e in policy.exposures] == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert policy.exposures[1].source == "inc/two.yaml:4"
    assert policy.profile_files == (
        str(tmp_path / ".pysb.yaml"),
        str(tmp_path / "inc" / "one.yaml"),
        str(tmp_path / "inc" / "two.yaml"),
    )


def test_include_forms_missing_skipped_and_each_file_once(tmp_path: Path, env) -> None:
    home = Path(env["HOME"])
    write(home / ".config" / "pysb" / "user.yaml", "imports: [from_home]\n")
    absolute = write(
        tmp_path / "abs" / "global.yaml", "imports: [from_abs]\ninclude: [../.pysb.yaml]\n"
    )
    write(
        tmp_path / ".pysb.yaml",
        "include:\n"
        "  - nothere.yaml\n"
        "  - ~/.config/pysb/user.yaml\n"
        f"  - {absolute}\n"
        "  - ${PROFILE_DIR}/abs/global.yaml\n"
        "  - ${NOT_SET}\n"
        "imports: [main]\n",
    )
    policy = load(tmp_path, env)
    assert policy.imports == ("main", "from_home", "from_abs")
    assert len(policy.profile_files) == 3


def test_unreadable_include_is_an_error(tmp_path: Path, env) -> None:
    (tmp_path / "adir.yaml").mkdir()
    write(tmp_path / ".pysb.yaml", "imports: [json]\ninclude:\n  - adir.yaml\n")
    errors = errors_of(tmp_path, env)
    assert len(errors) == 1
    assert errors[0].startswith(".pysb.yaml:3: cannot read included file 'adir.yaml'")


def test_include_relative_to_including_file(tmp_path: Path, env) -> None:
    write(tmp_path / "conf" / "main.yaml", "include: [side.yaml]\n")
    write(tmp_path / "conf" / "side.yaml", "imports: [side]\n")
    write(tmp_path / "side.yaml", "imports: [wrong]\n")
    assert load(tmp_path, env, "conf/main.yaml").imports == ("side",)


def test_duplicate_key_in_one_file(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "imports: [a]\nprovider: x\nimports: [b]\n")
    assert errors_of(tmp_path, env) == [
        ".pysb.yaml:3: profile: duplicate key 'imports' (first at line 1)"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("imports: {a: 1}\n", ".pysb.yaml:1: imports: expected a list, got a mapping"),
        ("imports: [1]\n", ".pysb.yaml:1: imports: '1' is not a module name"),
        ("imports: [json, ~]\n", ".pysb.yaml:1: imports: expected a string, got null"),
        ("imports: [[json]]\n", ".pysb.yaml:1: imports: expected a string, got a list"),
        ("provider: [a]\n", ".pysb.yaml:1: provider: expected a single value, got a list"),
        ("files: [a]\n", ".pysb.yaml:1: files: expected a mapping, got a list"),
        ("- a\n- b\n", ".pysb.yaml:1: a profile is a mapping of sections, got a list"),
        ("version: 2\n", ".pysb.yaml:1: version: unsupported version 2 (expected 1)"),
        (
            "python-guards: maybe\n",
            ".pysb.yaml:1: python-guards: expected true or false, got 'maybe'",
        ),
        (
            "imports: [numpy.linalg]\n",
            ".pysb.yaml:1: imports: 'numpy.linalg' is not a top-level name",
        ),
        ("imports: [bad-name]\n", ".pysb.yaml:1: imports: 'bad-name' is not a module name"),
        ("api: {allow: [a b]}\n", ".pysb.yaml:1: api.allow: 'a b' is not an api target"),
        ("env: {A: null}\n", ".pysb.yaml:1: env: A: no value"),
        ("limits: {processes: -1}\n", ".pysb.yaml:1: limits.processes: must be positive"),
        ("limits: {cpu-time: soon}\n", ".pysb.yaml:1: limits.cpu-time: expected a duration"),
        (
            "files: {expose-ro: [nothere]}\n",
            ".pysb.yaml:1: files.expose-ro: 'nothere' does not exist",
        ),
        ("files: {expose-ro: ['']}\n", ".pysb.yaml:1: files.expose-ro: empty value"),
    ],
)
def test_shape_errors(tmp_path: Path, env, text: str, message: str) -> None:
    write(tmp_path / ".pysb.yaml", text)
    errors = errors_of(tmp_path, env)
    assert len(errors) == 1, errors
    assert errors[0].startswith(message), errors


def test_exposure_must_be_a_directory(tmp_path: Path, env) -> None:
    write(tmp_path / "afile", "x")
    write(tmp_path / ".pysb.yaml", "files:\n  expose-rw: [afile]\n")
    assert errors_of(tmp_path, env) == [
        ".pysb.yaml:2: files.expose-rw: 'afile' is not a directory "
        "(expose the directory that holds it)"
    ]


def test_non_string_list_items_keep_their_text(tmp_path: Path, env) -> None:
    (tmp_path / "2024").mkdir()
    write(tmp_path / ".pysb.yaml", "imports: [yes, off]\nfiles: {expose-ro: [2024]}\n")
    p = load(tmp_path, env)
    assert p.imports == ("yes", "off")
    assert p.exposures[0].path == str(tmp_path / "2024")


def test_ignore_patterns(tmp_path: Path, env) -> None:
    write(
        tmp_path / ".pysb.yaml", "files:\n  ignore: [.env, '*.pem', ./secrets, ~/.ssh, /etc/x*]\n"
    )
    p = load(tmp_path, env)
    assert [r.pattern for r in p.ignore] == [
        ".env",
        "*.pem",
        str(tmp_path / "secrets"),
        env["HOME"] + "/.ssh",
        "/etc/x*",
    ]


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("imports: *\n", 'quote a value that starts with "*"'),
        ("files: {expose-rw: [${TMPDIR:-/tmp}]}\n", "quote values holding ${...}"),
        ("imports:\n\t- json\n", "indent with spaces, not tabs"),
    ],
)
def test_yaml_mistakes_get_a_hint(tmp_path: Path, env, text: str, hint: str) -> None:
    write(tmp_path / ".pysb.yaml", text)
    errors = errors_of(tmp_path, env)
    assert len(errors) == 1 and hint in errors[0], errors


def test_empty_file_is_an_empty_policy(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "# nothing but a comment\n")
    policy = load(tmp_path, env)
    assert policy.imports is None
    assert policy.exposures == () and policy.env == {} and policy.api == ()
    assert policy.learn is False and policy.provider == "auto"
    assert policy.python_guards is True


def test_safe_load_semantics(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "imports: !!python/object:os.system [x]\n")
    errors = errors_of(tmp_path, env)
    assert errors and "invalid YAML" in errors[0]


def test_anchors_and_merge_keys(tmp_path: Path, env) -> None:
    write(
        tmp_path / ".pysb.yaml",
        "limits: &l {memory: 1G}\nproviders:\n  bwrap:\n    <<: *l\n    extra: 1\n",
    )
    policy = load(tmp_path, env)
    assert policy.provider_options["bwrap"] == {"memory": "1G", "extra": 1}
    assert policy.limits.memory == 1 << 30


def test_full_spec_example(tmp_path: Path, env) -> None:
    pytest.importorskip("pysb_core.policy.netrules")
    for d in ("out", "data"):
        (tmp_path / d).mkdir()
    write(
        tmp_path / ".pysb.yaml",
        """\
version: 1
include: [.pysb.local.yaml, ~/.config/pysb/user.yaml, /etc/pysb/nonexistent-global.yaml]
provider: ${PYSB_PROVIDER:-landlock}
python-guards: true
learn: false                      # in a file: lock; the CLI and API may not add rules
env:
  TERM: ${TERM}
  HOME: /home/sandbox
  "*_API_KEY": ${*_API_KEY}       # forwards every matching host variable under its own name
unenv: [OPENAI_API_KEY]
files:
  expose-ro: [., /usr/share]
  expose-rw: [./out, "${TMPDIR:-/tmp}", "./data:/data"]
  ignore: [.env, "*.pem", .git]
network:
  - allow tcp api.example.com 443 out
  - allow tcp 0.0.0.0/0 80,443 out
  - deny  any 10.0.0.0/8 * out
  - allow tcp 127.0.0.1 8000 in
imports: [json, requests, numpy]  # top-level module names, or "*"
api:
  allow: [threads, subprocess.run]
  deny: [os.system]
limits: {memory: 512M, processes: 64, open-files: 256, cpu-time: 30s, wall-time: 60s}
providers:
  bwrap: {}
  qemu: {memory: 2048M}
""",
    )
    environ = {**env, "TERM": "xterm", "OPENAI_API_KEY": "o", "X_API_KEY": "x", "OTHER": "no"}
    p = load(tmp_path, environ)
    assert p.provider == "landlock"
    assert p.locked and not p.learn
    assert p.env == {"TERM": "xterm", "HOME": "/home/sandbox", "X_API_KEY": "x"}
    assert p.env_sources["X_API_KEY"] == ".pysb.yaml:9"
    targets = {(e.path, e.target, e.writable) for e in p.exposures}
    assert (str(tmp_path), str(tmp_path), False) in targets
    assert (str(tmp_path / "data"), "/data", True) in targets
    assert (os.path.realpath("/tmp"), os.path.realpath("/tmp"), True) in targets
    assert [r.pattern for r in p.ignore] == [".env", "*.pem", ".git"]
    assert [r.source for r in p.network] == [f".pysb.yaml:{n}" for n in (16, 17, 18, 19)]
    assert p.network[2].action == "deny"
    assert p.imports == ("json", "requests", "numpy")
    assert [(r.action, r.target) for r in p.api] == [
        ("allow", "threads"),
        ("allow", "subprocess.run"),
        ("deny", "os.system"),
    ]
    assert (p.limits.memory, p.limits.processes, p.limits.open_files) == (512 << 20, 64, 256)
    assert (p.limits.cpu_time, p.limits.wall_time) == (30, 60.0)
    assert p.limits.sources["memory"] == ".pysb.yaml:24"
    assert p.provider_options == {"bwrap": {}, "qemu": {"memory": "2048M"}}


def test_bad_network_rule_is_located(tmp_path: Path, env) -> None:
    pytest.importorskip("pysb_core.policy.netrules")
    write(tmp_path / ".pysb.yaml", "network:\n  - allow tcp example.com 443 out\n  - allow tcp\n")
    errors = errors_of(tmp_path, env)
    assert len(errors) == 1
    assert errors[0].startswith(".pysb.yaml:3: network: invalid network rule")


# -- env ------------------------------------------------------------------------------


def test_env_grants_only_what_is_named(tmp_path: Path, env) -> None:
    write(
        tmp_path / ".pysb.yaml",
        "env:\n  TERM: ${TERM}\n  LANG: ${LANG}\n  PORT: 8000\n  DEBUG: true\n  EMPTY: ''\n"
        "  TMP: ${TMPDIR:-/tmp}/x\n",
    )
    p = load(tmp_path, {**env, "TERM": "xterm", "SECRET": "s"})
    assert p.env == {"TERM": "xterm", "PORT": "8000", "DEBUG": "true", "EMPTY": "", "TMP": "/tmp/x"}


def test_env_glob_forwarding_and_unenv(tmp_path: Path, env) -> None:
    write(
        tmp_path / ".pysb.yaml",
        'env:\n  "*_API_KEY": ${*_API_KEY}\n  "LC_*": fixed\n  B_API_KEY: explicit\n'
        "include: [more.yaml]\n",
    )
    write(tmp_path / "more.yaml", "unenv: [C_*]\n")
    host = {**env, "A_API_KEY": "a", "B_API_KEY": "b", "C_API_KEY": "c", "LC_ALL": "C", "X": "x"}
    p = load(tmp_path, host)
    assert p.env == {"A_API_KEY": "a", "B_API_KEY": "explicit", "LC_ALL": "fixed"}


def test_env_value_with_nul_is_refused(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", 'env:\n  A: "x\\0y"\n  B: ${HOSTNUL}\n')
    errors = errors_of(tmp_path, {**env, "HOSTNUL": "a\0b"})
    assert errors == [
        ".pysb.yaml:2: env: A: the value holds a NUL character",
        ".pysb.yaml:3: env: B: the value holds a NUL character",
    ]


def test_env_glob_with_default(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", 'env:\n  "K_*": "${K_*:-none}"\n')
    assert load(tmp_path, {**env, "K_1": "", "K_2": "v"}).env == {"K_1": "none", "K_2": "v"}


def test_env_glob_bad_form_reported_even_without_match(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", 'env:\n  "*_KEY": ${*_KEY:x}\n')
    errors = errors_of(tmp_path, env)
    assert len(errors) == 1 and errors[0].startswith(".pysb.yaml:2: env: *_KEY: invalid variable")


def test_env_conflict_across_files(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "env: {A: one}\ninclude: [b.yaml]\n")
    write(tmp_path / "b.yaml", "env:\n  A: two\n")
    errors = errors_of(tmp_path, env)
    assert len(errors) == 1
    assert errors[0].startswith("b.yaml:2: env: A: 'two' conflicts with 'one' set at .pysb.yaml:1")


def test_unenv_beats_cli_env(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "unenv: ['*TOKEN*']\nenv: {GH_TOKEN: x}\n")
    p = load(tmp_path, env, cli=CliRules(env=["MY_TOKEN=1", "OK=2"]))
    assert p.env == {"OK": "2"}


def test_variables_in_every_string(tmp_path: Path, env) -> None:
    (tmp_path / "d").mkdir()
    write(
        tmp_path / ".pysb.yaml",
        "provider: ${PV:-bwrap}\nimports: ['${MOD}']\nfiles: {expose-ro: ['${PROFILE_DIR}/d']}\n",
    )
    p = load(tmp_path, {**env, "MOD": "json"})
    assert p.provider == "bwrap" and p.imports == ("json",)
    assert p.exposures[0].path == str(tmp_path / "d")


def test_host_value_is_not_expanded_again(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "env: {A: '${EVIL}'}\n")
    assert load(tmp_path, {**env, "EVIL": "${HOME}"}).env == {"A": "${HOME}"}


def test_lone_unset_variable_leaves_list_entry_out(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "files:\n  expose-rw: ['${VIRTUAL_ENV}']\n")
    assert load(tmp_path, env).exposures == ()


# -- cli, lock, learning, provider ------------------------------------------------------


def test_cli_rules_add_to_profile(tmp_path: Path, env) -> None:
    (tmp_path / "extra").mkdir()
    write(tmp_path / ".pysb.yaml", "imports: [json]\n")
    cli = CliRules(expose_rw=["extra"], imports=["os"], allow_api=["threads"], env=["A=1"])
    p = load(tmp_path, env, cli=cli)
    assert p.imports == ("json", "os")
    assert p.exposures[0].source == "<cli>" and p.exposures[0].writable
    assert p.api[0].source == "<cli>"
    assert p.env == {"A": "1"}


def test_cli_imports_without_profile_imports(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "version: 1\n")
    assert load(tmp_path, env, cli=CliRules(imports=["os"])).imports == ("os",)


def test_lock_refuses_cli_rules_and_learning(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "version: 1\nlearn: false\n")
    errors = errors_of(tmp_path, env, cli=CliRules(imports=["os"], env=["A=1"]), learn=True)
    assert errors == [
        "<cli>: --import refused: 'learn: false' at .pysb.yaml:2 locks the rules",
        "<cli>: --env refused: 'learn: false' at .pysb.yaml:2 locks the rules",
        "<cli>: learning refused: 'learn: false' at .pysb.yaml:2 locks this profile",
    ]
    # provider and guards are not rules: allowed under the lock
    p = load(tmp_path, env, provider="bwrap", python_guards=False, cli=CliRules())
    assert p.locked and p.provider == "bwrap" and p.python_guards is False


def test_lock_in_include_cannot_be_overridden(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "learn: true\ninclude: [/dev/null, lock.yaml]\n")
    write(tmp_path / "lock.yaml", "learn: false\n")
    errors = errors_of(tmp_path, env)
    assert len(errors) == 1 and errors[0].startswith("lock.yaml:1: learn: False conflicts")


def test_provider_precedence(tmp_path: Path, env) -> None:
    write(tmp_path / ".pysb.yaml", "provider: bwrap\n")
    assert load(tmp_path, env).provider == "bwrap"
    assert load(tmp_path, env, provider="unshare").provider == "unshare"
    write(tmp_path / ".pysb.yaml", "version: 1\n")
    assert load(tmp_path, env).provider == "auto"  # chosen by the pipeline, never subprocess


@pytest.mark.parametrize(
    ("text", "extra_env", "message"),
    [
        ("provider: ${PYSB_NOPE}\n", {}, "provider: ${PYSB_NOPE} is unset"),
        ("provider:\n", {}, "provider: no value"),
        ("provider: ''\n", {}, "provider: empty value"),
        ("provider: ${PYSB_EMPTY}\n", {"PYSB_EMPTY": ""}, "provider: empty value"),
        ("provider: '${PYSB_EMPTY:-}'\n", {}, "provider: empty value"),
    ],
)
def test_a_provider_that_expands_to_nothing_is_an_error(
    tmp_path: Path, env, text: str, extra_env: dict[str, str], message: str
) -> None:
    """Issue 27: `provider: ${UNSET}` fell back to subprocess (no OS boundary) silently."""
    write(tmp_path / ".pysb.yaml", "version: 1\n" + text)
    errors = errors_of(tmp_path, {**env, **extra_env})
    assert len(errors) == 1 and errors[0].startswith(f".pysb.yaml:2: {message}"), errors
    assert "auto" in errors[0]  # what to write instead


def test_an_empty_provider_argument_is_an_error(tmp_path: Path, env) -> None:
    """`--provider ''` (or provider='' in the API) is no way to reach the subprocess provider."""
    write(tmp_path / ".pysb.yaml", "version: 1\n")
    assert errors_of(tmp_path, env, provider="") == ["<cli>: provider: '' is not a provider name"]


def test_provider_options_are_checked_with_the_other_errors_each_at_its_line(
    tmp_path: Path, env
) -> None:
    """Issue 27: options were checked after the profile, without FILE:LINE, alone."""

    def checker(name: str):
        if name != "bwrap":
            return None  # not installed: kept and ignored
        return lambda options: (
            [f"unknown option {k!r}" for k in options if k != "hostname"]
            + (["hostname and speed together"] if {"hostname", "speed"} <= set(options) else [])
        )

    write(
        tmp_path / ".pysb.yaml",
        "version: 1\nproviders:\n  bwrap:\n    hostname: h\n    speed: 2\n"
        "  nsjail: {anything: 1}\nimports: 3\n",
    )
    assert errors_of(tmp_path, env, option_checker=checker) == [
        ".pysb.yaml:4: providers: bwrap: hostname and speed together",
        ".pysb.yaml:5: providers: bwrap: unknown option 'speed'",
        ".pysb.yaml:7: imports: '3' is not a module name",
    ]


def test_missing_profile_learns_into_it_only_when_asked(tmp_path: Path, env) -> None:
    p = load(tmp_path, {**env, "SOME": "v"}, "sub/new.yaml")
    assert not p.learn and p.imports is None and p.env == {}  # nothing implicit: deny all
    p = load_policy("sub/new.yaml", cwd=str(tmp_path), environ={**env, "SOME": "v"}, learn=True)
    assert p.learn and p.learn_path == str(tmp_path / "sub" / "new.yaml")
    assert p.profile_files == () and p.profile_path is None
    assert p.env["SOME"] == "v"  # a learning run passes the host environment through


def test_no_profile(tmp_path: Path, env) -> None:
    p = load_policy(None, cwd=str(tmp_path), environ=env)
    assert not p.learn and p.imports is None and p.env == {}
    p = load_policy(None, cwd=str(tmp_path), environ=env, learn=True)
    assert p.learn and p.learn_path == str(tmp_path / ".pysb.yaml")
    p = load_policy(None, cwd=str(tmp_path), environ=env, learn="out.yaml")
    assert p.learn_path == str(tmp_path / "out.yaml")


def test_learn_in_profile(tmp_path: Path, env) -> None:
    write(tmp_path / "conf" / "p.yaml", "learn: learned.yaml\n")
    p = load(tmp_path, env, "conf/p.yaml")
    assert p.learn and p.learn_path == str(tmp_path / "conf" / "learned.yaml")
    write(tmp_path / ".pysb.yaml", "learn: true\n")
    p = load(tmp_path, env)
    assert p.learn and p.learn_path == str(tmp_path / ".pysb.yaml")
    assert not load(tmp_path, env, learn=False).learn


# -- schema plugins -----------------------------------------------------------------------


def test_validator_rejects_unknown_api_target(tmp_path: Path, env) -> None:
    registry = {"threads", "subprocess.run", "os.system"}
    seen: list[str] = []

    def validate_api(value, location):
        seen.append(location)
        out = []
        for action in ("allow", "deny"):
            for target in value.get(action, []):
                if target not in registry:
                    out.append(f"{target.location}: api.{action}: unknown api target {target!r}")
        return out

    schema = ProfileSchema()
    schema.add_validator("api", validate_api)
    write(tmp_path / ".pysb.yaml", "api:\n  allow:\n    - threads\n    - os.sytem\n")
    errors = errors_of(tmp_path, env, schema=schema, cli=CliRules(allow_api=["nope"]))
    assert errors == [
        ".pysb.yaml:4: api.allow: unknown api target 'os.sytem'",
        "<cli>: api.allow: unknown api target 'nope'",
    ]
    assert seen == [".pysb.yaml:1", "<cli>"]


def test_validator_message_without_location_gets_section_location(tmp_path: Path, env) -> None:
    schema = ProfileSchema()
    schema.add_validator("providers.qemu", lambda v, loc: [] if "memory" in v else ["no memory"])
    write(tmp_path / ".pysb.yaml", "version: 1\nproviders:\n  qemu:\n    cpus: 2\n")
    assert errors_of(tmp_path, env, schema=schema) == [".pysb.yaml:4: no memory"]


def test_validator_not_called_on_a_malformed_section(tmp_path: Path, env) -> None:
    schema = ProfileSchema()
    schema.add_validator("api", lambda v, loc: [f"called with {v!r}"])
    write(tmp_path / ".pysb.yaml", "api: [os.system]\n")
    assert errors_of(tmp_path, env, schema=schema) == [
        ".pysb.yaml:1: api: expected a mapping, got a list"
    ]


def test_crashing_validator_fails_closed(tmp_path: Path, env) -> None:
    schema = ProfileSchema()
    schema.add_validator("api", lambda v, loc: 1 / 0)
    write(tmp_path / ".pysb.yaml", "api: {allow: [x]}\n")
    errors = errors_of(tmp_path, env, schema=schema)
    assert len(errors) == 1 and "ZeroDivisionError" in errors[0]


def test_third_party_section(tmp_path: Path, env) -> None:
    schema = ProfileSchema()
    schema.add_section("audit")
    write(tmp_path / ".pysb.yaml", "audit: {sink: '${S:-file}', level: 2}\n")
    p = load(tmp_path, env, schema=schema)
    assert p.extra == {"audit": {"sink": "file", "level": 2}}
    assert type(p.extra["audit"]["sink"]) is str
    write(tmp_path / ".pysb.yaml", "audti: {}\n")
    assert errors_of(tmp_path, env, schema=schema) == [
        ".pysb.yaml:1: unknown key 'audti' (did you mean 'audit'?)"
    ]
    with pytest.raises(ValueError):
        schema.add_section("files")


def test_policy_json_round_trip(tmp_path: Path, env) -> None:
    from pysb_core.policy import Policy

    (tmp_path / "d").mkdir()
    write(
        tmp_path / ".pysb.yaml",
        "files: {expose-ro: [d]}\nimports: ['*']\nenv: {A: b}\nlimits: {memory: 1G}\n",
    )
    p = load(tmp_path, env)
    assert p.imports == ("*",)
    assert Policy.from_json(p.to_json()) == p


def test_errors_are_ordered_by_file_then_line(tmp_path: Path, env) -> None:
    (tmp_path / "adir.yaml").mkdir()
    write(
        tmp_path / ".pysb.yaml",
        "files: {expose-ro: [nothere]}\nbogus: 1\ninclude: [adir.yaml, two.yaml]\n",
    )
    write(tmp_path / "two.yaml", "limits: {memory: x}\nimports: [a.b]\n")
    errors = errors_of(tmp_path, env, cli=CliRules(expose_ro=["alsonothere"]))
    assert [e.split(": ", 1)[0] for e in errors] == [
        ".pysb.yaml:1",
        ".pysb.yaml:2",
        ".pysb.yaml:3",
        "two.yaml:1",
        "two.yaml:2",
        "<cli>",
    ]
