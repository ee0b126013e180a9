# Autonomic. `make demo` and `make test` each do all set-up on a fresh
# Debian/Ubuntu host (as root, or with sudo); both are idempotent.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go

.PHONY: all build provision install test test-hosts demo bench fmt vet clean

all: build

provision:
	scripts/provision_host.sh

build: provision
	scripts/build_launcher.sh bin/autonomic-launcher
	$(GO) build -o bin/autonomic ./kernel/cmd/autonomic
	$(GO) build -o bin/autonomic-rootfs ./rootfs-builder/cmd/autonomic-rootfs

install: build
	scripts/install.sh

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# Every test, privileged ones included (they need root; under
# AUTONOMIC_REQUIRE_PRIVILEGED=1 a skip is a failure), then the host matrix
# alone (its guest takes both cores; it writes artifacts/hosts.json), then
# the gates and the conformance report, which reads it. TestRealRepositories
# (minutes of real agents on four repositories) runs once, in its gate
# real_repositories, not also in the package pass.
test: install fmt vet
	$(GO) test -count=1 -timeout 40m -skip '^TestRealRepositories$$' $$($(GO) list ./... | grep -v -e '/gates$$' -e '/hosts$$')
	$(MAKE) test-hosts
	scripts/qc --handoff

# The host matrix alone (hosts/): Debian guests under QEMU run the product
# (it is also part of `make test`). Writes artifacts/hosts.json.
test-hosts: provision
	$(GO) test -count=1 -timeout 40m -v -run '^TestHostMatrix$$' ./hosts/

demo: install
	scripts/demo.sh

bench: install
	scripts/bench

clean:
	rm -rf bin artifacts
