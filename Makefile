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

unit lint sanity molecule: setup
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
