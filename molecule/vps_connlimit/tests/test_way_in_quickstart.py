"""The README's quick start as a newcomer runs it: the built tarball installed
into an empty collections path (a new HOME), the example inventory copied out
of the installed collection, then every command of the "Quick start" section,
in its order, with the outcomes the README states. Only the hosts of the
copied inventory are changed to the lab's: the fresh VPS (ufw installed but
inactive, as Ubuntu ships it; reached over SSH as a sudo user) and a k3d host
whose Docker engine is down (this machine, its DOCKER_HOST at a socket that is
not there). There is no NAS in it. Runs last in the scenario (its file name)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(__file__)
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path[:0] = [HERE, os.path.join(ROOT, "plugins"), os.path.join(ROOT, "lab")]
import hosts  # noqa: E402
import test_way_in as way  # noqa: E402
from module_utils.ufw import connlimit as ufw_connlimit  # noqa: E402

BIN = os.path.dirname(sys.executable)


def quick_start_commands():
    """Every line of the ```bash blocks of README.md's "## Quick start" section."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    return [ln.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)
            for ln in block.splitlines() if ln.strip()]


def lab_inventory(tmp):
    return ("all:\n  children:\n"
            "    k3d_hosts:\n      hosts:\n        k3d-down:\n          ansible_connection: local\n"
            "          ansible_python_interpreter: %(py)s\n          ansible_become: false\n"
            "    vps:\n      hosts:\n        vps-fresh:\n          ansible_host: 127.0.0.1\n          ansible_port: 2223\n"
            "          ansible_user: %(user)s\n          ansible_ssh_private_key_file: %(key)s\n"
            "          ansible_ssh_common_args: %(opts)s\n          ansible_become_password: edge-lab-sudo\n"
            "          ansible_python_interpreter: /usr/bin/python3\n"
            "          vps_connlimit_install_packages: false   # the lab image has them; no apt in tests\n"
            "          vps_connlimit_confirm_timeout: 60\n"
            "          vps_connlimit_prove_address: %(fresh)s   # the controller reaches it there, not at 127.0.0.1\n"
            "    nas:\n      hosts: {}\n"
            % {"py": sys.executable, "user": hosts.USER, "key": hosts.key(),
               "opts": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null", "fresh": way.fresh_ip()})


@pytest.fixture(scope="module")
def newcomer():
    """A directory with the built tarball, and the environment of a user who has only installed ansible."""
    tmp = tempfile.mkdtemp(prefix="quickstart-")
    work = os.path.join(tmp, "work")
    os.makedirs(os.path.join(tmp, "home"))
    subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", work, ROOT],
                   check=True, capture_output=True, timeout=300)
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "MOLECULE_INVENTORY_FILE")
    env.update(HOME=os.path.join(tmp, "home"), PATH=BIN + os.pathsep + env["PATH"],
               DOCKER_HOST="unix://%s/no-engine.sock" % tmp, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    yield work, env
    shutil.rmtree(tmp, ignore_errors=True)


def run(command, work, env):
    p = subprocess.run(command, shell=True, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=900, check=False)
    return p.returncode, " ".join(p.stdout.split())


def recap(out, host):
    m = re.search(r"%s : ok=(\d+) changed=(\d+) unreachable=(\d+) failed=(\d+)" % re.escape(host), out)
    assert m, out[-3000:]
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m.groups())))


def test_every_quick_start_command_from_the_installed_collection(newcomer):
    work, env = newcomer
    commands = quick_start_commands()
    assert commands[0].startswith("ansible-galaxy collection install") and len(commands) == 12, commands
    way.make_fresh()
    seen = []
    for command in commands:
        rc, out = run(command, work, env)
        seen.append(command)
        if command.startswith("cp -r"):
            assert rc == 0, out
            # the copied example, pointed at the lab's hosts
            with open(os.path.join(work, "inventory", "hosts.yml"), "w") as f:
                f.write(lab_inventory(work))
            continue
        if command.startswith("ansible-galaxy collection install"):
            assert rc == 0 and "homelab.edge:" in out and "was installed successfully" in out, out[-2000:]
        elif command.startswith("ansible-galaxy collection list"):
            assert rc == 0 and os.path.join(env["HOME"], ".ansible", "collections") in out and "homelab.edge" in out, out
        elif command.endswith("homelab.edge.site --check --diff"):
            before = way.firewall()
            # the k3d host fails (its engine is down); the VPS is still planned, and nothing changes on it
            assert rc != 0 and "fatal: [k3d-down]" in out and "cannot reach the Docker engine" in out, out[-3000:]
            assert recap(out, "vps-fresh")["failed"] == 0 and "ufw inactive" in out and "ufw active" in out, out[-3000:]
            assert way.firewall() == before
        elif command.endswith("homelab.edge.site"):
            assert rc != 0 and recap(out, "vps-fresh")["failed"] == 0, out[-3000:]
            assert "Hosts that failed in a play above" in out and "cannot reach the Docker engine" in out.split(
                "Hosts that failed in a play above")[-1], out[-3000:]
            assert way.FRESH.check_output("ufw status").startswith("Status: active")
            assert ufw_connlimit.nft_connlimit_ports(way.FRESH.check_output("nft list ruleset 2>/dev/null"), 4) == {80, 443}
            assert way.new_login() and way.udp_answers()
        elif command.endswith("--tags k3d"):
            assert rc != 0 and "fatal: [k3d-down]" in out, out[-3000:]
        elif command.endswith("--tags nas"):
            assert rc == 0 and "skipping: no hosts matched" in out, out[-3000:]
        elif command.endswith("--tags vps"):
            assert rc == 0 and recap(out, "vps-fresh")["changed"] == 0, out[-3000:]  # applied already
        elif command.endswith("homelab.edge.status"):
            assert rc == 0, out[-3000:]
            assert re.search(r"vps-fresh +connlimit 100/IP on 80,443 +ok", out), out[-3000:]
            assert re.search(r"k3d-down +k3d load balancers +NOT READ +cannot reach the Docker engine", out), out[-3000:]
        elif command.endswith("homelab.edge.diagnose"):
            assert rc == 0, out[-3000:]
            with open(os.path.join(work, "diagnose.json")) as f:
                findings = json.load(f)["findings"]
            assert [x for x in findings if x["host"] == "k3d-down" and x["code"] == "k3d_engine_unreadable"], findings
        elif command.endswith("homelab.edge.prove --check"):
            # the k3d host's row says why it failed; the VPS's checks are planned, nothing is sent
            # (the table's lines as the callback prints them, whitespace folded: a row's reasons follow it)
            assert rc != 0 and 'k3d-down k3d DNS load - - - failed", " - cannot reach the Docker engine' in out, out[-3000:]
            assert re.search(r"vps-fresh VPS connection limit %s:80 [^\"]* would open 110 connections \(bound 13 s\) planned"
                             % re.escape(way.fresh_ip()), out), out[-3000:]
        elif command.endswith("homelab.edge.prove"):
            assert rc != 0, out[-3000:]
            with open(os.path.join(work, "prove.json")) as f:
                rows = dict(((r["host"], r["target"]), r) for r in json.load(f)["rows"])
            assert rows[("k3d-down", "-")]["status"] == "failed"
            # the fresh VPS: the limit proves itself on 80 (nginx); nothing listens on 443 there: skipped, with why
            assert rows[("vps-fresh", "%s:80" % way.fresh_ip())]["measured"] == "100 established, 10 reset, 0 unanswered"
            assert rows[("vps-fresh", "%s:80" % way.fresh_ip())]["status"] == "proved"
            skipped = rows[("vps-fresh", "%s:443" % way.fresh_ip())]
            assert skipped["status"] == "skipped" and "port 443 is not reachable from here: refused" in skipped["reasons"][0]
        else:
            pytest.fail("a Quick start command this test does not know: %s" % command)
    assert seen == commands
