"""lab/lab.sh's version check of the binaries it fetches, builds and caches
(reports_version): a binary is taken only when it reports the pinned version,
and the check reads the binary's whole output before matching it. Piping it
into `grep -q` under pipefail failed whenever grep exited before the binary
had written its last line (8 in 100 times for Traefik on a loaded machine):
the fake here writes its version first and the rest later, every time."""
import os
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LAB = os.path.join(ROOT, "lab", "lab.sh")


def check(tmp_path, name, output, rc=0):
    """Run lab.sh's reports_version NAME on a fake binary printing `output`
    line by line, a pause between lines. Returns (exit code, stderr)."""
    fake = tmp_path / name
    lines = "".join("printf '%%s\\n' '%s'; sleep 0.05\n" % line for line in output.splitlines())
    fake.write_text("#!/bin/sh\n%sexit %d\n" % (lines, rc))
    fake.chmod(0o755)
    script = ('set -euo pipefail; source <(sed -n "/^log()/p;/^[A-Z0-9_]*_VERSION=/p;/^pinned_version()/,/^}/p;'
              '/^version_output()/,/^}/p;/^reports_version()/,/^}/p" "%s"); reports_version %s "%s"' % (LAB, name, fake))
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, check=False)
    return p.returncode, p.stderr


TRAEFIK = "Version:      3.6.12\nCodename:     ramequin\nGo version:   go1.25.8\nBuilt:        2026-03-26T10:00:53Z\n"


@pytest.mark.parametrize("name, output", [
    ("traefik", TRAEFIK),
    ("traefik2", TRAEFIK.replace("3.6.12", "2.11.35")),
    ("k3d", "k3d version v5.9.0\nk3s version v1.31.5-k3s1 (default)\n"),
    ("confd", "confd 0.16.0 (Git SHA: , Go Version: go1.26.8)\n"),
    ("dockerd29", "Docker version v2.0.0-beta.24, build library-import\n"),
    ("runc29", "runc version 1.3.7\nspec: 1.2.1\ngo: go1.26.8\nlibseccomp: 2.5.4\n"),
    ("containerd29", "containerd github.com/containerd/containerd/v2 v2.2.9 \n"),
])
def test_a_binary_that_reports_its_pin_is_taken_whatever_it_writes_after(tmp_path, name, output):
    assert check(tmp_path, name, output) == (0, "")


@pytest.mark.parametrize("name, output, rc, words", [
    # the Go build without its -X ldflags
    ("traefik", TRAEFIK.replace("3.6.12", "dev"), 0, "does not report traefik 3.6.12 (exit 0): Version: dev"),
    ("traefik", TRAEFIK.replace("3.6.12", "3.6.11"), 0, "Version: 3.6.11"),
    ("k3d", "k3d version v5-dev\n", 0, "does not report k3d v5.9.0"),
    # moby's build without -X .../dockerversion.Version
    ("dockerd29", "Docker version library-import, build library-import\n", 0, "does not report dockerd29 v2.0.0-beta.24"),
    # runc's and containerd's builds without their -X ldflags
    ("runc29", "runc version unknown\nspec: 1.2.1\n", 0, "does not report runc29 1.3.7"),
    ("containerd29", "containerd github.com/containerd/containerd/v2 2.2.9+unknown \n", 0, "does not report containerd29 v2.2.9"),
    # a binary that cannot run here says so, with its exit code
    ("traefik", "exec format error\n", 126, "(exit 126): exec format error"),
])
def test_a_binary_that_does_not_is_refused_saying_what_it_reported(tmp_path, name, output, rc, words):
    code, err = check(tmp_path, name, output, rc)
    assert code == 1 and words in err
