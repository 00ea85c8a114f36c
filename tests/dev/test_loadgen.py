"""What the compiled generators share around their binaries (tests/support/loadgen.py): one Go module
(tests/support/loadgen_go), each binary found by the hash of its own sources, and refused when it is another
build's. The generators' own tests: test_dnsgen_compiled.py, test_tlsgen.py."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import dnsgen  # noqa: E402
import loadgen  # noqa: E402
import tlsgen  # noqa: E402

# each generator: its name, the exception its binary() raises, a run (which looks for the binary first) and binary()
GENERATORS = {
    "dnsgen": (dnsgen.CompiledMissing, lambda: dnsgen.run_compiled("127.0.0.1", [53], rate=1, seconds=0.1),
               dnsgen.compiled_binary),
    "tlsgen": (tlsgen.Missing, lambda: tlsgen.run("127.0.0.1", 443, "site.nas.lab", "/", rate=1, seconds=0.1,
                                                  timeout=1), tlsgen.binary),
}


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_a_missing_binary_says_what_to_run(name, tmp_path, monkeypatch):
    missing, run, dummy = GENERATORS[name]
    monkeypatch.setenv("HOMELAB_EDGE_CACHE", str(tmp_path))
    with pytest.raises(missing, match=r"run `lab/lab.sh gobins`"):
        run()


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_a_binary_of_other_sources_is_refused(name, tmp_path, monkeypatch):
    missing, dummy, binary = GENERATORS[name]
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / (name + "-000000000000")).write_text("")
    (tmp_path / "bin" / name).symlink_to(name + "-000000000000")
    monkeypatch.setenv("HOMELAB_EDGE_CACHE", str(tmp_path))
    with pytest.raises(missing, match="other sources"):
        binary()


def test_each_binary_is_keyed_by_the_core_and_its_own_command_as_lab_sh_hashes_them():
    assert dnsgen.go_sources_hash() != tlsgen.sources_hash()
    for name in GENERATORS:
        files = loadgen.sources(name)
        assert "go.mod" in files and any(f.startswith("core/") for f in files), files
        assert all(f.startswith(("core/", "cmd/%s/" % name)) or f in ("go.mod", "go.sum") for f in files), files
        assert not any(f.endswith("_test.go") or f.startswith("coretest/") for f in files), files
        # lab/lab.sh's go_tool_sources and hash_of, run as lab.sh runs them
        script = ('source <(sed -n "/^hash_of()/p; /^go_tool_sources()/,/^}/p" lab/lab.sh); ROOT=$PWD; '
                  'mapfile -t f < <(go_tool_sources %s); hash_of "${f[@]}"' % name)
        h = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, check=True,
                           timeout=60).stdout.strip()
        assert h == loadgen.sources_hash(name), (name, h)


def test_the_go_module_vets_and_its_unit_tests_pass():
    """The core's tests once, each command's own, and go vet over all (the standard library only: no downloads)."""
    if not shutil.which("go"):
        pytest.skip("go is not on PATH (lab/lab.sh env puts it there)")
    env = dict(os.environ, GOFLAGS="-mod=mod", GOWORK="off", CGO_ENABLED="0")
    for cmd in (["go", "vet", "./..."], ["go", "test", "-count=1", "./..."]):
        p = subprocess.run(cmd, cwd=loadgen.GO_DIR, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert p.returncode == 0, p.stdout + p.stderr
