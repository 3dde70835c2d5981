# Metronome: one entry point.
#   make            libmetronome.a and the programs into bin/
#   make test       build and run the whole suite under prove (TAP)
#   make asan       the whole suite again under AddressSanitizer + UBSan
#   make fuzz       libFuzzer harnesses (clang), FUZZ_SECONDS each
#   make bench      benchmarks, printing ratios measured in one run
#   make demo       the main job on the embedded default model
#   make install    programs, man pages and models/fortune-byte under
#                   $(DESTDIR)$(PREFIX) (the model in $(PREFIX)/share/metronome)
#
# Conventions (so a new module needs no Makefile edit):
#   src/cmd/mt-*.c           one program each, into $(BIN)/
#   src/STAGE/*.c            the library libmetronome.a (util, model, wire,
#                            gpu, decode, codec, speech, serve, client,
#                            admit, probe; tools/layering.sh has the stages)
#   src/decode/backend_cuda*.c, src/*/*_cuda.c, kernels/*.cu
#                            only when nvcc is found (MT_HAVE_CUDA),
#                            into $(B)/libmetronome_cuda.so, loaded with
#                            dlopen when CUDA is asked for (cuda_module.h)
#   tests/unit/test_*.c      one TAP executable each, linked with the library
#   tests/helpers/*.c        test helper programs, into $(B)/tests/
#   tests/integration/*.sh   TAP shell scripts, run with MT_BIN=$(BIN)
#   tests/fuzz/fuzz_*.c      harnesses; corpus in tests/fuzz/corpus/NAME/

SHELL   := /bin/bash
PREFIX  ?= /usr/local
DESTDIR ?=
B       ?= build
BIN     ?= bin
SAN     ?=

CC      ?= gcc
ifeq ($(origin CC),default)
CC      := gcc
endif
OPT     ?= -O2 -g
WARN    := -Wall -Wextra -Werror -Wno-unused-parameter -Wno-psabi
# Shipped data (models/fortune-byte) is installed under DATADIR; the model
# loader looks there for a bare -m NAME.
DATADIR ?= $(PREFIX)/share/metronome
CFLAGS  += -std=gnu11 $(OPT) $(WARN) -pthread -Isrc -MMD -MP -DMT_DATADIR='"$(DATADIR)"'
ifneq ($(SAN),)
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif

PKGS    := sndfile samplerate portaudio-2.0 jansson openblas opus ogg nettle msgpack
# On a fresh machine the libraries are not there yet when this file is read,
# and the flags below are computed now: install them before any rule runs
# (the `deps` target alone would come too late, or race the compiles under -j).
ifeq ($(filter clean deps,$(MAKECMDGOALS)),)
ifneq ($(shell pkg-config --exists $(PKGS) 2>/dev/null && echo ok),ok)
DEPS_RC := $(shell sh tools/deps.sh >&2; echo $$?)
ifneq ($(DEPS_RC),0)
$(error deps: the packages above are needed before anything can be built)
endif
endif
endif
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS  += $(PKG_CFLAGS)
LDLIBS  += $(PKG_LIBS) -lm -lpthread

