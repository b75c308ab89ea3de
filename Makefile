# pml developer commands. `make help` lists them. Every target creates .venv if it is missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CARGO_MANIFEST := pml_core_rs/Cargo.toml
RUST_SOURCES := $(shell find pml_core_rs/src -name '*.rs') pml_core_rs/Cargo.toml pml_core_rs/Cargo.lock
EXT := pml_server/_core.abi3.so
DATA_DIR ?= ./pml-data
LISTEN ?= 127.0.0.1:50051

.DEFAULT_GOAL := help
.PHONY: help serve cluster test test-quick bench lint proto fmt install clean system-deps dist docs

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-11s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml clients/python/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e clients/python -e '.[dev]'
	@touch $@

$(EXT): $(STAMP) $(RUST_SOURCES)
	$(VENV)/bin/maturin develop --release --quiet --skip-install
	@touch $@

install: $(EXT) ## create .venv and build the package with its dev extras

serve: install ## run the gRPC server on 127.0.0.1:50051 with data in ./pml-data
	$(VENV)/bin/pml serve --listen $(LISTEN) --data-dir $(DATA_DIR)

cluster: install ## PostgreSQL, two replicas on loopback, ./pml-cluster; Ctrl-C stops
	@bash tools/cluster.sh

system-deps: ## install fuse3 and PostgreSQL for the tests, or say what is missing
	@bash tools/system_deps.sh

test: system-deps install lint ## lint, then the Rust and Python tests (slow ones included)
	cargo test --quiet --manifest-path $(CARGO_MANIFEST)
	$(PY) -m pytest -q

test-quick: install ## tests needing only Python: no slow, PostgreSQL, FUSE, Go, Node, real model
	$(PY) -m pytest -q -m "not slow and not postgres and not fuse and not go and not node and not model"

BENCH_STAMP := $(VENV)/.bench-installed

# The `bench` extra alone, read from pyproject.toml: `pip install -e .[bench]` would rebuild the
# Rust extension for nothing.
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(PY) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["bench"]))' > $(VENV)/bench-requirements.txt
	$(PY) -m pip install --quiet -r $(VENV)/bench-requirements.txt
	@touch $@

bench: install $(BENCH_STAMP) ## run the benchmarks (bench extras) and write benches/results/
	$(PY) -m benches $(BENCH_ARGS)

lint: install ## ruff, mypy, stubtest, cargo fmt/clippy, buf, go vet, doc links
	$(VENV)/bin/ruff check pml_server clients/python tests benches testing tools
	$(VENV)/bin/ruff format --check pml_server clients/python tests benches testing tools
	$(VENV)/bin/mypy pml_server clients/python/pml_client
	$(PY) tools/check_links.py
	$(PY) -m mypy.stubtest pml_server._core
	cargo fmt --manifest-path $(CARGO_MANIFEST) --check
	cargo clippy --quiet --manifest-path $(CARGO_MANIFEST) --all-targets --features python -- -D warnings
	cd proto && ../$(VENV)/bin/buf lint
	@command -v go >/dev/null || { echo "lint: Go is needed for clients/go (no go on PATH)"; exit 1; }
	cd clients/go && test -z "$$(gofmt -l .)" && go vet ./...

proto: $(STAMP) ## regenerate the protos' code (server and the three clients)
	$(PY) tools/gen_proto.py

fmt: $(STAMP) ## format Python and Rust sources
	$(VENV)/bin/ruff format pml_server clients/python tests benches testing tools
	$(VENV)/bin/ruff check --fix pml_server clients/python tests benches testing tools
	cargo fmt --manifest-path $(CARGO_MANIFEST)

dist: $(STAMP) ## the server and pml-client wheels, into dist/
	$(VENV)/bin/maturin build --release --quiet --out dist
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist clients/python

docs: $(STAMP) ## regenerate the config reference and benchmark history
	$(PY) tools/gen_config_doc.py
	$(PY) tools/gen_bench_history.py

clean: ## remove build outputs (keeps .venv and data)
	cargo clean --manifest-path $(CARGO_MANIFEST)
	rm -f $(EXT)
	rm -rf dist
