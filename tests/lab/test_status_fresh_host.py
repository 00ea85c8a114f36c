"""Status on a VPS not yet set up (no ufw, no nginx): each line says what is
missing in the module's own words, instead of crashing ("object of type
'dict' has no attribute 'enabled_before'") or reading as "live IPv4 none".
The host is this machine, read in check mode over a local connection (it has
neither ufw nor nginx; where it has, the test says so and is skipped)."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLAY = """- hosts: localhost
  gather_facts: false
  connection: local
  vars:
    vps_proxy_protocol_upstreams: ["10.8.0.2:443"]
  tasks:
    - ansible.builtin.include_role: {name: homelab.edge.vps_connlimit, tasks_from: status}
    - ansible.builtin.include_role: {name: homelab.edge.vps_proxy_protocol, tasks_from: status}
    - ansible.builtin.copy:
        content: "{{ homelab_edge_status_lines | to_json }}"
        dest: "{{ out }}"
      check_mode: false
"""


def test_status_on_a_vps_not_yet_set_up_says_what_is_missing(tmp_path):
    if shutil.which("ufw") or os.path.exists("/etc/ufw") or os.path.exists("/etc/nginx/nginx.conf"):
        pytest.skip("this machine has ufw or nginx: it is not a host that is not yet set up")
    (tmp_path / "play.yml").write_text(PLAY)
    out = tmp_path / "lines.json"
    p = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                        "--check", "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "out=%s" % out,
                        str(tmp_path / "play.yml")], capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    lines = dict((line["what"].split(" ")[0], line) for line in json.loads(out.read_text()))
    assert lines["connlimit"] == {"what": "connlimit 100/IP on 80,443", "fixed": False,
                                  "state": "ufw is not installed: once it is (the role installs it first), the run "
                                           "adds connlimit 100/IP on 80, 443 to /etc/ufw/before.rules and "
                                           "/etc/ufw/before6.rules"}
    assert lines["way"]["fixed"] is False and lines["way"]["state"].startswith("ufw not installed, SSH")
    assert lines["PROXY"]["fixed"] is False and "is nginx installed?" in lines["PROXY"]["state"]


K3D_PLAY = """- hosts: localhost
  gather_facts: false
  connection: local
  tasks:
    - ansible.builtin.include_role: {name: homelab.edge.k3d_serverlb, tasks_from: status}
    - ansible.builtin.copy:
        content: "{{ homelab_edge_status_lines | to_json }}"
        dest: "{{ out }}"
      check_mode: false
"""


def test_k3d_status_with_the_engine_unreachable_is_a_line_that_says_so(tmp_path):
    """An engine that does not answer (here: DOCKER_HOST at a socket that is not there) gives a
    line with the engine's words, not an empty table."""
    (tmp_path / "play.yml").write_text(K3D_PLAY)
    out = tmp_path / "lines.json"
    p = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                        "--check", "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "out=%s" % out,
                        str(tmp_path / "play.yml")], capture_output=True, text=True, timeout=300, check=False,
                       env=dict(os.environ, DOCKER_HOST="unix://%s/no-engine.sock" % tmp_path))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    (line,) = json.loads(out.read_text())
    assert line["what"] == "k3d load balancers" and line["status"] == "NOT READ" and line["fixed"] is False
    assert line["state"].startswith("cannot reach the Docker engine")


def test_check_diff_of_the_vps_role_on_a_host_not_yet_set_up_says_what_a_run_would_do(tmp_path):
    """--check --diff of the whole vps_connlimit role on a host without ufw: it would install ufw, then
    enable it with SSH and the front door allowed, then add the connlimit block - and changes nothing."""
    if shutil.which("ufw") or os.path.exists("/etc/ufw"):
        pytest.skip("this machine has ufw: it is not a host that is not yet set up")
    (tmp_path / "play.yml").write_text("- hosts: localhost\n  gather_facts: false\n  connection: local\n"
                                       "  roles: [homelab.edge.vps_connlimit]\n")
    p = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                        "--check", "--diff", "-e", "ansible_python_interpreter=%s" % sys.executable,
                        str(tmp_path / "play.yml")], capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    out = " ".join((p.stdout + p.stderr).split())
    assert "The following NEW packages will be installed: ufw" in out or "ufw" in out.split("Install ufw")[1][:400]
    assert "ufw is not installed: this plan is against ufw as its package installs it" in out
    assert "+-A ufw-before-input -p tcp --dport 443 -m conntrack --ctstate NEW -m connlimit --connlimit-above 100" in out
    assert not os.path.exists("/etc/ufw") and not shutil.which("ufw")
    # over a local connection no new SSH login can confirm: --check says that a run would stop there
    assert "A run would stop here: vps_connlimit confirms every firewall change over a new SSH login" in out


