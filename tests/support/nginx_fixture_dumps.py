#!/usr/bin/env python
"""The `nginx -T` output of each nginx stream fixture, made by the real nginx.

Each directory of tests/unit/fixtures/nginx_streams/ holds the files of one
configuration as nginx loads them (root/, at their absolute paths), its
symlinks (links.txt: `PATH -> TARGET`, git keeps none there), and case.json
(the main file, directories, self-signed certificates and local addresses
nginx needs to load it: `nginx -t` binds each listen address). This script copies them into a throwaway container of the lab's
host image (Debian's nginx-light and libnginx-mod-stream, as on the lab's
VPS; no network), makes the links, directories and certificates, and runs
`nginx -T -c CONFIG` there: its output is the fixture's nginx-T.txt, what
the module reads on a host.

  python tests/support/nginx_fixture_dumps.py [NAME...]           write nginx-T.txt
  python tests/support/nginx_fixture_dumps.py --check [NAME...]   exit 1 when one differs
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures", "nginx_streams")
IMAGE = "homelab-edge/host:lab"
DUMP = "nginx-T.txt"


def links(fixture):
    path = os.path.join(fixture, "links.txt")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(part.strip() for part in line.split(" -> ")) for line in f if line.strip()]


def script(fixture):
    """The shell run in the container: the fixture's files in place, then nginx -T."""
    with open(os.path.join(fixture, "case.json")) as f:
        case = json.load(f)
    lines = ["set -e", "cp -a /fixture/root/. /"]
    for path, target in links(fixture):
        lines.append("mkdir -p %s && ln -s %s %s" % (shlex.quote(os.path.dirname("/" + path)), shlex.quote(target),
                                                      shlex.quote("/" + path)))
    for d in case.get("mkdirs", []):
        lines.append("mkdir -p %s" % shlex.quote(d))
    for address in case.get("addresses", []):  # the VPS's public address, on its loopback here
        lines.append("ip address add %s dev lo" % shlex.quote(address))
    for crt, key in case.get("certs", []):
        lines.append("mkdir -p %s %s && openssl req -x509 -nodes -newkey rsa:2048 -days 2 -subj /CN=fixture "
                     "-keyout %s -out %s 2>/dev/null" % tuple(shlex.quote(x) for x in (
                         os.path.dirname(crt), os.path.dirname(key), key, crt)))
    lines.append("exec nginx -T -c %s" % shlex.quote(case["config"]))
    return "\n".join(lines)


def dump(fixture, image=IMAGE):
    with open(os.path.join(fixture, "case.json")) as f:
        caps = ["--cap-add", "NET_ADMIN"] if json.load(f).get("addresses") else []
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh"] + caps +
                         ["-v", "%s:/fixture:ro" % fixture, image, "-c", script(fixture)],
                         capture_output=True, timeout=120, check=False)
    if out.returncode:
        raise RuntimeError("%s: nginx -T failed:\n%s" % (os.path.basename(fixture), out.stderr.decode(errors="replace")))
    return out.stdout


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--image", default=IMAGE)
    a = ap.parse_args(argv)
    names = a.names or sorted(n for n in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, n)))
    version = subprocess.run(["docker", "run", "--rm", "--entrypoint", "nginx", a.image, "-v"],
                             capture_output=True, text=True, check=True).stderr.strip()
    differ = []
    for name in names:
        fixture = os.path.join(FIXTURES, name)
        data = dump(fixture, a.image)
        path = os.path.join(fixture, DUMP)
        if a.check:
            with open(path, "rb") as f:
                if f.read() != data:
                    differ.append(name)
            continue
        with open(path, "wb") as f:
            f.write(data)
        print("%s: %d bytes from %s" % (name, len(data), version))
    if differ:
        print("differs from what %s prints now: %s" % (version, ", ".join(differ)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
