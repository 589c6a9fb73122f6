# proxyfleet: `make demo` and `make test` do everything on a fresh Debian 12 box as root.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
APT_PACKAGES := python3 python3-venv python3-dev gcc pkg-config libvirt-dev \
	libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils ovmf \
	openssh-server openssh-client git debootstrap mtools dosfstools systemd-boot-efi \
	e2fsprogs fdisk dnsmasq-base iproute2 iptables curl prometheus syslinux syslinux-common \
	libxml2-utils systemd etcd-server etcd-client age \
	bind9 bind9-dnsutils zsh
STAMP_APT := .make/apt.stamp
STAMP_VENV := .make/venv.stamp

.PHONY: deps bytecode test test-lab lint unit demo lab-up lab-down bench clean install-check

deps: $(STAMP_APT) $(STAMP_VENV)

$(STAMP_APT):
	@mkdir -p .make
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "Installing Debian packages:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@touch $@

$(STAMP_VENV): pyproject.toml $(STAMP_APT)
	@mkdir -p .make
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[libvirt,test]'
	@touch $@

lint: deps
	$(BIN)/ruff check reconciler tests benchmarks lab
	$(BIN)/ruff format --check reconciler tests benchmarks lab
	$(BIN)/mypy --strict
	$(BIN)/mypy --strict --exclude '^lab/state/' lab
	$(BIN)/mypy --strict benchmarks
	$(BIN)/lint-imports

# The project's own modules compiled, as a pip install compiles them: where
# PYTHONDONTWRITEBYTECODE is set, every proxyfleet process (the tests start hundreds)
# would otherwise compile about 130 modules at start, 0.1-0.25 s each time here.
# lab/ is not recursed into: lab/state holds whole root file systems.
bytecode: deps
	@$(BIN)/python -m compileall -q reconciler benchmarks
	@$(BIN)/python -m compileall -q -l lab

# The unit suite over every core (pytest-xdist; the suite is process-safe): 88 s on 2 cores,
# 146 s in one process (2026-12-06). `make test` runs it in one process beside the labs.
unit: deps
	$(BIN)/pytest -q -m "not integration and not lab" -n auto

# The whole suite: lint, the unit and integration tests (real libvirtd + sshd on
# 127.0.0.1, and the systemd unit under a real systemd as PID 1 of a box whose Debian 12
# root is built on the first run, ~2 min, and cached), then the lab end-to-end tests
# (namespaced hypervisors, real guests booting under TCG; the guest image is built on the
# first run, ~3-4 min, and cached, as is the Debian 13 root of the libvirt 11 lab host,
# 1-6 min). The lab tests run as two pytest runs side by side on lab instances
# $(LAB_INSTANCES), and the rest of the suite as a third run beside them (lab/suite.py says
# why and how they are split); `make unit` and `make test-lab` run parts alone.
LAB_INSTANCES ?= 0,1
LAB_PYTEST := $(BIN)/python -m lab.suite --instances $(LAB_INSTANCES)
LAB_PYTEST_ARGS := -q -p no:cacheprovider --durations=0 --durations-min=30

test: lint bytecode
	$(LAB_PYTEST) --with-non-lab -- $(LAB_PYTEST_ARGS)

# README's quick install as a newcomer (and the pre-commit hook's environment) does it: a
# fresh venv, `pip install .` from the checkout with no C compiler usable (CC=false) and
# no libvirt headers needed; then --version names the commit the wheel was built from and
# validate passes on the example. Needs the package index (tests/test_release.py does the
# same offline with --no-deps).
QUICK_VENV := .make/quick-venv
install-check:
	rm -rf $(QUICK_VENV) && $(PYTHON) -m venv $(QUICK_VENV)
	CC=false CXX=false $(QUICK_VENV)/bin/pip install -q --disable-pip-version-check .
	$(QUICK_VENV)/bin/proxyfleet --version | tee /dev/stderr | grep -Eq '\(commit [0-9a-f]{12}, from build\)'
	$(QUICK_VENV)/bin/proxyfleet validate examples/fleet-repo
	! $(QUICK_VENV)/bin/python -c 'import libvirt' 2>/dev/null

test-lab: bytecode
	$(LAB_PYTEST) -- $(LAB_PYTEST_ARGS)

demo: bytecode
	$(BIN)/python -m lab.demo

lab-up: deps
	$(BIN)/python -m lab up

lab-down: deps
	$(BIN)/python -m lab down

# Benchmarks (docs/performance.md): not part of `make test`. Run beside other labs with
# PROXYFLEET_LAB_INSTANCE=k make bench. kcli, the comparison for creates, lives in a venv
# of its own so that it never touches the project's.
BENCH_VENV := .bench-venv

bench: bytecode $(BENCH_VENV)/bin/kcli
	$(BIN)/python -m benchmarks.run

$(BENCH_VENV)/bin/kcli:
	@command -v genisoimage >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends genisoimage; }
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q --upgrade pip
	$(BENCH_VENV)/bin/pip install -q kcli libvirt-python

clean:
	rm -rf .make $(VENV) .mypy_cache .pytest_cache .ruff_cache
