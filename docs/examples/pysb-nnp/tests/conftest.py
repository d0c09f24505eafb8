pytest_plugins = ["pysb_core.testing"]
