"""Shared fixtures for every test directory (tests/ and plugins/*/tests)."""

import signal

import pytest

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


# -- the fast tier: every provider, every case, fewer provider x case cells -------------

#: The parameters that name the provider a test runs under.
PROVIDER_PARAMS = ("provider", "os_provider")
#: The parameters that name the interpreter a test runs on (plugins/pysb-guards' ``python``,
#: pysb_core.testing's ``pysb_python``): the other axis of a matrix whose test names no
#: provider -- an escape corpus run on every interpreter, where the fast tier runs each
#: attack on one interpreter and each interpreter at least once.
INTERPRETER_PARAMS = ("python", "pysb_python")
#: Providers each of whose runs is costly, and why: outside their own test directory
#: (plugins/pysb-NAME/tests, run in full) the fast tier runs only the cells a matrix's
#: covering subset chose for them.
COSTLY = {"qemu": "each run boots a VM: 5 to 30 s under emulation (TCG)"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        default=False,
        help="the fast complete pass of `make test`: a test run under every provider (or, "
        "naming no provider, on every interpreter) for every case of another parameter (a "
        "corpus program or attack, an interpreter, a project's place) runs on a covering "
        "subset of those cells, each case and each provider (interpreter) at least once, "
        "and a costly provider (qemu) runs its own tests and those cells only; the other "
        "cells are marked `full` and deselected (`make test-full` runs them all)",
    )


def _covering(cells: list[tuple[object, object]]) -> set[tuple[object, object]]:
    """A subset of the (case, provider) ``cells`` holding every case and every provider:
    the diagonal of the grid, wrapped around (max(cases, providers) cells), then one cell
    for any case or provider the diagonal missed where the grid has holes."""
    cases = list(dict.fromkeys(c for c, _ in cells))
    providers = list(dict.fromkeys(p for _, p in cells))
    present = set(cells)
    chosen = {
        (cases[k % len(cases)], providers[k % len(providers)])
        for k in range(max(len(cases), len(providers)))
    } & present
    for index, wanted in ((0, cases), (1, providers)):
        for value in wanted:
            if not any(cell[index] == value for cell in chosen):
                chosen.add(next(cell for cell in cells if cell[index] == value))
    return chosen


def _provider_of(item: pytest.Item) -> object:
    """The provider a test runs under: its provider parameter, or its provider mark."""
    spec = getattr(item, "callspec", None)
    for name in PROVIDER_PARAMS:
        if spec is not None and name in spec.params:
            return spec.params[name]
    mark = item.get_closest_marker("provider")
    return mark.args[0] if mark is not None and mark.args else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the matrix cells outside the fast tier's covering subset ``full`` (first, so
    that ``-m "not full"`` sees the mark); ``--fast`` then deselects them.

    A matrix is one test function parametrized over a provider and over something else:
    the cells of the learning corpus (program x provider), the interpreters (kind x
    provider), the places a project can be (place x provider); or, for a test that names
    no provider, over an interpreter and something else (the guards' escape corpora on
    3.11, 3.12 and 3.13: attack x interpreter). A test parametrized over the provider (or
    the interpreter) alone is no matrix: all its cells stay, as do each provider's own
    tests -- except the cells of a :data:`COSTLY` provider outside its own test directory
    (the cross-provider tests' qemu runs), which the covering did not choose.
    """
    groups: dict[tuple[str, str], list[tuple[pytest.Item, tuple[object, object]]]] = {}
    chosen_cells: set[str] = set()
    for item in items:
        spec = getattr(item, "callspec", None)
        if spec is None:
            continue
        axis = next((name for name in PROVIDER_PARAMS if name in spec.params), None)
        if axis is None:
            axis = next((name for name in INTERPRETER_PARAMS if name in spec.params), None)
        if axis is None or len(spec.params) < 2:
            continue
        case = tuple(sorted((k, repr(v)) for k, v in spec.params.items() if k != axis))
        key = (item.nodeid.split("[", 1)[0], axis)
        groups.setdefault(key, []).append((item, (case, spec.params[axis])))
    for members in groups.values():
        chosen = _covering([cell for _, cell in members])
        for item, cell in members:
            if cell in chosen:
                chosen_cells.add(item.nodeid)
            else:
                item.add_marker(pytest.mark.full)
    for item in items:
        provider = _provider_of(item)
        if (
            provider in COSTLY
            and f"plugins/pysb-{provider}/" not in item.nodeid
            and item.nodeid not in chosen_cells
            and item.get_closest_marker("full") is None
        ):
            item.add_marker(pytest.mark.full)
    if config.getoption("fast"):
        kept = [item for item in items if item.get_closest_marker("full") is None]
        left = [item for item in items if item.get_closest_marker("full") is not None]
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = kept
        _left_out.append(len(left))


_left_out: list[int] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _left_out:
        terminalreporter.write_line(
            f"fast tier (--fast): {_left_out[0]} provider x case cells left to "
            "`make test-full` (conftest.py says which)"
        )
