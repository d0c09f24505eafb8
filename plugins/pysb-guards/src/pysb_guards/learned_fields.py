"""Checks of the fields of learned records, before a family turns one into a rule.

A learning run's records come from the sandbox: the report channel is a descriptor the
program can write into, so a record may claim anything (issue 26). A record is dropped
(:meth:`pysb_core.guardkit.LearnedProfile.drop`, said in the summary) unless each field is
what a real access produces: a file name the kernel could have opened, an environment
name the profile grammar reads as a name, a host a network rule reads as one host, a port.
The writer then spells what is kept as data (no variable, YAML or comment syntax in it
changes its meaning); these checks make sure that a field cannot mean *more* than one
access even where the grammar gives a character a meaning (``*`` is every host,
``*_KEY`` a glob of environment names).

Host side only (imported by the families' ``pysb_learned``); no ``re``, no ``ipaddress``
at import time.
"""

from __future__ import annotations

#: Linux's PATH_MAX and NAME_MAX, in bytes: a longer name cannot have been opened.
PATH_MAX = 4096
NAME_MAX = 255


def path_problem(path: object) -> str | None:
    """Why ``path`` cannot be an absolute file name the program used (None: it can)."""
    import os

    if not isinstance(path, str) or not path.startswith("/"):
        return "not an absolute path"
    if "\0" in path:
        return "holds a NUL byte"
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:
        return "not a file name (a lone surrogate that is no byte)"
    if len(raw) >= PATH_MAX:
        return f"longer than {PATH_MAX} bytes"
    if any(len(part) > NAME_MAX for part in raw.split(b"/")):
        return f"a component longer than {NAME_MAX} bytes"
    return None


def env_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a learned environment name: ``[A-Za-z_][A-Za-z0-9_]*``,
    what ``${NAME}`` reads (a ``*`` would make the key a glob, a ``}`` end the variable)."""
    if not isinstance(name, str) or not name or len(name) > 256:
        return "not a name"
    if not (name[0] == "_" or (name[0].isascii() and name[0].isalpha())):
        return "not a name ([A-Za-z_][A-Za-z0-9_]*)"
    if not all(c == "_" or (c.isascii() and c.isalnum()) for c in name):
        return "not a name ([A-Za-z_][A-Za-z0-9_]*)"
    return None


def module_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a top-level module name (an identifier, not a keyword)."""
    import keyword

    if not isinstance(name, str) or not name.isidentifier() or len(name) > NAME_MAX:
        return "not a module name"
    if keyword.iskeyword(name):
        return "a keyword, not a module name"
    return None


def host_problem(host: object) -> str | None:
    """Why ``host`` cannot be the one host a connection named: an IP address, or a host
    name of letters, digits, ``-`` and ``_`` labels (never ``*``, a CIDR, a list, a space)."""
    if not isinstance(host, str) or not host or len(host) > 253:
        return "not a host"
    import ipaddress

    if "%" in host:
        return "a scoped address (no rule names one)"
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    for label in labels:
        if not label or len(label) > 63 or label[0] == "-" or label[-1] == "-":
            return "not a host name"
        if not all(c in "-_" or (c.isascii() and c.isalnum()) for c in label):
            return "not a host name"
    if labels[-1].isdigit():
        return "a numeric address in a legacy form, not a host name"
    return None


def port_problem(port: object) -> str | None:
    """Why ``port`` cannot be a port (an integer 0-65535, not a bool)."""
    if type(port) is not int or not 0 <= port <= 65535:
        return "not a port"
    return None