def _inventory(tmp_path, drain_containers=()):
    """A k3d host whose engine does not answer, and a VPS not yet set up: both this machine."""
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  vars:\n    ansible_connection: local\n    ansible_python_interpreter: %s\n"
                   "    ansible_become: false\n"
                   "  children:\n    k3d_hosts:\n      hosts:\n        k3d-down:\n"
                   "    vps:\n      hosts:\n        vps-new:\n"
                   "          tcp_drain_containers: %s\n" % (sys.executable, json.dumps(list(drain_containers))))
    return str(inv)


def _playbook(tmp_path, name, *args, **kw):
    env = dict(os.environ, DOCKER_HOST="unix://%s/no-engine.sock" % tmp_path)
    return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", _inventory(tmp_path, **kw),
                           os.path.join(ROOT, "playbooks", name + ".yml")] + list(args),
                          capture_output=True, text=True, timeout=600, check=False, env=env)


def test_a_k3d_host_whose_engine_is_down_does_not_stop_the_run_for_the_vps(tmp_path):
    """site.yml --check: the k3d host fails (its engine is down), the VPS play still runs, and the run ends
    failed, naming the k3d host and the engine's words."""
    if shutil.which("ufw") or os.path.exists("/etc/ufw"):
        pytest.skip("this machine has ufw: it is not a host that is not yet set up")
    p = _playbook(tmp_path, "site", "--check", "--skip-tags", "nas")
    out = " ".join((p.stdout + p.stderr).split())
    assert p.returncode != 0, out[-3000:]
    assert "ufw is not installed: this plan is against ufw as its package installs it" in out, out[-3000:]
    assert "vps-new : ok=" in out and "failed=0" in out.split("vps-new : ok=")[1][:200], out[-2000:]
    last = out.split("TASK [Hosts that failed in a play above")[-1]
    assert "fatal: [k3d-down]" in last and "Docker engine" in last, last[-2000:]


def test_diagnose_names_the_engine_down_and_still_reads_the_vps(tmp_path):
    out_file = tmp_path / "diagnose.json"
    p = _playbook(tmp_path, "diagnose", "--check", "--skip-tags", "nas", "-e", "diagnose_output=%s" % out_file)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    findings = json.loads(out_file.read_text())["findings"]
    engine = [f for f in findings if f["code"] == "k3d_engine_unreadable"]
    assert len(engine) == 1 and engine[0]["host"] == "k3d-down", findings
    assert [f for f in findings if f["host"] == "vps-new"], findings


def test_status_of_drain_values_in_a_container_that_is_not_there_says_so(tmp_path):
    p = _playbook(tmp_path, "status", "--skip-tags", "nas,k3d", drain_containers=["no-such-container"])
    out = " ".join(p.stdout.split())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "drain no-such-container NOT READ" in out, out[-3000:]


def test_installing_ufw_where_it_would_remove_iptables_persistent_is_refused(tmp_path):
    """The role asks apt (a simulation) what installing ufw removes; where that is iptables-persistent or
    netfilter-persistent (ufw's package Breaks them on Debian 12) it refuses before anything is written. apt's
    answer here comes from a stand-in apt-get that prints what Debian 12's does on such a host (`Remv` lines);
    with the stand-in saying nothing is removed, the same run goes on to the plan."""
    if shutil.which("ufw") or os.path.exists("/etc/ufw"):
        pytest.skip("this machine has ufw: it is not a host that is not yet set up")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text(
        "#!/bin/sh\n[ -n \"$REMOVES\" ] && for p in $REMOVES; do echo \"Remv $p [1.0.20]\"; done\n"
        "echo 'Inst ufw (0.36.2-1 Debian:12.11/stable [all])'\nexit 0\n")
    os.chmod(str(fake / "apt-get"), 0o755)
    (tmp_path / "play.yml").write_text("- hosts: localhost\n  gather_facts: false\n  connection: local\n"
                                       "  roles: [homelab.edge.vps_connlimit]\n")

    def run(removes):
        env = dict(os.environ, PATH="%s:%s" % (fake, os.environ["PATH"]), REMOVES=removes)
        return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                               "--check", "-e", "ansible_python_interpreter=%s" % sys.executable,
                               str(tmp_path / "play.yml")], capture_output=True, text=True, timeout=300, check=False,
                              env=env)
    refused = run("iptables-persistent netfilter-persistent")
    out = " ".join(refused.stdout.split())
    assert refused.returncode != 0
    assert "Installing ufw would remove iptables-persistent and netfilter-persistent" in out, out[-2000:]
    assert "Install ufw, iptables and nftables" not in out  # refused before the install
    fine = run("")
    assert fine.returncode == 0, fine.stdout[-2000:]


