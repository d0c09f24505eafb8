#!/usr/bin/env bash
# The test command of README.md (`make test`): the fast complete pass -- every test of
# every area, provider and interpreter, but a matrix of provider x case cells (the learning
# corpus under every provider, the interpreter kinds, the places a project can be) or of
# interpreter x case cells (the guards' escape corpora) on a covering subset, each case and
# each provider (interpreter) at least once, and the costly provider (qemu) in its own
# tests and those cells only (conftest.py: `--fast`, the `full` mark; docs/contributing.md).
#   --full   every cell (`make test-full`);
#   --rest   only the cells the fast pass leaves out (CI runs it after `make test`: the
#            two together are the full run, with nothing run twice).
# Other arguments go to pytest.
# PYSB_REQUIRE_PROVIDERS (default: all OS providers) turns "provider unavailable" skips into
# failures, and a required provider whose every test was skipped fails the run, so a run
# cannot silently skip the OS layer; the run ends with a summary of the provider tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYSB_REQUIRE_PROVIDERS="${PYSB_REQUIRE_PROVIDERS-landlock,bwrap,unshare,firejail,qemu}"
# pysb-ray's tests run a real local Ray cluster: a missing Ray is a failure, not a skip.
export PYSB_REQUIRE_RAY="${PYSB_REQUIRE_RAY-1}"
tier=(--fast)
case "${1-}" in
  --full) tier=(); shift ;;
  --rest) tier=(-m full); shift ;;
esac
.venv/bin/pysb providers
exec .venv/bin/python -m pytest -p no:cacheprovider "${tier[@]}" "$@"
