# The targets CI runs are exactly these. `make demo` and `make test` work on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The web console: built from web/ into the package (git-ignored, shipped in the wheel), again
# whenever a web source changes.
WEB_DIST := src/ator/web/dist/index.html
WEB_SRC := $(shell find web/src -type f 2>/dev/null) web/index.html web/package.json \
	web/package-lock.json web/vite.config.ts web/tsconfig.json

.PHONY: install demo test faults lint bench serve clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,local]'
	touch $(STAMP)

$(WEB_DIST): $(WEB_SRC)
	cd web && npm ci --no-audit --no-fund && npm run build

install: $(STAMP) $(WEB_DIST)

demo: install
	$(BIN)/ator demo

test: install
	$(BIN)/pytest --ignore=tests/faults

# The fault suite (tests/faults): faults injected while conversations are in flight.
faults: install
	$(BIN)/pytest tests/faults -s

lint: $(STAMP)
	$(BIN)/ruff check src tests bench lint
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/engine_overhead.py
	$(BIN)/python bench/tracing.py

serve: install
	$(BIN)/ator serve

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache web/node_modules src/ator/web/dist
