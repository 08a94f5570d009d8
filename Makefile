# sandboxd — one plain Makefile.
#   make            build bin/sandboxd and the guest init
#   make run        install deps, build, build the tiny image, start libvirt, serve on :8080
#   make test       unit tests, fuzz corpus replays, integration tests in real guests
#   make asan       the same build with ASan+UBSan (build-asan/)
#   make fuzz       libFuzzer targets (clang)
#   make format / make lint
#   make install    binaries, guest images, config, systemd unit (PREFIX, DESTDIR)

CC       ?= cc
BUILD    ?= build
BIN      ?= bin
PKGS     := libvirt libmicrohttpd json-c sqlite3 libcrypto
WERROR   := $(if $(CI),-Werror,)
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wformat=2 -Wvla \
	    -Wmissing-prototypes -Wno-unused-parameter $(WERROR) -pthread \
	    $(SANITIZE) -I.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
LDLIBS   += $(PKG_LIBS) -pthread -lm -lresolv

# Library: every module's .c except the program entry and the guest side.
LIB_SRCS := $(wildcard util/*.c) $(wildcard agentless/*.c) $(wildcard network/*.c) \
	    $(wildcard vmm/*.c) $(wildcard store/*.c) $(wildcard billing/*.c) \
	    $(wildcard receipt/*.c) $(wildcard config/*.c) $(wildcard fleet/*.c) $(wildcard sandbox/*.c) \
	    $(filter-out api/main.c,$(wildcard api/*.c))
# The dashboard and /v1/openapi.json (api/http_static.c): web/ and
# docs/openapi.yaml compiled into a generated C file (docs/dashboard.md).
WEB_FILES  := $(wildcard web/*.*) $(wildcard web/vendor/*)
WEB_ASSETS := $(BUILD)/gen/web_assets.c
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/web_assets.o
LIB      := $(BUILD)/libsandboxd.a

# sbx, the command-line client (cli/): libcurl, json-c, and receipt/ for
# the offline receipt check; no daemon code.
CLI_SRCS := $(wildcard cli/*.c)
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_LIBS  = $(shell pkg-config --libs libcurl json-c libcrypto 2>/dev/null) -pthread

GUEST_SRCS := $(wildcard guest/*.c) agentless/wire.c
GUEST_INIT := $(BUILD)/guest/sandboxd-init
# The fuzz target links the guest without init.c (it has main()).
GUEST_FUZZ_SRCS := $(filter-out guest/init.c,$(wildcard guest/*.c))

UNIT_SRCS  := $(wildcard tests/unit/test_*.c)
UNIT_BINS  := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
INTEG_SRCS := $(wildcard tests/integration/test_*.c)
INTEG_BINS := $(INTEG_SRCS:tests/integration/%.c=$(BUILD)/tests/%)
FUZZ_SRCS  := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_REPLAY:= $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/tests/%)
BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

TINY_IMAGE := $(BUILD)/images/tiny
FULL_IMAGE := $(BUILD)/images/full
# make run RUN_IMAGE=tiny serves the busybox image instead.
RUN_IMAGE  ?= full

.PHONY: install uninstall
.PHONY: all deps image image-tiny image-full run test test-unit test-integration asan tsan fuzz format \
	format-check lint bench clean libvirt-up vendor-web unit-bins tsan-build asan-build \
	sanitize-build sanitize-unit tsan-unit tsan-integ test-images
all: $(BIN)/sandboxd $(BIN)/sbx $(GUEST_INIT)

deps:
	./scripts/deps.sh

# ------------------------------------------------------------- install
# FHS paths under PREFIX (/usr/local by default; /usr puts the config in
# /etc). DESTDIR stages the tree (packaging, tests). The guest images come
# from INSTALL_TINY (required) and INSTALL_FULL (installed when its
# base.qcow2 exists; it then becomes the configured image, with the
# versions.json the daemon publishes in GET /v1/runtimes). An existing
# config file is kept. README.md, "Install as a service".
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
SBINDIR     ?= $(PREFIX)/sbin
PKGLIBDIR   ?= $(PREFIX)/lib/sandboxd
SYSCONFDIR  ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR     ?= $(PREFIX)/lib/systemd/system
DOCDIR      ?= $(PREFIX)/share/doc/sandboxd
INSTALL_TINY ?= $(TINY_IMAGE)
INSTALL_FULL ?= $(FULL_IMAGE)
HAVE_FULL    = $(wildcard $(INSTALL_FULL)/base.qcow2)
IMAGEDIR     = $(PKGLIBDIR)/images/$(if $(HAVE_FULL),full,tiny)
SUBST = sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	-e 's|@DOCDIR@|$(DOCDIR)|g' -e 's|@IMAGEDIR@|$(IMAGEDIR)|g' \
	-e 's|@BASE_IMAGE@|$(if $(HAVE_FULL),$(IMAGEDIR)/base.qcow2,)|g'

install: all
	@test -f $(INSTALL_TINY)/vmlinux -a -f $(INSTALL_TINY)/initramfs.cpio.gz || \
		{ echo "install: no guest image in $(INSTALL_TINY) (make image-tiny, or INSTALL_TINY=DIR)"; exit 1; }
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(SYSCONFDIR)/sandboxd $(DESTDIR)$(DOCDIR) $(DESTDIR)$(PKGLIBDIR)/images/tiny
	install -m 0755 $(BIN)/sandboxd $(DESTDIR)$(SBINDIR)/sandboxd
	install -m 0755 $(BIN)/sbx $(DESTDIR)$(BINDIR)/sbx
	install -m 0644 $(INSTALL_TINY)/vmlinux $(INSTALL_TINY)/initramfs.cpio.gz \
		$(DESTDIR)$(PKGLIBDIR)/images/tiny/
	$(if $(HAVE_FULL),install -d $(DESTDIR)$(PKGLIBDIR)/images/full && \
		install -m 0644 $(INSTALL_FULL)/vmlinux $(INSTALL_FULL)/initramfs.cpio.gz \
		$(INSTALL_FULL)/base.sha256 $(DESTDIR)$(PKGLIBDIR)/images/full/ && \
		{ ! test -f $(INSTALL_FULL)/versions.json || install -m 0644 $(INSTALL_FULL)/versions.json \
		  $(DESTDIR)$(PKGLIBDIR)/images/full/; } && \
		install -m 0444 $(INSTALL_FULL)/base.qcow2 $(DESTDIR)$(PKGLIBDIR)/images/full/base.qcow2.new && \
		mv -f $(DESTDIR)$(PKGLIBDIR)/images/full/base.qcow2.new $(DESTDIR)$(PKGLIBDIR)/images/full/base.qcow2,)
	$(SUBST) etc/sandboxd.service.in > $(DESTDIR)$(UNITDIR)/sandboxd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/sandboxd.service
	test -e $(DESTDIR)$(SYSCONFDIR)/sandboxd/config.json || \
		{ $(SUBST) etc/sandboxd.json.in > $(DESTDIR)$(SYSCONFDIR)/sandboxd/config.json && \
		  chmod 0644 $(DESTDIR)$(SYSCONFDIR)/sandboxd/config.json; }
	install -d $(DESTDIR)$(DOCDIR)/docs
	install -m 0644 README.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 docs/*.md docs/openapi.yaml $(DESTDIR)$(DOCDIR)/docs/

uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/sandboxd $(DESTDIR)$(BINDIR)/sbx \
		$(DESTDIR)$(UNITDIR)/sandboxd.service
	rm -rf $(DESTDIR)$(PKGLIBDIR) $(DESTDIR)$(DOCDIR)
	@echo "uninstall: kept $(SYSCONFDIR)/sandboxd/config.json and /var/lib/sandboxd"

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -MMD -MP -c $< -o $@
# The dev-process runner (no guest) reads the runtimes' bootstraps from
# this checkout (sandbox/execution.c; guests have them in the initramfs).
$(BUILD)/obj/sandbox/execution.o: override CFLAGS += -DSBX_REPO_RUNTIMES='"$(CURDIR)/images/runtimes"'

$(WEB_ASSETS): scripts/web-assets.py $(WEB_FILES) docs/openapi.yaml
	@mkdir -p $(dir $@)
	python3 scripts/web-assets.py $@ web docs/openapi.yaml
$(BUILD)/obj/gen/web_assets.o: $(WEB_ASSETS) api/assets.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The node tests' tools (package.json, package-lock.json): Playwright
# (driving Debian's chromium), an OpenAPI 3.1 validator, and the contract
# checks' YAML/JSON Schema validators and generated client. Tests only.
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

# web/vendor/ (committed): xterm.js from node_modules, as pinned in
# package.json; run after changing a pin (docs/dashboard.md).
vendor-web: node_modules/.package-lock.json
	./scripts/vendor-web.sh

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BIN)/sandboxd: $(BUILD)/obj/api/main.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/sbx: $(CLI_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJS) $(LIB) $(CLI_LIBS)

# PID 1 of every guest (guest/, a program of its own): static, libc only.
$(GUEST_INIT): $(GUEST_SRCS) guest/init.h guest/files-priv.h guest/exec-priv.h agentless/wire.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wshadow -Wvla $(WERROR) -I. -static \
		-o $@ $(GUEST_SRCS)

# The tiny image (kernel + busybox initramfs with our init); rebuilt only
# when its inputs change (the script keys its output by their digest).
image-tiny: $(GUEST_INIT)
	./images/build-tiny.sh $(GUEST_INIT) $(TINY_IMAGE)
# The full image (Debian root disk, images/build-full.sh): minutes the first
# time, then cached by the digest of its inputs.
image-full: image-tiny
	./scripts/deps.sh image
	./images/build-full.sh $(TINY_IMAGE) $(FULL_IMAGE)
image: image-full

$(BUILD)/tests/%: tests/unit/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(LIB) $(LDLIBS) -lcmocka
$(BUILD)/tests/test_agentless $(BUILD)/tests/test_agentless_tcp: tests/unit/fake_guest.h
$(BUILD)/tests/test_store $(BUILD)/tests/test_labels $(BUILD)/tests/test_store_usage \
	$(BUILD)/tests/test_store_snapshots $(BUILD)/tests/test_store_previews: tests/unit/store_fx.h
$(BUILD)/tests/%: tests/integration/%.c tests/integration/harness.h tests/integration/relay.h $(LIB) $(BIN)/sandboxd
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(LIB) $(LDLIBS) -lcmocka
# test_dashboard drives the dashboard in chromium (tests/browser/).
$(BUILD)/tests/test_dashboard: node_modules/.package-lock.json
# test_previews opens a preview in chromium (tests/browser/preview.mjs).
$(BUILD)/tests/test_previews: node_modules/.package-lock.json
# test_contract checks docs/openapi.yaml and the README against the daemon
# with node tools (tests/contract/).
$(BUILD)/tests/test_contract: node_modules/.package-lock.json
# test_sdk_typescript runs sdk/typescript's tests (tsc, the MCP client).
$(BUILD)/tests/test_sdk_typescript: node_modules/.package-lock.json
# test_cli runs bin/sbx against the daemon.
$(BUILD)/tests/test_cli: $(BIN)/sbx
# test_netpolicy runs `sbx network` against the daemon.
$(BUILD)/tests/test_netpolicy: $(BIN)/sbx
# test_ports runs `sbx port` against the daemon.
$(BUILD)/tests/test_ports: $(BIN)/sbx
# The guest side is a static program of its own: link its files in, built
# so that it decodes but starts nothing (SBX_GUEST_FUZZ).
$(BUILD)/tests/fuzz_guest: tests/fuzz/fuzz_guest.c tests/fuzz/replay.c $(GUEST_FUZZ_SRCS) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSBX_GUEST_FUZZ -o $@ $< tests/fuzz/replay.c $(GUEST_FUZZ_SRCS) \
		$(LIB) $(LDLIBS)
$(BUILD)/tests/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< tests/fuzz/replay.c $(LIB) $(LDLIBS)
$(BUILD)/bench/%: bench/%.c bench/bench.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

unit-bins: $(UNIT_BINS) $(FUZZ_REPLAY)

test-unit: $(UNIT_BINS) $(FUZZ_REPLAY)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done
	@set -e; for f in $(FUZZ_REPLAY); do n=$${f##*/fuzz_}; \
		echo "== $$f tests/fuzz/corpus/$$n"; $$f tests/fuzz/corpus/$$n; done