# ---- CUDA: auto-detected --------------------------------------------------
ifeq ($(origin NVCC),undefined)
NVCC := $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
endif
# The toolkit root comes from nvcc itself (its -dryrun "TOP="), because the
# nvcc found on PATH may be a wrapper script (/usr/local/bin/nvcc exec'ing
# /usr/local/cuda-13.0/bin/nvcc) whose own directory holds no headers.
ifneq ($(NVCC),)
ifeq ($(origin CUDA_HOME),undefined)
CUDA_HOME  := $(shell $(NVCC) -dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^\#\$$ TOP=//p' | head -n1 | xargs -r realpath 2>/dev/null)
endif
ifneq ($(wildcard $(CUDA_HOME)/include/cublas_v2.h),)
HAVE_CUDA  := 1
else
$(info note: nvcc is $(NVCC) but cublas_v2.h is not under '$(CUDA_HOME)/include' (set CUDA_HOME=...))
endif
endif
ifneq ($(HAVE_CUDA),)
CFLAGS     += -DMT_HAVE_CUDA=1 -I$(CUDA_HOME)/include
# sm_80 and sm_90 machine code, and compute_90 PTX that the driver compiles
# for GPUs newer than sm_90 (without it the binary runs on none of them).
CUDA_ARCH  ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
              -gencode arch=compute_90,code=compute_90
NVCCFLAGS  ?= -O3 -std=c++17 $(CUDA_ARCH) -Isrc -Xcompiler -Wall,-Wextra,-Wno-unused-parameter -Werror all-warnings
# The CUDA backend (host side and kernels) is a shared object of its own,
# loaded with dlopen only when CUDA is asked for or probed
# (src/gpu/cuda_loader.c): linked into the programs, cuBLAS and the
# runtime cost ~150 MB of RSS at start on every device, sim and cpu too.
# The object calls back into the program's library, hence -rdynamic.
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
CUDA_SO    := $(B)/libmetronome_cuda.so
LDFLAGS    += -rdynamic
LDLIBS     += -ldl
CU_SRCS    := $(wildcard kernels/*.cu)
else
HAVE_CUDA  :=
CU_SRCS    :=
CUDA_SO    :=
endif

PROG_SRCS := $(wildcard src/cmd/mt-*.c)
CUDA_C    := $(sort $(wildcard src/decode/backend_cuda*.c src/*/*_cuda.c))
LIB_SRCS  := $(filter-out $(PROG_SRCS) $(CUDA_C) src/cmd/%,$(wildcard src/*/*.c))
CMD_SRCS  := $(filter-out $(PROG_SRCS),$(wildcard src/cmd/*.c))
LIB_OBJS  := $(LIB_SRCS:src/%.c=$(B)/src/%.o)
# position-independent, for $(CUDA_SO)
CUDA_OBJS := $(CUDA_C:src/%.c=$(B)/cuda/src/%.o) $(CU_SRCS:kernels/%.cu=$(B)/cuda/kernels/%.o)
LIB       := $(B)/libmetronome.a
PROGS     := $(PROG_SRCS:src/cmd/%.c=$(BIN)/%)
CMD_OBJS  := $(CMD_SRCS:src/%.c=$(B)/src/%.o)

UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(B)/tests/%)
HELP_SRCS := $(wildcard tests/helpers/*.c)
HELP_BINS := $(HELP_SRCS:tests/helpers/%.c=$(B)/tests/%)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_REPLAY := $(FUZZ_SRCS:tests/fuzz/%.c=$(B)/tests/replay_%)
INTEG     := $(sort $(filter-out %lib.sh,$(wildcard tests/integration/*.sh)))
# Integration tests that mostly wait (simulated devices that sleep, real-time
# clients at 12.5 frames a second, timeouts) carry a "# lane: light" line;
# make test runs them PROVE_JOBS at a time after the others, which run one
# at a time because they load the cores or measure the machine's own speed.
# ("# lane: light, long": minutes long, started first so that the short
# ones fill the other slots around them rather than trail after them)
INTEG_LONG  := $(sort $(shell grep -l '^\# lane: light, long' $(INTEG) /dev/null))
INTEG_LIGHT := $(INTEG_LONG) $(filter-out $(INTEG_LONG),$(sort $(shell grep -l '^\# lane: light' $(INTEG) /dev/null)))
INTEG_SERIAL := $(filter-out $(INTEG_LIGHT),$(INTEG))
# run a second time over TCP by `make test` (lib.sh: MT_TRANSPORT)
TCP_INTEG := tests/integration/serve_concurrent.sh tests/integration/replay_serve.sh

.PHONY: all deps test unit asan fuzz bench demo install clean check-cuda-line
.DEFAULT_GOAL := all
# Keep intermediate objects of tests and helpers (no rebuild every run).
.SECONDARY:

all: deps $(LIB) $(PROGS) $(CUDA_SO) check-cuda-line

deps:
	@sh tools/deps.sh

check-cuda-line:
ifeq ($(HAVE_CUDA),)
	@echo "note: no CUDA toolkit (nvcc and cuBLAS headers) found: CUDA backend skipped (CPU backend only)"
endif

$(B)/src/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/cuda/kernels/%.o: kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fPIC -c $< -o $@

$(B)/cuda/src/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -c $< -o $@

# The object's undefined mt_* symbols come from the program: each must be
# on cuda_entry.c's list, which keeps them in a static link.
$(CUDA_SO): $(CUDA_OBJS) src/decode/cuda_entry.c
	$(CC) -shared $(LDFLAGS) -Wl,-soname,$(notdir $@) $(CUDA_OBJS) $(CUDA_LDLIBS) -o $@.tmp
	@missing=$$(nm -D --undefined-only $@.tmp | awk '$$2 ~ /^mt_/ { print $$2 }' | \
	  while read -r s; do grep -q "(void \*)$$s,\$$" src/decode/cuda_entry.c || echo "$$s"; done); \
	if [ -n "$$missing" ]; then \
	  echo "$@: calls" $$missing "from the program: add to mt_cuda_module_imports (src/decode/cuda_entry.c)" >&2; \
	  rm -f $@.tmp; exit 1; fi
	@mv $@.tmp $@
$(B)/src/gpu/cuda_loader.o: CFLAGS += -DMT_CUDA_MODULE_BUILD='"$(abspath $(CUDA_SO))"'

# model.o has DATADIR compiled in: rebuild it when DATADIR changes.
DATADIR_STAMP := $(B)/.datadir
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(shell mkdir -p $(B) && { [ "$$(cat $(DATADIR_STAMP) 2>/dev/null)" = '$(DATADIR)' ] || echo '$(DATADIR)' > $(DATADIR_STAMP); })
endif
$(B)/src/model/model.o: $(DATADIR_STAMP)

# Every object's MT_HAVE_CUDA follows whether nvcc was found: rebuild them all
# when that changes (a `make NVCC=` build after a CUDA one, or the reverse),
# so no stale cuda_loader.o or decoder.o is linked with the other choice.
CUDA_STAMP := $(B)/.have-cuda
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(shell mkdir -p $(B) && { [ "$$(cat $(CUDA_STAMP) 2>/dev/null)" = 'cuda=$(HAVE_CUDA)' ] || echo 'cuda=$(HAVE_CUDA)' > $(CUDA_STAMP); })
endif
$(LIB_OBJS) $(CMD_OBJS) $(PROG_SRCS:src/%.c=$(B)/src/%.o): $(CUDA_STAMP)
$(UNIT_SRCS:tests/unit/%.c=$(B)/tests/%.o) $(HELP_SRCS:tests/helpers/%.c=$(B)/tests/helpers/%.o): $(CUDA_STAMP)

$(LIB): $(LIB_OBJS)
	@mkdir -p $(@D)
	@rm -f $@
	ar rcs $@ $^

$(BIN)/%: $(B)/src/cmd/%.o $(CMD_OBJS) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $< $(CMD_OBJS) $(LIB) $(LDLIBS) -o $@

$(B)/tests/%.o: tests/unit/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -c $< -o $@

$(B)/tests/%: $(B)/tests/%.o $(LIB)
	$(CC) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(B)/tests/helpers/%.o: tests/helpers/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -c $< -o $@

# Helpers link the src/cmd objects that are not mains (mt-quality runs
# `mt-probe quality`'s command line, src/cmd/quality_cmd.c).
$(B)/tests/%: $(B)/tests/helpers/%.o $(CMD_OBJS) $(LIB)
	$(CC) $(LDFLAGS) $< $(CMD_OBJS) $(LIB) $(LDLIBS) -o $@

# Seed-corpus replay of each fuzz harness, built with the normal compiler.
$(B)/tests/fuzz/%.o: tests/fuzz/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -c $< -o $@

$(B)/tests/replay_%: $(B)/tests/fuzz/%.o $(B)/tests/fuzz/replay_main.o $(LIB)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(B)/tests/fuzz/replay_main.o: tests/fuzz/replay_main.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -c $< -o $@

TEST_BINS := $(UNIT_BINS) $(HELP_BINS) $(FUZZ_REPLAY)

# The unit tests and the integration tests that load the cores run one at a
# time; the light ones (INTEG_LIGHT) PROVE_JOBS at a time: six, so that
# the three long ones (man_examples, admit_closedloop, examples_run) leave
# three slots to the thirty short ones. Several tests
# measure real-time behaviour against the host's own hiccups measured in
# the same run, so a busy machine slows them without failing them.
# Each test's whole output is kept in $(B)/test-logs (tests/run-one), and
# prove names the failed checks (--failures).
PROVE_FLAGS ?= --timer --failures
PROVE_JOBS ?= 6
TEST_LOGS = $(abspath $(B))/test-logs
TEST_ENV = MT_BIN=$(abspath $(BIN)) MT_TESTBIN=$(abspath $(B)/tests) MT_ROOT=$(CURDIR) MT_ASAN=$(SAN) MT_TEST_LOGS=$(TEST_LOGS)
test: all $(TEST_BINS)
	@rm -rf $(TEST_LOGS)
	@echo "# each test's output: $(TEST_LOGS)"
	@$(TEST_ENV) prove --exec $(CURDIR)/tests/run-one $(PROVE_FLAGS) $(UNIT_BINS) $(FUZZ_REPLAY) $(INTEG_SERIAL)
	@echo "# the light integration tests, $(PROVE_JOBS) at a time"
	@$(TEST_ENV) prove --exec $(CURDIR)/tests/run-one $(PROVE_FLAGS) -j $(PROVE_JOBS) $(INTEG_LIGHT)
	@echo "# the serve/replay tests again, over TCP (MT_TRANSPORT=tcp)"
	@MT_TRANSPORT=tcp $(TEST_ENV) MT_TEST_LOGS=$(TEST_LOGS)/tcp prove --exec $(CURDIR)/tests/run-one $(PROVE_FLAGS) $(TCP_INTEG)

unit: all $(TEST_BINS)
	@$(TEST_ENV) prove --exec $(CURDIR)/tests/run-one $(PROVE_FLAGS) $(UNIT_BINS) $(FUZZ_REPLAY)

# The whole suite, sanitized, in its own build tree.
asan: deps
	$(MAKE) B=build-asan BIN=build-asan/bin SAN=1 OPT="-O1 -g" MT_ASAN=1 PROVE_JOBS=2 test

# ---- fuzzing (clang + libFuzzer) -----------------------------------------
# The library is built once with clang into its own archive; each harness
# links against it, so only the code a harness reaches is pulled in.
FUZZ_SECONDS ?= 60
FUZZ_SAN    := -fsanitize=address,undefined
FUZZ_CFLAGS := -std=gnu11 -O1 -g -Isrc -Itests -pthread -DMT_FUZZ_BUILD -MMD -MP $(PKG_CFLAGS)
FUZZ_OBJS   := $(patsubst src/%.c,build-fuzz/obj/%.o,$(filter-out $(CUDA_C),$(LIB_SRCS)))
FUZZ_BINS   := $(FUZZ_SRCS:tests/fuzz/%.c=build-fuzz/%)
FUZZ_LDLIBS := $(filter-out -L% -Wl% -lcu% -lstdc++,$(LDLIBS))

build-fuzz/obj/%.o: src/%.c
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -c $< -o $@

build-fuzz/libfuzz.a: $(FUZZ_OBJS)
	@rm -f $@
	ar rcs $@ $^

build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c build-fuzz/libfuzz.a
	clang $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer $< build-fuzz/libfuzz.a $(FUZZ_LDLIBS) -o $@

fuzz: deps $(FUZZ_BINS)
	@mkdir -p tests/fuzz/artifacts
	@set -e -o pipefail; for f in $(FUZZ_BINS); do n=$$(basename $$f); \
	  mkdir -p build-fuzz/corpus-$$n; \
	  echo "== $$n for $(FUZZ_SECONDS)s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=tests/fuzz/artifacts/ \
	     build-fuzz/corpus-$$n tests/fuzz/corpus/$${n#fuzz_} 2>&1 | grep -E '^(#[0-9]+ +DONE|Done|==|SUMMARY)' ; \
	done

# ---- benchmarks, demo -----------------------------------------------------
bench: all $(TEST_BINS)
	@MT_BIN=$(abspath $(BIN)) MT_TESTBIN=$(abspath $(B)/tests) MT_ROOT=$(CURDIR) MT_ASAN=$(SAN) \
	  bash bench/run.sh

demo: all
	@MT_BIN=$(abspath $(BIN)) MT_ROOT=$(CURDIR) bash examples/demo.sh

# ---- install --------------------------------------------------------------
# issue 22: simulated-device profiles (--device sim:NAME) are found in the
# source tree's profiles/ and, installed, in $(PREFIX)/share/metronome/profiles.
PROFILES := $(wildcard profiles/*.profile)
$(B)/src/decode/sim_profile.o: CFLAGS += -DMT_SOURCE_DIR='"$(CURDIR)"'
$(B)/src/decode/sim_profile.o: $(DATADIR_STAMP)
MAN1 := $(wildcard man/*.1)
MAN5 := $(wildcard man/*.5)
MAN7 := $(wildcard man/*.7)
install: all
	$(if $(CUDA_SO),install -d $(DESTDIR)$(PREFIX)/lib/metronome)
	$(if $(CUDA_SO),install -m 0755 $(CUDA_SO) $(DESTDIR)$(PREFIX)/lib/metronome/)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 0755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	$(if $(MAN1),install -m 0644 $(MAN1) $(DESTDIR)$(PREFIX)/share/man/man1/)
	$(if $(MAN5),install -m 0644 $(MAN5) $(DESTDIR)$(PREFIX)/share/man/man5/)
	$(if $(MAN7),install -m 0644 $(MAN7) $(DESTDIR)$(PREFIX)/share/man/man7/)
	install -d $(DESTDIR)$(DATADIR)/models/fortune-byte
	install -m 0644 $(wildcard models/fortune-byte/*) $(DESTDIR)$(DATADIR)/models/fortune-byte/
	install -d $(DESTDIR)$(DATADIR)/profiles
	$(if $(PROFILES),install -m 0644 $(PROFILES) $(DESTDIR)$(DATADIR)/profiles/)

clean:
	rm -rf build build-asan build-fuzz bin

-include $(LIB_OBJS:.o=.d) $(CUDA_OBJS:.o=.d) $(PROG_SRCS:src/%.c=$(B)/src/%.d) $(CMD_OBJS:.o=.d) \
  $(wildcard $(B)/tests/*.d $(B)/tests/helpers/*.d $(B)/tests/fuzz/*.d)
# the fuzz build's objects follow their headers too (a changed struct, no stale object)
-include $(wildcard build-fuzz/obj/*/*.d build-fuzz/*.d)

# ---- issue 9: quality
# The quality-under-the-bound table and plot (bench/quality.sh: minutes, so
# not one of bench/run.sh's bench_*.sh); writes bench/RESULTS.md's
# "Quality under the bound" block and bench/quality-ppl.png.
.PHONY: bench-quality
bench-quality: all $(TEST_BINS)
	@MT_BIN=$(abspath $(BIN)) MT_TESTBIN=$(abspath $(B)/tests) MT_ROOT=$(CURDIR) \
	  OUT=$(abspath $(B))/bench-quality bash bench/quality.sh

# ---- issue 4: CUDA: parity tests and benchmark on a GPU --------------------
#   make test-gpu    CUDA vs CPU parity (tests/unit/test_cuda.c); a missing
#                    GPU fails here instead of skipping (MT_REQUIRE_GPU=1)
#   make bench-gpu   step time vs B, fractions of the bandwidth bound and of
#                    the bf16 tensor peak measured in the same run
#                    (tests/helpers/mt-benchgpu.c; BENCH_GPU_ARGS to change)
# Both run their programs directly (no prove): the GPU machine may lack Perl's
# test harness. tests/gpu/run-device.sh wraps them for a lent GPU machine.
.PHONY: test-gpu bench-gpu
ifneq ($(HAVE_CUDA),)
# nvcc writes no dependency files here: the headers the kernels include
$(CU_SRCS:kernels/%.cu=$(B)/cuda/kernels/%.o): kernels/mt_kernels.h kernels/block_reduce.cuh src/decode/kv.h
$(B)/cuda/src/decode/backend_cuda.o: kernels/mt_kernels.h
$(B)/cuda/src/codec/mimi_cuda.o $(B)/cuda/kernels/mimi.o: kernels/mimi_kernels.h
$(B)/cuda/src/decode/depformer_cuda.o $(B)/cuda/kernels/depformer.o: kernels/depformer_kernels.h
# Programs and tests load $(CUDA_SO) at run time: build it with them.
$(PROGS) $(UNIT_BINS) $(HELP_BINS): | $(CUDA_SO)
# mt-benchgpu calls the kernels and the runtime itself: linked to the object.
$(B)/tests/mt-benchgpu: $(B)/tests/helpers/mt-benchgpu.o $(CMD_OBJS) $(LIB) $(CUDA_SO)
	$(CC) $(LDFLAGS) $< $(CMD_OBJS) $(LIB) $(CUDA_SO) -Wl,-rpath,$(abspath $(B)) $(LDLIBS) $(CUDA_LDLIBS) -o $@
test-gpu: $(LIB) $(B)/tests/test_cuda
	MT_REQUIRE_GPU=1 $(B)/tests/test_cuda
bench-gpu: $(LIB) $(B)/tests/mt-benchgpu
	$(B)/tests/mt-benchgpu $(BENCH_GPU_ARGS)
else
test-gpu bench-gpu:
	@echo "$@: nvcc was not found at build time: no CUDA backend to test" >&2; exit 1
endif
