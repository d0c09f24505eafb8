# One command each: `make demo` (set up and run the demo), `make test` (set up and run the
# tests: the fast complete pass), `make test-full` (every provider x case cell).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
PLUGINS = $(wildcard plugins/pysb-*)

.PHONY: dev system-deps demo test test-full lint bench docs clean

# `name==lower-bound` of each runtime dependency of pysb-core.
export OLDEST_PINS = import re, tomllib; deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; print(" ".join(re.sub(r">=([^,]+),.*", r"==\1", d) for d in deps))

$(BIN)/.installed: pyproject.toml $(addsuffix /pyproject.toml,$(PLUGINS))
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e . $(addprefix -e ,$(PLUGINS)) \
	    "pytest>=8" "hypothesis>=6" "ruff>=0.5" "pytest-timeout>=2" "ipython>=8" \
	    "build>=1.2" "twine>=6.1" "hatchling>=1.27" "mkdocs-material>=9.5" \
	    "mypy>=2.4,<2.5" "import-linter>=2.17,<3" "ray>=2.9" "uv>=0.4" \
	    "requests>=2.31" "flask>=3.0" \
	    "httpx>=0.27" "aiohttp>=3.9" "h2>=4.1"  # the learning corpus; pysb-proxy's clients (h2: its HTTP/2 test, see its README)
	$(BIN)/pip wheel -q -w $(VENV)/wheelhouse click pluggy stevedore pyyaml dnspython hatchling pytest
	# the oldest versions pyproject.toml allows (tests/test_packaging.py installs them)
	$(BIN)/pip wheel -q -w $(VENV)/wheelhouse $$($(BIN)/python -c "$$OLDEST_PINS")
	touch $@

dev: $(BIN)/.installed

system-deps:
	./scripts/install-system-deps.sh

demo: system-deps dev
	$(BIN)/python examples/demo/run_demo.py

test: system-deps dev
	./scripts/test.sh

test-full: system-deps dev
	./scripts/test.sh --full

# mypy --strict on the supported plugin API (the files are listed in pyproject.toml) and
# import-linter's contracts (pyproject.toml's [tool.importlinter]: no import circles, the
# plugin boundary); tests/test_typing.py and tests/test_import_contracts.py run the same
# checks in `make test`, so CI runs them too.
lint: dev
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy && $(BIN)/lint-imports --no-cache

# The documentation site (mkdocs-material) into site/; --strict: a page missing from the
# nav, a broken link or anchor is an error. Generated parts: scripts/mkdocs_hooks.py.
docs: dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

bench: system-deps dev
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/compat.py
	$(BIN)/python benchmarks/proxy.py

clean:
	rm -rf $(VENV) .pytest_cache site
