"""What the programs a learning run executes do: their file and network accesses.

The Python guards record what the sandboxed interpreter does; a program it starts
(``/bin/ls``, ``sh -c``, a child ``python3``) is native code they never see. In a learning
run the sandboxed interpreter loads, just before the program starts, a seccomp filter
that hands the file and network system calls of every process of the run to pysb
(``SECCOMP_RET_USER_NOTIF``); pysb reads each call's path or address from the caller's
memory (``/proc/PID/mem``), records it, and lets the call go on unchanged (``CONTINUE``):
nothing is refused, so a path changed after it was read (TOCTOU) costs nothing but the
accuracy of a record.

The records are :class:`~pysb_core.events.Event` objects of the ``files`` and ``network``
families, in the shape their guards record (``layer: os``), so the families' own
``pysb_learned`` turns them into rules exactly as it does the Python-level ones. The
guarded interpreter itself (and a fork of it that has not executed another program) is
recognised by its ``AT_RANDOM`` bytes and not recorded: the guards see it better.

- :mod:`.calls`: which system calls are watched, and what each one's arguments mean;
- :mod:`.child`: the filter, loaded in the sandboxed interpreter (a child set-up);
- :mod:`.remote`: reading a watched process (bounded: everything there is hostile data);
- :mod:`.supervisor`: pysb's side: the notifications, as learned events.

docs/learning.md says why this mechanism, and what it costs.
"""
