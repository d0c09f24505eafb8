"""The floor of a sandboxed start: one interpreter that starts another and waits.

``python _spawn_floor.py ARGV...`` spawns ``ARGV`` (``posix_spawn``, no shell, nothing
imported but the interpreter's own modules), waits for it and exits with its status. With
ARGV = ``python -c pass`` it is the least any launcher written in Python pays (two
interpreters, one after the other); with a provider's tool in front (``bwrap ... python -c
pass``) it adds what that tool itself costs. benchmarks/startup.py reports each provider's
``pysb run -c pass`` beside this floor, measured in the same run.
"""

import os
import sys

pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)
status = os.waitpid(pid, 0)[1]
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
