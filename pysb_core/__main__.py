"""``python -m pysb_core`` is ``pysb``."""

from pysb_core.cli import main

raise SystemExit(main())
