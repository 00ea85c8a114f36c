#!/usr/bin/env bash
# The test suite. `tests/run.sh all` (what `make test` runs) = unit, lint,
# sanity, build and every Molecule scenario. Each step's result is counted;
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

unit() {
  # exit code 5 (no tests collected) is a failure here, as any other non-zero
  python -m pytest -q -p no:cacheprovider tests/unit
}

lint() {
  ansible-lint --offline --profile production
}

sanity() {
  local tmp; tmp=$(mktemp -d)
  mkdir -p "$tmp/ansible_collections/homelab"
  mkdir -p "$tmp/ansible_collections/homelab/edge"
  git ls-files -z --cached --others --exclude-standard | \
    tar --null -T - --ignore-failed-read -cf - | tar -C "$tmp/ansible_collections/homelab/edge" -xf -
  # --local: the venv holds the sanity tools (requirements-test.txt)
  (cd "$tmp/ansible_collections/homelab/edge" && git init -q && git add -A &&
     ansible-test sanity --local --python 3.11 >"$ROOT/tests/output/sanity.log" 2>&1)
  local rc=$?
  grep -E '^(ERROR|FATAL|Running sanity)' "$ROOT/tests/output/sanity.log" | grep -v -E "^Running" | head -n 60
  rm -rf "$tmp"
  return $rc
}

build() {
  local out rc=0 f m; out=$(mktemp -d)
  ansible-galaxy collection build --force --output-path "$out" >/dev/null || rc=1
  tar -tzf "$out"/homelab-edge-*.tar.gz >"$out/files.txt" || rc=1
  # what an execution environment needs travels in the tarball
  for f in meta/execution-environment.yml meta/ee-requirements.txt meta/ee-bindep.txt meta/runtime.yml; do
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

scenario() {
  molecule test -s "$1"
}

bench() {
  for b in benchmarks/bench_*.py; do python "$b" || return 1; done
}

what=${1:-all}
case "$what" in
  unit) step unit unit ;;
  lint) step lint lint ;;
  sanity) step sanity sanity ;;
  build) step build build ;;
  bench) step bench bench ;;
  molecule|all)
    if [ "$what" = all ]; then
      step unit unit; step lint lint; step sanity sanity; step build build
    fi
    for s in molecule/*/molecule.yml; do
      s=$(basename "$(dirname "$s")"); step "molecule $s" scenario "$s"
    done ;;
  molecule:*) step "molecule ${what#molecule:}" scenario "${what#molecule:}" ;;
  *) echo "usage: tests/run.sh all|unit|lint|sanity|build|bench|molecule|molecule:NAME" >&2; exit 2 ;;
esac

echo
[ ${#failures[@]} -eq 0 ] || echo "failed steps: ${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
