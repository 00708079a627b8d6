# dlock -- the two commands of the README, and the sanitizer variants.
#   make demo   run the flash-sale demo on a private redis-server
#   make rig    the articles' rig: redis, 2 dlock-stockd behind nginx, ab
#   make rig-serve  the same rig kept up, with a live page (a button per strategy)
#   make test   build, run every test, then again under ASan+UBSan
# Both install what they need first (scripts/install-deps.sh).

JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# ctest runs twice as many cases as there are cores: the cases wait (leases,
# watchdogs, failovers, delayed replies) far more than they compute -- the
# ASan build's 71 late/ambiguous cases take 85 s of wall time for 23 s of
# CPU. Each case derives its bounds from the build's speed, never from a
# quiet machine, and the harness retries a taken port; the few CPU-heavy
# cases (Chromium, the rig, bench smoke) reserve 2 slots (PROCESSORS).
CTEST_JOBS ?= $(shell echo $$((2 * $(JOBS))))
CMAKE_FLAGS ?=

.PHONY: all deps deps-build deps-rig deps-test deps-dev build rig test test-plain test-asan test-tsan test-valgrind test-stress \
        demo bench bench-peers clean format tidy install man fuzz soak soak-all sim rig-serve screenshots

all: build

# What each target installs first (scripts/install-deps.sh): the demo only
# what building needs; the tests a few tools more; developer targets the
# rest (valgrind, clang-format, clang-tidy, stress-ng).
deps-build:
	@bash scripts/install-deps.sh build
deps-rig:
	@bash scripts/install-deps.sh rig
deps-test:
	@bash scripts/install-deps.sh test
deps deps-dev:
	@bash scripts/install-deps.sh dev

build: deps-build
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	cmake --build build -j$(JOBS)

# deps-test first: the build's configure looks for the tests' libraries
# (liblua5.1-0-dev: test_sim).
test-plain: deps-test build
	cd build && ctest --output-on-failure -j$(CTEST_JOBS) $(CTEST_FLAGS)

test-asan: deps-test
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DDLOCK_ASAN=ON $(CMAKE_FLAGS) >/dev/null
	cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j$(CTEST_JOBS) $(CTEST_FLAGS)

test: test-plain test-asan

# The whole suite (plain + ASan) STRESS_RUNS times in a row under a CPU hog
# (stress-ng --cpu 4): a flaky test shows here before it blocks CI.
STRESS_RUNS ?= 3
test-stress: deps-dev
	bash scripts/test-stress.sh $(STRESS_RUNS)

# DLOCK_TEST_TIMEOUT_MULT: at configure time for the harness cases (their
# timeouts and ctest's, tests/CMakeLists.txt), at run time for the others.
test-tsan: deps-test
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DDLOCK_TSAN=ON -DDLOCK_TEST_TIMEOUT_MULT=3 \
	  $(CMAKE_FLAGS) >/dev/null
	cmake --build build-tsan -j$(JOBS)
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  DLOCK_TEST_TIMEOUT_MULT=3 ctest --output-on-failure -j$(JOBS) $(CTEST_FLAGS)

test-valgrind: deps-dev
	cmake -S . -B build-valgrind -DCMAKE_BUILD_TYPE=Debug -DDLOCK_TEST_TIMEOUT_MULT=4 \
	  "-DDLOCK_TEST_PREFIX=valgrind;--error-exitcode=99;--leak-check=full;--errors-for-leak-kinds=definite;--track-fds=no;--quiet" \
	  $(CMAKE_FLAGS) >/dev/null
	cmake --build build-valgrind -j$(JOBS)
	cd build-valgrind && DLOCK_TEST_TIMEOUT_MULT=4 ctest --output-on-failure \
	  -j$(JOBS) -L unit $(CTEST_FLAGS)

# libFuzzer targets (tests/fuzz: URL, config file, server replies, the CLI's
# command line), clang with ASan+UBSan, FUZZ_SECONDS each. `make test`
# replays their committed corpora (fuzz.* cases) in every build.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= url config args reply
fuzz: deps-dev
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DDLOCK_FUZZ=ON -DBUILD_TESTING=OFF -DDLOCK_BUILD_TOOLS=OFF $(CMAKE_FLAGS) >/dev/null
	cmake --build build-fuzz -j$(JOBS)
	bash scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Worker processes (blocking and event-loop clients) on every lock kind
# under a random fault schedule and the wire adversary (late copies, held
# replies, cut connections) for SOAK_MINUTES, then a checker
# (tests/soak/soak.h); not part of make test. SOAK_TOPOLOGY: standalone,
# sentinel, cluster or etcd (a 3-member etcd cluster: the kinds etcd offers,
# leader kill -9 + restart, member SIGSTOPs); soak-all runs the four one
# after the other.
# SOAK_FLAGS="--faults wire-late,pause-waiter" runs only those classes.
SOAK_MINUTES ?= 10
SOAK_TOPOLOGY ?= standalone
SOAK_FLAGS ?=
soak: build
	SOAK_MINUTES=$(SOAK_MINUTES) ./build/tests/dlock_soak \
	  --topology $(SOAK_TOPOLOGY) $(SOAK_FLAGS)

