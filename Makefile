# beamalloc: `make demo` and `make test` work on a fresh Debian 12 machine; both run `make setup`,
# which is idempotent (it installs only what is missing or changed).
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Debian packages: Erlang/OTP 25 (erl, erlc, epmd) for the collector, the workloads and the tests.
DEB_PACKAGES := erlang-nox erlang-dev chromium chromium-driver bpfcc-tools python3-bpfcc linux-headers-amd64 bpftrace bpftool prometheus elixir pipx debootstrap
# Real applications whose paste formats tests/live/test_pastes_live.py checks in force; installed
# with invoke-rc.d told not to start their services (policy-rc.d), so setup starts no broker.
APP_PACKAGES := rabbitmq-server ejabberd
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup debs ebpf-prep otp-runtimes otp-sym bytecode demo test test-fast bench fuzz lint clean wheel matrix

setup: debs $(STAMP) ebpf-prep otp-runtimes otp-sym bytecode

# Newer OTP releases beside the system's OTP 25 (docs/erts/releases.md §1): Debian chroots with
# erl, erlc (erlang-base) and the tools and runtime_tools applications, for the live tests on
# every release (tests/otp.py starts nodes in them). Kept outside the clone and independent of
# XDG_CACHE_HOME, so a fresh clone reuses them; built in DIR.tmp and renamed, so a stamp means a
# whole runtime; nothing is done the second time. Skipped without root (debootstrap, chroot).
# Two setups at once (two clones on one machine) take turns on OTP_CACHE/.lock: the second would
# otherwise remove the first one's half-made DIR.tmp or build directory and start again.
OTP_CACHE ?= /var/cache/beamalloc
OTP_SUITES := otp27=trixie otp29=forky
OTP_DEBS := erlang-base,erlang-tools,erlang-runtime-tools
otp-runtimes: debs
	@[ "$$(id -u)" = 0 ] || { echo "not root: OTP 27/29 runtimes not provisioned (live tests run on OTP 25 only)"; exit 0; }; \
	mkdir -p $(OTP_CACHE) && exec 9>$(OTP_CACHE)/.lock && flock 9; \
	for rs in $(OTP_SUITES); do \
	  rel=$${rs%%=*}; suite=$${rs#*=}; dir=$(OTP_CACHE)/$$rel; \
	  [ -e $$dir/.beamalloc-ready ] && continue; \
	  echo "provisioning $$rel (Debian $$suite) in $$dir: a few minutes, once"; \
	  umount -R $$dir.tmp/proc 2>/dev/null; rm -rf --one-file-system $$dir.tmp && mkdir -p $(OTP_CACHE) && \
	  debootstrap --variant=minbase --include=$(OTP_DEBS) $$suite $$dir.tmp \
	    http://deb.debian.org/debian /usr/share/debootstrap/scripts/sid >$(OTP_CACHE)/$$rel.log 2>&1 \
	    || { echo "debootstrap $$suite failed: see $(OTP_CACHE)/$$rel.log"; exit 1; }; \
	  printf -- '-module(beamalloc_probe).\n' >$$dir.tmp/tmp/beamalloc_probe.erl; \
	  chroot $$dir.tmp erlc -o /tmp /tmp/beamalloc_probe.erl || { echo "$$rel: erlc fails in the chroot"; exit 1; }; \
	  rm -f $$dir.tmp/tmp/beamalloc_probe.*; \
	  chroot $$dir.tmp erl -noshell -eval 'io:format("~s~n", [erlang:system_info(otp_release)]), halt().' \
	    >$$dir.tmp/.beamalloc-ready || { echo "$$rel: erl does not start in the chroot"; exit 1; }; \
	  umount $$dir/proc 2>/dev/null; rm -rf --one-file-system $$dir && mv -T $$dir.tmp $$dir; \
	done

# Emulators with their symbols (docs/erts/releases.md §5): Debian strips beam.smp (OTP 29's keeps no
# alloc_util symbol at all), and the tracer's .symtab path needs OTP 26+ builds that keep them. For
# each runtime, a copy whose beam.smp is built as Debian builds it, unstripped, in a build chroot (a
# copy of the runtime: its own suite's compiler and glibc): Debian's source package of the version
# the runtime runs (`apt-get source`: the upstream tarball, then debian.tar.xz's patches applied by
# dpkg-source in debian/patches/series order), configured with debian/rules' options and
# dpkg-buildflags' flags (the hardening flags; -g -O2 -fno-strict-aliasing as the rules add them),
# only the emulator. Where the mirror serves no .dsc, the upstream tarball alone, and the stamp
# says so. The build chroot goes away once the runtime is made (one whose emulator was built is
# reused by an interrupted run); `.beamalloc-sym` names the version, the patches and the options,
# and a runtime made before patches were applied (no `patches:` line) is rebuilt once, beside it:
# DIR is replaced only when the new one starts. About 8 minutes each on 2 quiet cores, up to 30
# when the machine is busy. A failed build is said in one line and does not fail setup: the tests
# that need the runtime skip, naming it (tests/otp.py).
# OTP 29 only by default: it is the build whose alloc_util symbols exist in .symtab alone (OTP 27's
# Debian beam.smp exports them already, §3); `make otp-sym OTP_SYM="otp27=trixie otp29=forky"`
# builds both (the tests of a missing one skip, naming it). One build keeps a fresh setup ~8 min
# shorter. OTP_SYM_SUFFIX names the runtime's directory (otp29sym by default): another suffix
# builds beside a runtime the tests are using.
OTP_SYM ?= otp29=forky
OTP_SYM_SUFFIX ?= sym
OTP_SYM_DEBS := gcc g++ make perl xz-utils dpkg-dev libncurses-dev zlib1g-dev libsctp-dev \
  libsystemd-dev
# debian/rules' configure options; then, for what beam.smp does not contain (crypto, Java, wx, ODBC
# are separate libraries and applications), `--without-*` instead of their build dependencies.
OTP_SYM_CONFIGURE := --prefix=/usr --libexecdir=/usr/bin --infodir=/usr/share/info \
  --mandir=/usr/share/man --enable-kernel-poll --enable-esock --enable-systemd --enable-sctp \
  --enable-shared-zlib --disable-builtin-zlib --without-ssl-zlib --disable-silent-rules \
  --without-ssl --without-javac --without-wx --without-odbc
otp-sym: otp-runtimes
	@[ "$$(id -u)" = 0 ] || exit 0; \
	mkdir -p $(OTP_CACHE) && exec 9>$(OTP_CACHE)/.lock && flock 9; \
	for rs in $(OTP_SYM); do \
	  rel=$${rs%%=*}; suite=$${rs#*=}; src=$(OTP_CACHE)/$$rel; dir=$(OTP_CACHE)/$${rel}$(OTP_SYM_SUFFIX); b=$$dir.build; \
	  [ -e $$dir/.beamalloc-ready ] && grep -q '^patches: ' $$dir/.beamalloc-sym 2>/dev/null && continue; \
	  [ -e $$src/.beamalloc-ready ] || { echo "no $$src runtime to build $${rel}sym from"; continue; }; \
	  echo "building $$rel's beam.smp with symbols in $$b: 8-30 minutes, once"; \
	  start=$$(date +%s); log=$$dir.log; \
	  ver=$$(chroot $$src dpkg-query -W -f='$${Version}' erlang-base) && \
	  erts=$$(basename $$(ls -d $$src/usr/lib/erlang/erts-*)) || continue; \
	  umount $$dir.tmp/proc 2>/dev/null; rm -rf --one-file-system $$dir.tmp; \
	  if ! ls $$b/build/*/bin/*/beam.smp >/dev/null 2>&1; then \
	    rm -rf --one-file-system $$b && cp -ax $$src $$b && mkdir $$b/build && \
	    echo "deb-src http://deb.debian.org/debian $$suite main" >$$b/etc/apt/sources.list.d/src.list && \
	    { chroot $$b apt-get -o Acquire::Check-Valid-Until=false update -q && DEBIAN_FRONTEND=noninteractive chroot $$b apt-get install \
	        -y -q --no-install-recommends $(OTP_SYM_DEBS) && \
	      chroot $$b sh -c "cd /build && if apt-get source -q erlang=$$ver >&2; then \
	          echo \"patches: \$$(cat */debian/patches/series | tr '\n' ' ')(debian/patches/series, applied by dpkg-source)\"; \
	        else rm -rf /build/*/ && apt-get source -q --tar-only erlang=$$ver >&2 && tar xJf *.orig.tar.xz \
	          && echo 'patches: none: the mirror served no .dsc, so the upstream tarball alone'; fi >/build/patches \
	        && cd \$$(ls -d /build/*/ | head -1) && export ERL_TOP=\$$PWD && eval \"\$$(dpkg-buildflags --export=sh)\" \
	        && export CFLAGS=\"\$$CFLAGS -g -O2 -fno-strict-aliasing\" && t=\$$(dpkg-architecture -qDEB_HOST_GNU_TYPE) \
	        && ./configure --host=\$$t --build=\$$t $(OTP_SYM_CONFIGURE) \
	        && echo \"configure: --host=\$$t --build=\$$t $(OTP_SYM_CONFIGURE) CFLAGS=\$$CFLAGS LDFLAGS=\$$LDFLAGS\" >>/build/patches \
	        && nice -n 10 make -C erts/emulator -j2 opt FLAVOR=jit GEN_OPT_FLGS=-O2"; \
	    } >$$log 2>&1 || { echo "$${rel}sym: the build failed: see $$log"; continue; }; \
	    echo "emulator built in $$(( $$(date +%s) - start )) s" >>$$log; \
	  fi; \
	  built=$$(ls $$b/build/*/bin/*/beam.smp) && \
	  [ "$$(sed -n 's/^VSN *= *//p' $$b/build/*/erts/vsn.mk)" = "$${erts#erts-}" ] \
	    || { echo "$${rel}sym: the source is not $$erts"; continue; }; \
	  readelf -S $$built | grep -q '\.symtab' || { echo "$${rel}sym: $$built has no .symtab"; continue; }; \
	  cp -ax $$src $$dir.tmp && install -m 755 $$built $$dir.tmp/usr/lib/erlang/$$erts/bin/beam.smp && \
	  chroot $$dir.tmp erl -noshell -eval 'io:format("~s~n", [erlang:system_info(otp_release)]), halt().' \
	    >$$dir.tmp/.beamalloc-ready || { echo "$${rel}sym: erl does not start"; continue; }; \
	  { echo "erlang $$ver ($$erts): beam.smp built from its source with symbols"; cat $$b/build/patches; } \
	    >$$dir.tmp/.beamalloc-sym; \
	  rm -rf --one-file-system $$b; umount $$dir/proc 2>/dev/null; rm -rf --one-file-system $$dir; \
	  mv -T $$dir.tmp $$dir; \
	done

# Bytecode of the editable install's sources: the environment may set PYTHONDONTWRITEBYTECODE, and
# a command that compiles every module it imports starts several times slower (cli/main.py,
# "Startup"). Cheap when nothing changed; pip compiles an installed wheel itself.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j0 beamalloc collector analyzer advice ebpf webui \
	  refalloc/*.py timeseries reporters htmlreport cli

# eBPF (docs/ebpf.md): bcc compiles against /lib/modules/$(uname -r)/build; a kernel that ships no
# headers gets Debian's amd64 ones linked there (build = arch tree, source = common tree); tracefs
# mounted for tracepoints. Idempotent; skipped without root.
ebpf-prep: debs
	@[ "$$(id -u)" = 0 ] || exit 0; K=$$(uname -r); H=$$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -1); \
	if [ ! -e /lib/modules/$$K/build/include ] && [ -n "$$H" ]; then \
	  mkdir -p /lib/modules/$$K && ln -sfn $$H /lib/modules/$$K/build && ln -sfn $${H%-amd64}-common /lib/modules/$$K/source; fi; \
	[ -d /sys/kernel/tracing/events ] || mount -t tracefs nodev /sys/kernel/tracing || true

debs:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; \
	fi
	@missing=$$(for p in $(APP_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing (services not started):" $$missing; \
	  guard=; [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee /usr/sbin/policy-rc.d >/dev/null && $(SUDO) chmod 755 /usr/sbin/policy-rc.d && guard=1; }; \
	  { $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; }; rc=$$?; \
	  [ -z "$$guard" ] || $(SUDO) rm -f /usr/sbin/policy-rc.d; exit $$rc; \
	fi

# The package, its dependencies and the Rust extension (beamalloc._refalloc), rebuilt when any
# of their sources change.
$(STAMP): setup.cfg pyproject.toml refalloc/Cargo.toml $(wildcard refalloc/src/*.rs refalloc/src/**/*.rs) \
		collector/native/Cargo.toml $(wildcard collector/native/src/*.rs)
	@command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup"; exit 2; }
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: setup
	$(BIN)/beamalloc demo

# The slowest tests are listed at the end of every run (CI included): the suite must stay under
# 30 minutes of wall time, and this is where its time goes. The tests that start no BEAM run
# first on both cores (the fast tier as test-fast runs it, with the browser's pages and the
# crash-dump corpus); the live tests then one at a time, since they measure real nodes and
# probes that a test beside them would disturb.
test: setup
	$(BIN)/ruff check .
	cd refalloc && cargo test -q --workspace --no-default-features
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not live" -n 2 --durations=10
	$(BIN)/python -m pytest -q -p no:cacheprovider -m live --durations=25

# The inner loop: no BEAM, no browser, nothing over a few seconds (tests/conftest.py fails a test
# that starts one without its mark, docs/architecture.md "Test tiers"). About 4 minutes of CPU,
# so it runs on both cores (pytest-xdist): under 3 minutes of wall time here.
test-fast: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not live and not slow" -n 2 --durations=15

# The wheel (and sdist) operators install with pipx on a host without Rust or a compiler
# (docs/install.md): dist/beamalloc-<version>-cp311-cp311-linux_x86_64.whl. tests/test_wheel.py
# builds and installs it the same way.
wheel: setup
	$(BIN)/python -m build --outdir dist

# Benchmarks print ratios measured in one run (tests/bench/bench_replay.py replays 20 M events
# through refalloc and through glibc malloc).
bench: setup
	@for b in tests/bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# The verdict's matrix (issue 22 item 8, docs/recommend.md "The matrix"): workloads x the settings
# nodes carry x OTP 25/27/29, each cell judged by `recommend` and measured by a restart with the
# advice; not part of `make test` (it restarts some 150 nodes, two at a time: about 7 minutes).
# The whole matrix writes its table into docs/recommend.md; MATRIX_ARGS narrows it (e.g.
# --releases 25 --workloads kept,healthy) and then only prints.
MATRIX_ARGS ?=
matrix: setup
	$(BIN)/python tests/e2e/matrix.py --jobs 2 --docs $(MATRIX_ARGS)

# Coverage-guided fuzzing of the trace readers (Rust and Python), the replay and the input readers
# (term text, ETF, recon, crash dumps; refalloc/fuzz/README.md), eight fuzzers for FUZZ_SECS
# seconds, at once (FUZZ_TARGETS picks some). Not part of `make test`:
# it needs a nightly toolchain, cargo-fuzz and atheris (installed by it) and is meant to run for
# an hour.
FUZZ_SECS ?= 600
fuzz: setup
	FUZZ_SECS=$(FUZZ_SECS) PYTHON=$(CURDIR)/$(BIN)/python refalloc/fuzz/run.sh

clean:
	rm -rf $(VENV) build refalloc/target *.egg-info
