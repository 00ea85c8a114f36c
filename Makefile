# homelab.edge: one command to demo, one to test. Both set up what they need
# (Docker engine, venv, Go binaries, lab images), cached under $(CACHE).
CACHE ?= /var/cache/homelab-edge
export HOMELAB_EDGE_CACHE := $(CACHE)

.PHONY: setup demo test unit lint sanity molecule bench clean-lab build docs publish ee

setup:            ## engine + venv + confd/Traefik + lab images
	lab/lab.sh setup

demo: setup       ## the main job on the local lab: failure before, site.yml, proof after
	demo/demo.sh

test:             ## the whole test suite (sets the lab up itself: unit, lint, sanity, every Molecule scenario)
	tests/run.sh all

# the unit tests need no lab (no Docker, Go or root): a plain venv with the pinned ansible-core and pytest
UNIT_VENV ?= $(HOME)/.cache/homelab-edge/venv-unit
unit:             ## tests/unit on a plain Python venv (made once, in ~/.cache/homelab-edge)
	@test -x $(UNIT_VENV)/bin/pytest || { python3 -m venv $(UNIT_VENV) && $(UNIT_VENV)/bin/pip install -q \
	  $$(grep -E '^(ansible-core|pytest)==' requirements-test.txt | cut -d' ' -f1); }
	$(UNIT_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/unit

lint sanity molecule: setup
	tests/run.sh $@

bench: setup      ## benchmarks (results in benchmarks/results/)
	tests/run.sh bench

build: setup      ## collection tarball
	tests/run.sh build

docs: setup       ## the docs site, offline (docs/build/build/html/index.html)
	tests/run.sh docs

publish: setup    ## what Galaxy, Automation Hub and AWX check: importer (both settings), tarball contents, ansible-builder, changelog
	tests/run.sh publish

ee: setup         ## the execution environment's build context (ee/context), with this checkout's tarball as ee/homelab-edge.tar.gz
	tests/run.sh ee