def _free_port():
    """A port on 127.0.0.1 nothing listens on (bound, then closed): SSH to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_down_in_each_group(tmp_path):
    """Each group: a host that answers (this machine) and one at a port nothing listens on. This machine is a k3d
    host whose engine is down, a NAS without Traefik (its tasks fail) and a VPS not yet set up."""
    down = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": _free_port(),
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"}
    here = {"ansible_connection": "local"}
    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps({"all": {
        "vars": {"ansible_python_interpreter": sys.executable, "ansible_become": False},
        "children": {"k3d_hosts": {"hosts": {"k3d-here": here, "k3d-down": down}},
                     "nas": {"hosts": {"nas-here": here, "nas-down": down}},
                     "vps": {"hosts": {"vps-here": here,
                                       "vps-down": down}}}}}))
    return str(inv)


@pytest.mark.parametrize("name, args", [("site", ["--check"]), ("status", []), ("diagnose", ["--check"]),
                                        ("prove", ["--check"])])
def test_one_host_down_in_each_group_does_not_stop_the_others(tmp_path, name, args):
    """Each playbook goes on to every group with one host of each unreachable, then fails naming each host and why
    (the unreachable ones, and this machine as a NAS: its Traefik is not there); the VPS that answered is read (or
    planned) in full, its table rows and report written."""
    if shutil.which("ufw") or os.path.exists("/etc/ufw"):
        pytest.skip("this machine has ufw: it is not a host that is not yet set up")
    report = tmp_path / ("%s.json" % name)
    extra = {"diagnose": ["-e", "diagnose_output=%s" % report], "prove": ["-e", "prove_output=%s" % report]}
    p = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                        _one_down_in_each_group(tmp_path), os.path.join(ROOT, "playbooks", name + ".yml")]
                       + args + extra.get(name, []), capture_output=True, text=True, timeout=600, check=False,
                       env=dict(os.environ, DOCKER_HOST="unix://%s/no-engine.sock" % tmp_path))
    out = " ".join((p.stdout + p.stderr).split())
    assert p.returncode == 2, out[-3000:]
    recap = dict((h, (int(unreachable), int(failed))) for h, unreachable, failed in
                 re.findall(r"(\S+)\s*: ok=\d+ changed=\d+ unreachable=(\d+) failed=(\d+)", out))
    assert sorted(recap) == ["k3d-down", "k3d-here", "nas-down", "nas-here", "vps-down", "vps-here"], out[-3000:]
    assert recap["vps-here"] == (0, 0), out[-3000:]   # the VPS that answers went through every play of it
    summary = out.split("TASK [Hosts that failed in a play above (the others ran)]")[1]
    for host in ("k3d-down", "nas-down", "vps-down"):
        assert recap[host] == (0, 1)   # failed once, by the summary; never dropped as unreachable
        assert re.search(r"fatal: \[%s\]: FAILED! => .*?unreachable: Failed to connect to the host via ssh" % host,
                         summary), summary[-3000:]
    if name != "prove":  # prove's NAS checks say in their rows that Traefik is not there
        assert re.search(r'fatal: \[nas-here\]: FAILED! => .*?NAS - .*?: task "[^"]+" failed: ', summary), summary[-3000:]
    if name == "status":
        assert re.search(r'vps-here +connlimit 100/IP on 80,443 +NOT FIXED', out), out[-3000:]
        assert re.search(r'k3d-down +this host +NOT READ +K3d hosts - load balancers: unreachable: ', out), out[-3000:]
    if name == "diagnose":
        written = json.loads(report.read_text())
        assert [f for f in written["findings"] if f["host"] == "vps-here"], written
        assert sorted(written["not_read"]) == ["k3d-down", "nas-down", "nas-here", "vps-down"], written["not_read"]
    if name == "prove":
        rows = json.loads(report.read_text())["rows"]
        assert [r for r in rows if r["host"] == "vps-here" and r["status"] == "planned"], rows
        assert sorted(r["host"] for r in rows if r["check"] == "host reached") == ["k3d-down", "nas-down", "vps-down"], rows
    if name == "site":
        assert "ufw is not installed: this plan is against ufw as its package installs it" in out, out[-3000:]
