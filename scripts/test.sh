#!/usr/bin/env bash
# The test command of README.md: every test, on the dev venv, failing when any fails.
# PYSB_REQUIRE_PROVIDERS (default: all OS providers) turns "provider unavailable" skips into
# failures, so a run cannot silently skip the OS layer.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYSB_REQUIRE_PROVIDERS="${PYSB_REQUIRE_PROVIDERS-landlock,bwrap,unshare,firejail,qemu}"
# pysb-ray's tests run a real local Ray cluster: a missing Ray is a failure, not a skip.
export PYSB_REQUIRE_RAY="${PYSB_REQUIRE_RAY-1}"
.venv/bin/pysb providers
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