test-integration: all image-tiny image-full $(INTEG_BINS) libvirt-up
	@set -e; for t in $(INTEG_BINS); do echo "== $$t"; s=$$(date +%s); \
		SBX_TEST_IMAGE_DIR=$(CURDIR)/$(TINY_IMAGE) \
		SBX_TEST_FULL_IMAGE_DIR=$(CURDIR)/$(FULL_IMAGE) SBX_BIN=$(CURDIR)/$(BIN)/sandboxd $$t; \
		echo "== $$t: passed in $$(( $$(date +%s) - s )) s"; done
	@# (test_hostile's reopen_without_credit_keeps_the_window, in the loop
	@# above, runs over the stream transport whatever SBX_TEST_TRANSPORT says)
	@# the deaf guest once more over the stream transport (docs/vmm.md):
	@# it must cost only its own sandbox, also through libvirtd
	@echo "== $(BUILD)/tests/test_hostile (stream transport, stop_reading)"
	@SBX_TEST_TRANSPORT=stream SBX_TEST_FILTER=stop_reading_fails_the_sandbox \
		SBX_TEST_IMAGE_DIR=$(CURDIR)/$(TINY_IMAGE) SBX_TEST_FULL_IMAGE_DIR=$(CURDIR)/$(FULL_IMAGE) \
		SBX_BIN=$(CURDIR)/$(BIN)/sandboxd $(BUILD)/tests/test_hostile

