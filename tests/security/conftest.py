"""Make the bench helpers (escape_bench, probe) importable by the tests next to them."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
