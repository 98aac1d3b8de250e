# Thin wrapper: install deps, configure, build, demo, test.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)

.PHONY: all deps configure build test demo clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The test venv must exist before configuring: CMake picks the Python that
# the PyTorch/transformers checks run with.
# Every test, then a short bounded libFuzzer run of each fuzz target (the
# seed corpora are also replayed by ctest, label `fuzz`).
FUZZ_TEST_SECONDS ?= 10
test: deps
	@scripts/setup-test-venv.sh
	@$(MAKE) --no-print-directory build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)
	@FUZZ_SECONDS=$(FUZZ_TEST_SECONDS) scripts/run-fuzzers.sh

demo: build
	@scripts/demo.sh $(BUILD_DIR)/bin

# Bounded libFuzzer runs of the fuzz targets (clang build in build-fuzz/),
# FUZZ_SECONDS each; fails if any target finds a crash.
FUZZ_SECONDS ?= 30
.PHONY: fuzz
fuzz: deps
	@FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/run-fuzzers.sh

# Every test under ASan + UBSan (build-asan/), then under TSan
# (build-tsan/; all but the two that read protobuf Struct maps, see the
# script): scripts/run-sanitized-tests.sh.
# Not part of `make test`: two more full builds, about an hour on 2 cores.
.PHONY: sanitize
sanitize: deps
	@scripts/setup-test-venv.sh
	@scripts/run-sanitized-tests.sh address
	@scripts/run-sanitized-tests.sh thread

clean:
	rm -rf $(BUILD_DIR)
