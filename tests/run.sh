#!/usr/bin/env bash
# The test suite. `tests/run.sh all` (what `make test` runs) = versions (of the lab's binaries and images), unit, mutations, traefik live (the real Traefik on the module's edits), lint,
# rules (promtool), sanity, build, publish (Galaxy's importer, ansible-builder, the changelog,
# the oldest target Python), compat (the oldest and newest ansible-core) and
# every Molecule scenario. Each step's result is counted;
# the last line says "N passed, N failed" and the exit code is non-zero when
# anything failed or nothing ran.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export HOMELAB_EDGE_CACHE=${HOMELAB_EDGE_CACHE:-/var/cache/homelab-edge}
eval "$(lab/lab.sh env)"   # tools, venv, and this checkout as the collection homelab.edge
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0 ANSIBLE_NOCOLOR=1
export MOLECULE_GLOB="molecule/*/molecule.yml"
# load tests hold thousands of sockets; a CI shell often starts at a soft limit of 1024
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
mkdir -p tests/output

passed=0 failed=0 failures=()
step() { # name, command...
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name"
  if "$@"; then
    passed=$((passed + 1)); echo "=== $name: passed ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1)); failures+=("$name"); echo "=== $name: FAILED ($((SECONDS - t0)) s)"
  fi
}

versions() {
  # every lab binary reports the version the lab pins; every lab image names the versions inside it;
  # and the check itself (what it takes and refuses, whatever the binary writes after its version)
  python -m pytest -q -p no:cacheprovider tests/lab/test_lab_versions.py && lab/lab.sh versions
}

fresh_host() {
  # status on a VPS not yet set up (this machine, read in check mode): each line says what is missing
  python -m pytest -q -p no:cacheprovider tests/lab/test_status_fresh_host.py
}

traefik_live() {
  # the real Traefik (v3 and v2, the lab's images) starts on what traefik_inflight writes into
  # guide configs of each kind (YAML, TOML, flags), its API shows the limit, its health check finds ping
  python -m pytest -q -p no:cacheprovider tests/lab/test_traefik_live.py
}

unit() {
  # tests/unit (shipped: `build` runs it from the tarball too) and tests/dev (the demo's checks, the
  # test helpers, Molecule's files: only the checkout has them);
  # exit code 5 (no tests collected) is a failure here, as any other non-zero
  python -m pytest -q -p no:cacheprovider tests/unit tests/dev
}

mutations() {
  # plausible bugs, each applied to a copy: the test that must catch it fails
  python tests/mutations.py
}

lint() {
  ansible-lint --offline --profile production
}

