"""Helpers the Molecule verifiers share: run one module of the collection
ad hoc and get its result, and record measured figures for the notes."""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run_module(module, args, target="localhost", connection="local", check=False, diff=False, become=False,
               inventory=None, timeout=180, new_connection=False, extra_vars=None):
    """`ansible <target> -m homelab.edge.<module> -a <args>`; the host's result dict.

    With `inventory` (for example Molecule's, MOLECULE_INVENTORY_FILE) the
    target is reached as the inventory says (SSH as a sudo user: become=True).
    Otherwise connection "local" runs on this host with this Python, and any
    other (for example community.docker.docker) uses the target's python3.
    new_connection: an SSH connection of its own (no ControlPersist master
    shared with an earlier run: a new login on the host). extra_vars: -e."""
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json")
    if new_connection:
        env["ANSIBLE_SSH_ARGS"] = "-C -o ControlMaster=no"
    if inventory:
        cmd = ["ansible", target, "-i", inventory]
    elif target != "localhost" and connection == "local":
        raise AssertionError("%s with a local connection would run on this machine: pass its inventory" % target)
    else:
        interpreter = sys.executable if connection == "local" else "/usr/bin/python3"
        cmd = ["ansible", "all", "-i", "%s," % target, "-c", connection,
               "-e", "ansible_python_interpreter=%s" % interpreter]
    cmd += ["-m", "homelab.edge.%s" % module, "-a", json.dumps(args)]
    cmd += ["-e", json.dumps(extra_vars)] if extra_vars else []
    cmd += (["--check"] if check else []) + (["--diff"] if diff else []) + (["--become"] if become else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    try:
        result = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"][target]
    except (ValueError, KeyError, IndexError):
        raise AssertionError("no result from %s:\n%s\n%s" % (" ".join(cmd), out.stdout[-2000:], out.stderr[-2000:]))
    if result.get("unreachable"):
        raise AssertionError("%s unreachable: %s" % (target, result.get("msg")))
    return result


def molecule_inventory():
    """The inventory Molecule generated for this scenario (its directory:
    the host variables of molecule.yml are in a file beside the platforms)."""
    return os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])


def playbook(inventory, text, *args, timeout=600):
    """ansible-playbook of a playbook given as text; the CompletedProcess, its
    stdout holding stderr too: where a failure's message goes depends on the
    callback (Molecule sets its own config)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run(["ansible-playbook", "-i", inventory, f.name] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
    finally:
        os.unlink(f.name)


# homelab.edge.prove's temporary backend in the lab: the NAS image's nginx (its /slower holds a request 6 s)
# stands in for whoami, the default, which no registry here serves
PROVE_LAB_BACKEND = {"traefik_inflight_prove_backend_image": "homelab-edge/nas:lab",
                     "traefik_inflight_prove_backend_command": ["backend"],
                     "traefik_inflight_prove_backend_port": 8080,
                     "traefik_inflight_prove_backend_path": "/slower"}


def prove(inventory, *args):
    """ansible-playbook playbooks/prove.yml (homelab.edge.prove) with its JSON report in a temporary
    file: (exit code, output with stderr, the report or None)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "prove.json")
        out = subprocess.run(["ansible-playbook", "-i", inventory, os.path.join(ROOT, "playbooks", "prove.yml"),
                              "-e", "prove_output=%s" % report] + list(args), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=600, check=False)
        if not os.path.exists(report):
            return out.returncode, out.stdout, None
        with open(report) as f:
            return out.returncode, out.stdout, json.load(f)


def record(scenario, name, **figures):
    """Print a line of figures and append it to tests/output/<scenario>.txt."""
    os.makedirs(os.path.join(ROOT, "tests", "output"), exist_ok=True)
    line = "%s %s" % (name, " ".join("%s=%s" % kv for kv in sorted(figures.items())))
    print(line)
    with open(os.path.join(ROOT, "tests", "output", "%s.txt" % scenario), "a") as f:
        f.write(time.strftime("%FT%T ") + line + "\n")
