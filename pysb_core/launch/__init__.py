"""One sandboxed run, from the frozen policy to the exit status: the session pipeline,
plugin and provider loading, the launch plan's parts (implicit exposures, hidden
paths, the private temporary directory, standard streams), and waiting for the
sandbox (signals, job control, wall-time). docs/architecture.md has the map.
"""
