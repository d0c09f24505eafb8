"""Light stand-ins for pluggy, importlib.metadata and dataclasses on pysb's start-up path.

Why they exist: start-up time is a budget. ``pysb run -c pass`` may cost at most 6x
``python -c pass`` under the subprocess provider and 8x under the OS providers
(ARCHITECTURE.md, §Performance budget; measured in docs/performance.md), which leaves
pysb a few tens of milliseconds for its host side and, inside the sandbox, for the
bootstrap. The libraries pysb is built on cost a large part of that before doing
anything: importing pluggy (with ``inspect``, ``ast``, ``dis``, ``tokenize``, ``typing``)
about 6 ms, ``importlib.metadata`` (with ``email``) about 20 ms, ``dataclasses`` (with
``inspect``) about 6 ms and an ``exec`` per generated method. So the run path uses these
instead, and the real libraries everywhere else (``pysb plugins``, ``pysb providers``,
third parties, tests):

- :mod:`.hooks` -- ``LightPluginManager``: the part of ``pluggy.PluginManager`` the run
  path uses, with pluggy's call order, ``firstresult`` and argument rules; any plugin that
  needs more of pluggy makes it hand over to a real pluggy manager;
- :mod:`.markers` -- ``hookimpl`` / ``hookspec``: set exactly the attributes pluggy's
  ``HookimplMarker("pysb")`` / ``HookspecMarker("pysb")`` set, so pluggy reads them as
  its own (guard modules are imported in the sandbox, where pluggy never is);
- :mod:`.entrypoints` -- entry points read from ``entry_points.txt`` directly, with
  importlib.metadata's answers (first distribution of a name on ``sys.path`` wins, its
  name and version from ``METADATA``, extras);
- :mod:`.records` -- ``@record`` / ``@mutable_record``: the surface of frozen dataclasses
  the code uses (construction, defaults, equality, hashing, ``repr``, ``replace``,
  pickling), from shared methods;
- :mod:`.strenum` -- ``StrEnum``: ``Capability``'s ``enum.StrEnum`` without ``enum``
  (which brings ``functools`` and ``collections``: ~2 ms);
- :mod:`.memo` -- ``cache``: ``functools.cache`` for the run path's two caches.

Each answers as the library it stands in for, and tests hold them to it by running the
same inputs through both: tests/test_startup_hooks.py (generated plugins, pluggy's
errors), tests/test_startup_entrypoints.py (odd distributions) and
tests/test_startup_shims.py (the installed pysb distributions and plugins, records
against dataclasses, the StrEnum against enum's). Private: plugin authors reach
``hookimpl`` and the records through :mod:`pysb_core`, :mod:`pysb_core.providerkit` and
:mod:`pysb_core.guardkit`.
"""
