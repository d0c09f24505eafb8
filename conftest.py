"""Shared fixtures for every test directory (tests/ and plugins/*/tests)."""

pytest_plugins = ["pysb_core.testing"]
