"""Helpers the Molecule verifiers share: run one module of the collection
ad hoc and get its result, and record measured figures for the notes."""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run_module(module, args, target="localhost", connection="local", check=False, timeout=180):
    """`ansible <target> -m homelab.edge.<module> -a <args>`; the host's result dict.

    connection "local" runs on this host with this Python; any other (for
    example community.docker.docker) uses the target's /usr/bin/python3."""
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json")
    interpreter = sys.executable if connection == "local" else "/usr/bin/python3"
    cmd = ["ansible", "all", "-i", "%s," % target, "-c", connection,
           "-e", "ansible_python_interpreter=%s" % interpreter,
           "-m", "homelab.edge.%s" % module, "-a", json.dumps(args)] + (["--check"] if check else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    try:
        return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"][target]
    except (ValueError, KeyError, IndexError):
        raise AssertionError("no result from %s:\n%s\n%s" % (" ".join(cmd), out.stdout[-2000:], out.stderr[-2000:]))


def record(scenario, name, **figures):
    """Print a line of figures and append it to tests/output/<scenario>.txt."""
    os.makedirs(os.path.join(ROOT, "tests", "output"), exist_ok=True)
    line = "%s %s" % (name, " ".join("%s=%s" % kv for kv in sorted(figures.items())))
    print(line)
    with open(os.path.join(ROOT, "tests", "output", "%s.txt" % scenario), "a") as f:
        f.write(time.strftime("%FT%T ") + line + "\n")
