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

.PHONY: install demo test faults lint bench serve clean real-cli

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

# The fault suite (tests/faults): its own PostgreSQL, Redis and replicas, faults injected under
# load. ATOR_FAULT_KILLS sets the SIGKILL loop's length (default 50, about 12 s a kill on 2 cores).
faults: install
	$(BIN)/pytest -s -m faults tests/faults  # -s: each test prints its FAULT line

lint: $(STAMP)
	$(BIN)/ruff check src tests bench lint
	$(BIN)/mypy
	$(BIN)/lint-imports

# The real agent CLIs for tests/test_real_cli.py (ATOR_TEST_REAL_CLI=1): the claude binary
# bundled in claude-agent-sdk's wheel and codex's in openai-codex-cli-bin, kept apart from
# the venv's packages.
REAL_CLI := $(VENV)/real-cli/.installed
$(REAL_CLI): $(STAMP)
	$(BIN)/pip install --quiet --no-deps --target $(VENV)/real-cli \
		claude-agent-sdk==0.2.189 openai-codex-cli-bin==0.163.0
	touch $(REAL_CLI)

real-cli: $(REAL_CLI)

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/engine_overhead.py
	$(BIN)/python bench/tracing.py

serve: install
	$(BIN)/ator serve

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache web/node_modules src/ator/web/dist