rules() {
  # the roles' Prometheus rules as the roles write them (their defaults), checked and unit-tested
  # (tests/prometheus/*.test.yml: every alert firing on its fault, quiet beside it) by Debian's
  # promtool (the lab image homelab-edge/monitor)
  local tmp; tmp=$(mktemp -d)
  python tests/support/prometheus_rules.py "$tmp" >/dev/null && cp tests/prometheus/*.test.yml "$tmp"/ &&
    docker run --rm -v "$tmp:/r:ro" -w /r homelab-edge/monitor:lab \
      sh -c 'promtool check rules *.rules.yml && promtool test rules *.test.yml'
  local rc=$?
  rm -rf "$tmp"
  return $rc
}

sanity() {
  # ansible-test sanity on the extracted tarball, as Galaxy and Automation Hub run it: what ships is
  # tested, the ignore file may name only shipped files (its `ignores` test fails on any other), and
  # the tarball's own tree is no git repository (ansible-test then reads every file under it)
  local tmp tb rc; tmp=$(mktemp -d)
  tb=$(tarball "$tmp") && mkdir -p "$tmp/ansible_collections/homelab/edge" &&
    tar -C "$tmp/ansible_collections/homelab/edge" -xzf "$tb" || { rm -rf "$tmp"; return 1; }
  # --local: the venv holds the sanity tools (requirements-test.txt)
  (cd "$tmp/ansible_collections/homelab/edge" &&
     ansible-test sanity --local --python 3.11 >"$ROOT/tests/output/sanity.log" 2>&1)
  rc=$?
  grep -E '^(ERROR|FATAL)' "$ROOT/tests/output/sanity.log" | head -n 60
  rm -rf "$tmp"
  return $rc
}

build() {
  local out rc=0 f m; out=$(mktemp -d)
  ansible-galaxy collection build --force --output-path "$out" >/dev/null || rc=1
  tar -tzf "$out"/homelab-edge-*.tar.gz >"$out/files.txt" || rc=1
  # what an execution environment needs travels in the tarball
  for f in meta/execution-environment.yml meta/ee-requirements.txt meta/ee-bindep.txt meta/runtime.yml LICENSE; do
    grep -qx "$f" "$out/files.txt" || { echo "the tarball lacks $f"; rc=1; }
  done
  ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-galaxy collection install --offline --no-deps \
    -p "$out/installed" "$out"/homelab-edge-*.tar.gz >/dev/null || rc=1
  ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-doc -l homelab.edge | tee "$out/doc.txt"
  # every module and filter of the tree is listed, and its whole doc renders (the YAML of each part parses)
  for m in plugins/modules/*.py; do
    m=$(basename "$m" .py)
    grep -q "^homelab.edge.$m " "$out/doc.txt" || { echo "ansible-doc does not list homelab.edge.$m"; rc=1; }
    ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-doc "homelab.edge.$m" >/dev/null || rc=1
  done
  ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-doc -t filter -l homelab.edge | tee "$out/filters.txt"
  for f in plugins/filter/*.yml; do
    f=$(basename "$f" .yml)
    grep -q "^homelab.edge.$f " "$out/filters.txt" || { echo "ansible-doc does not list filter homelab.edge.$f"; rc=1; }
    ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-doc -t filter "homelab.edge.$f" >/dev/null || rc=1
  done
  for r in roles/*/; do
    ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-doc -t role "homelab.edge.$(basename "$r")" >/dev/null || rc=1
  done
  rm -rf "$out"
  return $rc
}

# Development files that must never ship in the tarball (galaxy.yml's build_ignore)
DEV_FILES='^(Makefile|ansible\.cfg|\.ansible-lint|\.config/|\.ci/|\.gitignore|requirements-[a-z]+\.txt|site\.yml|tests/run\.sh|tests/mutations\.py|tests/support/|tests/lab/|tests/dev/|tests/output/|changelogs/\.plugin-cache\.yaml|inventories/lab/|molecule/|lab/|demo/|benchmarks/|ee/|docs/build/)'

tarball() { # output dir -> builds the collection there, prints the tarball's path
  ansible-galaxy collection build --force --output-path "$1" >/dev/null && ls "$1"/homelab-edge-*.tar.gz
}