soak-all: build
	@rc=0; for t in standalone sentinel cluster etcd; do \
	  SOAK_MINUTES=$(SOAK_MINUTES) ./build/tests/dlock_soak --topology $$t \
	    $(SOAK_FLAGS) || rc=1; \
	done; exit $$rc

# The deterministic simulator (docs/sim.md, "The simulator"): the real
# scripts in the Redis model, the real engine, simulated time. SIM_MINUTES
# of fresh seeds (default 1); SEED=n replays one seed exactly (SIM_FLAGS:
# e.g. --verbose for every event, --mixed-reentry).
SIM_MINUTES ?= 1
SIM_FLAGS ?=
sim: deps-test build
	cmake --build build -j$(JOBS) --target dlock_sim
	@if [ -n "$(SEED)" ]; then \
	  ./build/tests/dlock_sim --seed $(SEED) $(SIM_FLAGS); \
	else \
	  ./build/tests/dlock_sim --minutes $(SIM_MINUTES) $(SIM_FLAGS); \
	fi

# The lab in its three scenarios (normal, a killed holder, a lease shorter
# than the work): one table, a column per scenario; every naive strategy
# fails in at least one, only the correct ones stay "ok" in all three. The
# chart goes to build/seckill-demo.svg.
demo: build
	@if [ -x build/tools/seckill/dlock-seckill ]; then \
	  ./build/tools/seckill/dlock-seckill --strategy all --scenarios all \
	    --chart build/seckill-demo.svg && \
	  echo "chart: build/seckill-demo.svg"; \
	else \
	  ./build/examples/demo_two_procs; \
	fi

# The articles' rig with real parts (issue 16): a private redis-server, 2
# dlock-stockd instances behind nginx, ab sending 1,000 purchases at
# concurrency 200 per strategy. RIG_FLAGS: more options (--json, --chart
# FILE.svg, --strategy LIST, --requests N, ...; dlock-rig --help). With
# --json the object is the last line of the output.
rig: build deps-rig
	@./build/tools/rig/dlock-rig $(RIG_FLAGS)

# The rig kept up with its page (issue 29): open the printed URL, a button
# per strategy runs it and the page follows it live; every finished
# strategy gets a card, side by side. RIG_PORT: nginx's port (default: a
# free one). Ctrl-C stops everything.
RIG_PORT ?= 0
rig-serve: build deps-rig
	@./build/tools/rig/dlock-rig --serve --port $(RIG_PORT) $(RIG_FLAGS)

# The README's pictures from real runs (docs/img/seckill-chart.png: the
# demo's chart; docs/img/rig-page.png: the rig's page after every
# strategy), rendered in headless Chromium. Runs the demo and the rig
# (about 3 minutes).
screenshots: build deps-rig deps-test
	python3 tools/rig/screenshots.py --seckill build/tools/seckill/dlock-seckill \
	  --rig build/tools/rig/dlock-rig --out docs/img --svg build/seckill-demo.svg

bench: build
	./build/tools/bench/dlock-bench $(BENCH_FLAGS)

# dlock side by side with redis-py, node redlock and redis-semaphore on one
# private redis-server (contended scenario); missing peers are skipped.
bench-peers: build
	bash tools/bench/peers/run_peers.sh --bench ./build/tools/bench/dlock-bench $(PEERS_FLAGS)

# make install [PREFIX=/usr/local] [DESTDIR=staging-dir]: the library, its
# headers, pkg-config and CMake files, every tool and the man page. The tools
# find libdlock relative to themselves, so any PREFIX works; a pkg-config
# build against a PREFIX the loader does not search needs
# -Wl,-rpath,$$(pkg-config --variable=libdir dlock) (README). ldconfig runs
# after a real (non-DESTDIR) install as root.
PREFIX ?= /usr/local
install: build
	DESTDIR="$(DESTDIR)" cmake --install build --prefix "$(PREFIX)"
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then \
	  ldconfig; fi

format:
	clang-format -i include/*.h include/dlock/*.h src/*/*.c src/*/*.h tests/*.c tests/harness/*.[ch] tests/abi/*.c \
	  $$(ls tools/*/*.c examples/*.c 2>/dev/null)

tidy: deps-dev
	cmake -S . -B build-tidy -DDLOCK_CLANG_TIDY=ON >/dev/null
	cmake --build build-tidy -j$(JOBS)

clean:
	rm -rf build build-asan build-tsan build-valgrind build-tidy build-fuzz build-soak

# docs/dlock.1 is generated from docs/dlock.1.md and committed (building
# needs no pandoc); run this after editing the markdown. MAN_OUT: where to
# write it (the cli.manpage test regenerates it elsewhere to catch drift).
MAN_OUT ?= docs/dlock.1
# The version lives in include/dlock/version.h only.
DLOCK_VERSION := $(shell sed -n 's/^\#define DLOCK_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$$/\2/p' \
  include/dlock/version.h | paste -sd.)
man:
	command -v pandoc >/dev/null || apt-get install -y pandoc
	pandoc -s -f markdown-smart -t man -M title=DLOCK -M section=1 \
	  -M footer="dlock $(DLOCK_VERSION)" -M header="User Commands" \
	  docs/dlock.1.md -o $(MAN_OUT)
