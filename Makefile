# llmops.serving — the two commands a newcomer needs:
#   make sandbox   deploy the whole stack on the embedded sandbox (no GPU, no Proxmox needed)
#   make test      every test tier: lint, sanity, unit, package, molecule, ansible-core, integration
# Both install what they need first (apt packages, .venv, the Docker engine, the base image).
# make docs builds the docs site (.build/docs/html), make release the changelog and the tarball.

SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= $(CURDIR)/.venv
export VENV
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: help setup venv docker-engine base-image test lint sanity unit ansible-core molecule integration bench test-slow \
        sandbox sandbox-down build install-collection changelog docs ee release package lock clean

help: ## Show the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

setup: ## Install host packages and the project virtualenv (idempotent)
	@scripts/host-packages.sh
	@scripts/venv.sh

venv:
	@scripts/venv.sh

docker-engine: setup ## Start the Docker engine when none runs
	@scripts/docker-engine.sh

base-image: docker-engine ## Build the systemd base image for molecule (debootstrap + docker import)
	@scripts/base-image.sh

# setup installs promtool (host packages): here the tests that need it fail instead of skipping when it is missing.
test: setup ## Run every test tier, in order, with a summary line per tier
	@LLMOPS_REQUIRE_PROMTOOL=1 scripts/test.sh

lint: venv ## ansible-lint (production profile) and yamllint
	@scripts/test.sh lint

sanity: venv ## ansible-test sanity on a temporary ansible_collections tree
	@scripts/test.sh sanity

unit: venv ## pytest for plugins/ and the simulators
	@scripts/test.sh unit

ansible-core: venv ## Sanity and unit tiers on the newer ansible-core releases (requirements/ansible-core/)
	@scripts/test.sh ansible-core

molecule: base-image ## Every molecule scenario (docker driver)
	@scripts/test.sh molecule

integration: base-image ## The sandbox integration tests
	@scripts/test.sh integration

package: venv ## The docs site, the execution environment's build context and a release in a copy of the checkout
	@scripts/test.sh package

test-slow: venv ## The slow tier: the real pinned SGLang (with torch) checks the rendered flags (~11 GB, minutes)
	@scripts/slow-tests.sh

bench: venv ## Benchmarks that print figures (tests/bench)
	@scripts/bench.sh

# Containers in the sandbox: the example's llm-qwen-a and -b, then -c, ... (make sandbox SANDBOX_CONTAINERS=4).
SANDBOX_CONTAINERS ?= 2
# A model across M more containers (multi-node tensor parallelism): make sandbox SANDBOX_MODEL_NODES=2.
SANDBOX_MODEL_NODES ?= 0

sandbox: setup ## Deploy on the embedded sandbox and print the verification summary
	@SANDBOX_CONTAINERS=$(SANDBOX_CONTAINERS) SANDBOX_MODEL_NODES=$(SANDBOX_MODEL_NODES) scripts/sandbox.sh up

sandbox-down: ## Remove everything `make sandbox` created, and nothing else
	@scripts/sandbox.sh down

build: venv ## Build the collection tarball (ansible-galaxy collection build)
	@mkdir -p .build/dist && ansible-galaxy collection build --force --output-path .build/dist .

install-collection: build ## Install the built tarball into ~/.ansible/collections
	@ansible-galaxy collection install --force .build/dist/llmops-serving-$$(awk '/^version:/{print $$2}' galaxy.yml).tar.gz

changelog: venv ## Release the changelog fragments (antsibull-changelog)
	@antsibull-changelog release

docs: venv ## The docs site with antsibull-docs and Sphinx, into .build/docs/html
	@scripts/docs.sh

ee: venv ## The execution environment's build context (ansible-builder create) in .build/ee/context
	@scripts/ee.sh

release: venv ## Release the version in galaxy.yml: CHANGELOG.rst from the fragments, the tarball, its contents checked
	@scripts/release.sh

lock: venv ## Re-pin requirements/constraints.txt from the current virtualenv
	@{ sed -n '1,2p' requirements/constraints.txt; $(VENV)/bin/pip freeze --disable-pip-version-check | grep -v '^pip=='; } > requirements/constraints.txt.new
	@mv requirements/constraints.txt.new requirements/constraints.txt

clean: ## Remove build outputs (keeps .venv and images)
	rm -rf .build tests/output