publish() {
  # what Galaxy and AWX check, with their own tools (requirements-publish.txt, a venv of its own)
  local v out tb rc=0 f
  v=$(lab/lab.sh toolvenv publish /usr/bin/python3 $(sed 's/#.*//' requirements-publish.txt)) || return 1
  out=$(mktemp -d)
  tb=$(tarball "$out") || return 1
  tar -tzf "$tb" >"$out/files.txt"
  if grep -E "$DEV_FILES" "$out/files.txt"; then echo "the tarball ships the development files above"; rc=1; fi
  for f in LICENSE README.md meta/runtime.yml meta/execution-environment.yml meta/ee-requirements.txt meta/ee-bindep.txt \
           $(cd roles && ls -d */ | sed 's|/$|/README.md|; s|^|roles/|'); do
    grep -qx "$f" "$out/files.txt" || { echo "the tarball lacks $f"; rc=1; }
  done
  # Galaxy's importer as Galaxy runs it (ansible-test off: tests/run.sh sanity runs it), errors fail the step
  printf '[galaxy-importer]\nRUN_ANSIBLE_TEST = False\nRUN_ANSIBLE_LINT = True\n' >"$out/importer.cfg"
  (cd "$out" && GALAXY_IMPORTER_CONFIG="$out/importer.cfg" "$v/bin/python" -m galaxy_importer.main "$tb") \
    >"$ROOT/tests/output/galaxy-importer.log" 2>&1 || rc=1
  grep -E "^(ERROR|WARNING)" "$ROOT/tests/output/galaxy-importer.log" | grep -v "Ignore files skip ansible-test"
  if grep -q "^ERROR" "$ROOT/tests/output/galaxy-importer.log" || \
     ! grep -q "Importer processing completed successfully" "$ROOT/tests/output/galaxy-importer.log"; then
    echo "galaxy-importer did not accept the tarball (tests/output/galaxy-importer.log)"; rc=1
  fi
  # README's execution-environment commands, in a copy of the checkout
  mkdir -p "$out/tree"
  git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -C "$out/tree" -xf -
  (cd "$out/tree" && tarball ee/ >/dev/null &&
     "$v/bin/ansible-builder" create -f ee/execution-environment.yml --context ee/context >/dev/null) || rc=1
  grep -q "ansible-galaxy collection install .*-r requirements.yml" "$out/tree/ee/context/"*file || {
    echo "ansible-builder create: no collection install in the generated Containerfile"; rc=1; }
  [ -f "$out/tree/ee/context/_build/collections/$(basename "$tb")" ] || {
    echo "ansible-builder create: the tarball is not in the build context (ee/requirements.yml names $(basename "$tb")?)"; rc=1; }
  grep -q "collections/$(basename "$tb")" ee/requirements.yml || { echo "ee/requirements.yml does not name $(basename "$tb")"; rc=1; }
  mkdir -p "$out/inst"
  ansible-galaxy collection install --force --offline --no-deps -p "$out/inst" "$tb" >/dev/null 2>&1
  "$v/bin/ansible-builder" introspect --sanitize "$out/inst" >"$out/introspect.txt" 2>/dev/null
  for f in "docker>=" "openssh-client"; do
    grep -q "$f" "$out/introspect.txt" || { echo "ansible-builder introspect: homelab.edge does not bring $f"; rc=1; }
  done
  # the changelog and the oldest target Python claimed (README: 3.8, a Synology NAS)
  "$v/bin/antsibull-changelog" lint || rc=1
  "$v/bin/vermin" -t=3.8- --no-tips --violations --eval-annotations plugins/ || { echo "plugins/ needs a Python newer than 3.8"; rc=1; }
  rm -rf "$out"
  return $rc
}