# The guest images are built (or found cached) while the unit tests run:
# mostly downloads and disk, beside tests that need only CPU.
test: deps
	$(MAKE) all
	$(MAKE) -j2 --output-sync=target test-unit test-images
	$(MAKE) test-integration
test-images: image-tiny image-full

libvirt-up:
	./scripts/libvirt-up.sh

run: deps
	$(MAKE) all image-$(RUN_IMAGE)
	./scripts/libvirt-up.sh
	./scripts/run-dev.sh $(BIN)/sandboxd $(BUILD)/images/$(RUN_IMAGE)

bench: all image-tiny $(BENCH_BINS)

# AddressSanitizer + UBSan: the unit tests and the fuzz corpus replays.
# Any report fails the run (UB too: -fno-sanitize-recover).
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
ASAN_OPTIONS_RUN := halt_on_error=1 detect_leaks=1 abort_on_error=0
asan: asan-build
	ASAN_OPTIONS="$(ASAN_OPTIONS_RUN)" UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1" \
		$(MAKE) BUILD=build-asan BIN=build-asan/bin SANITIZE="$(ASAN_FLAGS)" test-unit

# ThreadSanitizer: the unit tests, then the integration tests that drive
# the daemon's threads hardest (TSAN_INTEG) against a TSan-built daemon.
# Any report fails the run (halt_on_error). docs/lifecycle.md, "Threads".
TSAN_INTEG ?= test_hostile test_exec test_lifecycle test_remote test_pause
TSAN_OPTIONS_RUN := halt_on_error=1 second_deadlock_stack=1 report_mutex_bugs=0 suppressions=$(CURDIR)/tests/tsan.supp
TSAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
tsan: tsan-unit tsan-integ
tsan-unit: tsan-build
	TSAN_OPTIONS="$(TSAN_OPTIONS_RUN)" $(MAKE) BUILD=build-tsan BIN=build-tsan/bin \
		SANITIZE="$(TSAN_FLAGS)" test-unit
