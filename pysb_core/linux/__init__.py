"""Linux primitives: libc calls without ctypes, no-follow opens, the seccomp filter,
the system files a sandbox shows, the process tree, pids cgroups, what an
executable needs, pysb's state directory, path containment. They import nothing of
pysb's stages (an import-linter contract: pyproject.toml).
"""