docs() {
  # the docs site, offline (antsibull-docs, Sphinx): docs/build/build/html/index.html
  local v; v=$(lab/lab.sh toolvenv publish /usr/bin/python3 $(sed 's/#.*//' requirements-publish.txt)) || return 1
  # docs/docsite/links.yml against its schema, every plugin's and role's docs and what they reference, as
  # antsibull-docs lints a collection (community.docker and community.general as the ansible package bundles them)
  ANSIBLE_COLLECTIONS_PATH="$ANSIBLE_COLLECTIONS_PATH:$(echo "$VIRTUAL_ENV"/lib/python3*/site-packages)" PATH="$v/bin:$PATH" \
    antsibull-docs lint-collection-docs --plugin-docs . || { echo "antsibull-docs lint-collection-docs found the above"; return 1; }
  rm -rf docs/build && mkdir -p docs/build
  PATH="$v/bin:$PATH" antsibull-docs sphinx-init --use-current --dest-dir docs/build --fail-on-error \
    --squash-hierarchy --project homelab.edge homelab.edge >/dev/null || return 1
  # no intersphinx: its inventories are on sites this machine does not reach
  # and so no -W: links into Ansible's and other collections' docs stay unresolved; any other warning fails
  sed -i "s/'sphinx.ext.intersphinx', //; /^intersphinx_mapping = {/,/^}/d" docs/build/conf.py
  sed -i "s/ -W --keep-going//" docs/build/build.sh
  PATH="$v/bin:$PATH" bash docs/build/build.sh >"$ROOT/tests/output/docs.log" 2>&1 || { tail -n 20 "$ROOT/tests/output/docs.log"; return 1; }
  if grep -E "WARNING|ERROR" "$ROOT/tests/output/docs.log" | \
       grep -v -E "undefined label: '(common_return_values|ansible_configuration_settings|ansible_collections\.(ansible|community)\.)"; then
    echo "the docs build warned about the lines above"; return 1
  fi
  for m in plugins/modules/*.py; do
    [ -f "docs/build/build/html/$(basename "$m" .py)_module.html" ] || { echo "no docs page for $m"; return 1; }
  done
  echo "docs: docs/build/build/html/index.html"
}

compat() { # ansible-core VERSION PYTHON: unit tests, every doc, syntax of the playbooks, on the installed tarball
  local core=$1 py=$2 v out tb rc=0 m
  v=$(lab/lab.sh toolvenv "core-$core" "$py" "ansible-core==$core.*" pytest pyyaml) || return 1
  out=$(mktemp -d)
  tb=$(tarball "$out") || return 1
  "$v/bin/ansible-galaxy" collection install --force --offline --no-deps -p "$out/c" "$tb" >/dev/null || rc=1
  # community.docker and community.general as the ansible package bundles them (no Galaxy here)
  cp -r "$VIRTUAL_ENV"/lib/python3*/site-packages/ansible_collections/community "$out/c/ansible_collections/"
  "$v/bin/python" -m pytest -q -p no:cacheprovider tests/unit | tail -n 1 || rc=1
  for m in plugins/modules/*.py; do
    ANSIBLE_COLLECTIONS_PATH="$out/c" "$v/bin/ansible-doc" "homelab.edge.$(basename "$m" .py)" >/dev/null || rc=1
  done
  for m in plugins/filter/*.yml; do
    ANSIBLE_COLLECTIONS_PATH="$out/c" "$v/bin/ansible-doc" -t filter "homelab.edge.$(basename "$m" .yml)" >/dev/null || rc=1
  done
  for m in roles/*/; do
    ANSIBLE_COLLECTIONS_PATH="$out/c" "$v/bin/ansible-doc" -t role "homelab.edge.$(basename "$m")" >/dev/null || rc=1
  done
  for m in site status diagnose; do
    (cd "$out" && ANSIBLE_COLLECTIONS_PATH="$out/c" "$v/bin/ansible-playbook" --syntax-check \
       -i "$ROOT/inventories/example/hosts.yml" "homelab.edge.$m" >/dev/null) || { echo "syntax-check homelab.edge.$m"; rc=1; }
  done
  echo "ansible-core $("$v/bin/ansible" --version | head -n 1 | grep -o '[0-9][0-9.]*' | head -n 1) on $("$v/bin/python" -V)"
  rm -rf "$out"
  return $rc
}

scenario() {
  molecule test -s "$1"
}

bench() {
  for b in benchmarks/bench_*.py; do python "$b" || return 1; done
}

what=${1:-all}
case "$what" in
  versions) step versions versions ;;
  traefik-live) step "traefik live" traefik_live ;;
  fresh-host) step "fresh host" fresh_host ;;
  unit) step unit unit ;;
  mutations) step mutations mutations ;;
  lint) step lint lint ;;
  rules) step rules rules ;;
  sanity) step sanity sanity ;;
  build) step build build ;;
  publish) step publish publish ;;
  docs) step docs docs ;;
  compat) step "ansible-core 2.16 (oldest)" compat 2.16 /usr/bin/python3.11
          step "ansible-core 2.21 (newest)" compat 2.21 "/root/.pyenv/versions/3.13*/bin/python3.13" ;;
  bench) step bench bench ;;
  molecule|all)
    if [ "$what" = all ]; then
      step versions versions; step unit unit; step mutations mutations; step lint lint; step rules rules; step "traefik live" traefik_live; step "fresh host" fresh_host; step sanity sanity; step build build; step publish publish; step docs docs
      step "ansible-core 2.16 (oldest)" compat 2.16 /usr/bin/python3.11
      step "ansible-core 2.21 (newest)" compat 2.21 "/root/.pyenv/versions/3.13*/bin/python3.13"
    fi
    for s in molecule/*/molecule.yml; do
      s=$(basename "$(dirname "$s")"); step "molecule $s" scenario "$s"
    done ;;
  molecule:*) step "molecule ${what#molecule:}" scenario "${what#molecule:}" ;;
  *) echo "usage: tests/run.sh all|versions|traefik-live|fresh-host|unit|mutations|lint|rules|sanity|build|publish|docs|compat|bench|molecule|molecule:NAME" >&2; exit 2 ;;
esac

echo
[ ${#failures[@]} -eq 0 ] || echo "failed steps: ${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