tsan-integ: tsan-build
	$(MAKE) image-tiny image-full libvirt-up
	@set -e; for t in $(TSAN_INTEG); do echo "== tsan $$t"; \
		TSAN_OPTIONS="$(TSAN_OPTIONS_RUN)" SBX_TEST_IMAGE_DIR=$(CURDIR)/$(TINY_IMAGE) \
		SBX_TEST_FULL_IMAGE_DIR=$(CURDIR)/$(FULL_IMAGE) SBX_BIN=$(CURDIR)/build-tsan/bin/sandboxd \
		build-tsan/tests/$$t; done

# The sanitizer trees' programs, without running them (tsan-build,
# asan-build), and the sanitizers' unit tests (sanitize-unit, no guest):
# .ci/run runs sanitize-unit at the lowest CPU priority while the
# integration tests run (a guest of one vCPU keeps one of two cores busy;
# the unit tests already pass under TSan's 5-15x slowdown, so a starved
# one only takes longer), then tsan-integ.
tsan-build:
	$(MAKE) BUILD=build-tsan BIN=build-tsan/bin SANITIZE="$(TSAN_FLAGS)" all unit-bins \
		$(TSAN_INTEG:%=build-tsan/tests/%)
asan-build:
	$(MAKE) BUILD=build-asan BIN=build-asan/bin SANITIZE="$(ASAN_FLAGS)" unit-bins
sanitize-build: tsan-build asan-build
sanitize-unit: tsan-unit asan

fuzz:
	./scripts/deps.sh fuzz
	./scripts/fuzz.sh

format:
	clang-format -i $$(git ls-files '*.c' '*.h')
format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

# Layering: lower modules never include higher ones (STYLE.md).
lint:
	./scripts/lint.sh

clean:
	rm -rf $(BUILD) $(BIN) build-asan build-tsan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
