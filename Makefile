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

# The local model's runtime, llama-cpp-python (the `local` extra), has no wheels on PyPI, so
# pip would compile llama.cpp from its sdist in every new venv. It is built once per machine
# instead, into a wheel directory outside the checkout that every later venv installs from
# (`make test` in a fresh clone, CI), and only with what ator loads: libllama and libggml, no
# multimodal library (LLAVA_BUILD) and no `common` library (packaging/llama-cpp.cmake), for
# this CPU. The directory is named by a digest of what the wheel depends on (version, flags,
# CPU), so changing any of them builds a new one. WHEEL_CACHE moves it.
LLAMA_CPP := llama-cpp-python==0.3.36
LLAMA_CMAKE := packaging/llama-cpp.cmake
LLAMA_FLAGS := -DLLAVA_BUILD=OFF
WHEEL_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ator/wheels
LLAMA_KEY := $(shell { echo '$(LLAMA_CPP) $(LLAMA_FLAGS)'; cat $(LLAMA_CMAKE); uname -m; \
	grep -m1 '^flags' /proc/cpuinfo 2>/dev/null; } | cksum | cut -d' ' -f1)
LLAMA_WHEELS := $(WHEEL_CACHE)/llama-cpp-$(LLAMA_KEY)
LLAMA_WHEEL := $(LLAMA_WHEELS)/.built
# --only-binary: a venv never compiles llama.cpp itself; it takes the wheel built above.
PIP_LOCAL := --only-binary llama-cpp-python --find-links $(LLAMA_WHEELS)

# The venv in steps, so that what is independent runs side by side (`install` and `demo` run
# make with -j3): the packages install while llama.cpp compiles, and the console builds too.
# `demo` needs only ator and its local extra; `install` adds the dev tools and the console.
PIP_READY := $(VENV)/.pip
RUNTIME := $(VENV)/.runtime
LOCAL := $(VENV)/.local
DEV := $(VENV)/.dev

$(PIP_READY):
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	touch $@

$(RUNTIME): $(PIP_READY) pyproject.toml
	$(BIN)/pip install --quiet -e .
	touch $@

$(DEV): $(PIP_READY) pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# --no-cache-dir: pip's own wheel cache would hand back a wheel built with other flags.
$(LLAMA_WHEEL): | $(PIP_READY)
	@echo "building $(LLAMA_CPP) once for this machine into $(LLAMA_WHEELS)"
	mkdir -p $(WHEEL_CACHE)
	tmp=$$(mktemp -d $(WHEEL_CACHE)/.build-XXXXXX) && \
	CMAKE_ARGS='$(LLAMA_FLAGS) -DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/$(LLAMA_CMAKE)' \
		$(BIN)/pip wheel --quiet --no-cache-dir --no-deps --no-binary llama-cpp-python \
		-w $$tmp '$(LLAMA_CPP)' && \
	mkdir -p $(LLAMA_WHEELS) && mv $$tmp/*.whl $(LLAMA_WHEELS)/ && rm -rf $$tmp && touch $@

# A venv that has the same llama-cpp-python version from another build (flags, CMake file)
# would keep it: the wheel of this key is put in over it.
LLAMA_INTO_VENV := $(BIN)/pip install --quiet --force-reinstall --no-deps --no-index \
	--find-links $(LLAMA_WHEELS) '$(LLAMA_CPP)'

$(LOCAL): $(RUNTIME) $(LLAMA_WHEEL)
	$(BIN)/pip install --quiet $(PIP_LOCAL) -e '.[local]'
	$(LLAMA_INTO_VENV)
	touch $@

$(STAMP): $(DEV) $(LLAMA_WHEEL)
	$(BIN)/pip install --quiet $(PIP_LOCAL) -e '.[dev,local]'
	$(LLAMA_INTO_VENV)
	touch $@ $(RUNTIME) $(LOCAL)

$(WEB_DIST): $(WEB_SRC)
	cd web && npm ci --no-audit --no-fund && npm run build

install:
	@$(MAKE) --no-print-directory -j3 $(STAMP) $(WEB_DIST)

# A first conversation: the local model, the embedded database, no console, no dev tools.
demo:
	@$(MAKE) --no-print-directory -j3 $(LOCAL)
	$(BIN)/ator demo

# Two processes, a file each at a time (a file's module-scoped servers stay in one process;
# each process has its own database): most tests wait on sockets and subprocesses, so two
# run in 10 minutes what one ran in 22 on 2 cores. ATOR_TEST_PROCESSES=1 runs them serially.
ATOR_TEST_PROCESSES ?= 2
test: install
	$(BIN)/pytest --ignore=tests/faults -n $(ATOR_TEST_PROCESSES) --dist loadfile

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
