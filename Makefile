# beamalloc: `make demo` and `make test` work on a fresh Debian 12 machine; both run `make setup`,
# which is idempotent (it installs only what is missing or changed).
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Debian packages: Erlang/OTP 25 (erl, erlc, epmd) for the collector, the workloads and the tests.
DEB_PACKAGES := erlang-nox erlang-dev chromium chromium-driver
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup debs demo test bench lint clean

setup: debs $(STAMP)

debs:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; \
	fi

# The package, its dependencies and the Rust extension (beamalloc._refalloc), rebuilt when any
# of their sources change.
$(STAMP): setup.cfg pyproject.toml refalloc/Cargo.toml $(wildcard refalloc/src/*.rs refalloc/src/**/*.rs)
	@command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup"; exit 2; }
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: setup
	$(BIN)/beamalloc demo

test: setup
	$(BIN)/ruff check .
	cd refalloc && cargo test -q --no-default-features
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: setup
	@for b in tests/bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done
	cd refalloc && cargo run -q --release --no-default-features --example bench -- aoffcbf 10000000

clean:
	rm -rf $(VENV) build refalloc/target *.egg-info
