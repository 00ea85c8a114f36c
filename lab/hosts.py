#!/usr/bin/env python
"""Lab hosts, reached the way real ones are: over SSH as the user `edge`,
with sudo (password edge-lab-sudo, a lab secret) and the lab's key (made
once, see key()). Each host is a privileged container (lab/lab.sh
privileged) from homelab-edge/host:lab, so ufw, nftables, WireGuard and its
own Docker engine act in its own network namespace and nowhere else.

  lab/hosts.py up NAME --network NET --ssh-port PORT [--sshd-port PORT] [--docker] [--load IMAGE]... [--nginx-conf FILE]
                 [--systemd [--ssh-socket]] [--privileged-runtime]
  lab/hosts.py client NAME... --network NET    clients (each its own address) on NET
  lab/hosts.py down NAME...                    containers, their volumes, emptied lab networks
  lab/hosts.py key                             the lab's SSH key

--ssh-port is where this machine reaches the host's sshd (on 127.0.0.1);
--sshd-port the port sshd listens on inside the host (22 by default; many
VPSes use another). --docker starts the host's own Docker engine; --load copies images from this
engine into it (there is no registry), but for an upstream image the lab left out (lab/upstream_images.py). --nginx-conf is the host's own
nginx.conf (the VPS's stream proxy). --systemd boots the host with systemd as
PID 1 (homelab-edge/host-systemd:lab: ssh.service, ufw.service; `docker
restart` is its restart), and --ssh-socket then gives it Ubuntu's socket-
activated sshd (ssh.socket) instead of ssh.service. On a systemd host
--nginx-conf runs nginx as nginx.service; with --docker it runs Docker Engine 29 as users install it today
(lab/lab.sh engine29: dockerd, containerd 2 and runc 1.3 with the units the
projects ship, started by systemd, so its containers get systemd's limits).
--privileged-runtime (a host without systemd, with --docker): where the host's root lacks CAP_SYS_RESOURCE
(this machine's root does, and so do its containers), Debian's runc 1.1 refuses privileged containers (k3d's
nodes); the lab's runtime wrapper is registered as the host engine's default, as lab/lab.sh privileged does here.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import upstream_images  # noqa: E402

CACHE = os.environ.get("HOMELAB_EDGE_CACHE", "/var/cache/homelab-edge")
KEY = os.path.join(CACHE, "ssh", "id_ed25519")
HOST_IMAGE = "homelab-edge/host:lab"
SYSTEMD_IMAGE = "homelab-edge/host-systemd:lab"
CLIENT_IMAGE = "homelab-edge/client:lab"
# Engine 29 in a systemd host: lab binary (lab/lab.sh engine29) -> where the host has it
ENGINE29 = {"dockerd29": "/usr/local/bin/dockerd", "docker-proxy29": "/usr/local/bin/docker-proxy",
            "containerd29": "/usr/local/bin/containerd", "containerd-shim-runc-v2-29": "/usr/local/bin/containerd-shim-runc-v2",
            "runc29": "/usr/local/bin/runc"}
USER, SUDO_PASSWORD = "edge", "edge-lab-sudo"
LABEL = "homelab.edge.lab"
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
               "-o", "ConnectTimeout=3", "-o", "LogLevel=ERROR"]


def sh(*argv, check=True, text=True, **kw):
    return subprocess.run(list(argv), capture_output=True, text=text, check=check, **kw)


def key():
    if not os.path.exists(KEY):
        os.makedirs(os.path.dirname(KEY), exist_ok=True)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "homelab-edge-lab", "-f", KEY)
    return KEY


def inventory_vars(ssh_port):
    """What an Ansible inventory needs to reach a lab host like a real one."""
    return {"ansible_host": "127.0.0.1", "ansible_port": ssh_port, "ansible_user": USER,
            "ansible_ssh_private_key_file": key(), "ansible_become_password": SUDO_PASSWORD,
            "ansible_ssh_common_args": " ".join(SSH_OPTIONS[:6]), "ansible_python_interpreter": "/usr/bin/python3"}


def network(name, subnet=None):
    if sh("docker", "network", "inspect", name, check=False).returncode:
        sh("docker", "network", "create", "--label", LABEL, *(["--subnet", subnet] if subnet else []), name)


def address(name, net):
    return json.loads(sh("docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", name).stdout)[net]["IPAddress"]


def ssh(port, command, check=True):
    return sh("ssh", "-i", key(), "-p", str(port), *SSH_OPTIONS, "%s@127.0.0.1" % USER, command, check=check)


def wait(what, test, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if test():
            return
        time.sleep(0.5)
    raise RuntimeError("%s: not ready after %ss" % (what, timeout))


def load_images(name, images):
    """Copy images into the host's own engine (shared layers go once). An upstream image the lab left out
    (lab/upstream_images.py: no source, no registry) is not copied; the parts that need it are not run."""
    gone = set(upstream_images.image(n) for n in upstream_images.missing())
    images = [i for i in images if i not in gone]
    save = subprocess.Popen(["docker", "save"] + list(images), stdout=subprocess.PIPE)
    sh("docker", "exec", "-i", name, "docker", "load", stdin=save.stdout)
    if save.wait():
        raise RuntimeError("docker save %s failed" % " ".join(images))


def up(name, net, ssh_port, docker=False, load=(), nginx_conf=None, subnet=None, sshd_port=22, systemd=False,
       ssh_socket=False, privileged_runtime=False):
    network(net, subnet)
    argv = ["docker", "run", "-d", "--name", name, "--hostname", name, "--network", net, "--privileged",
            "--label", LABEL, "-p", "127.0.0.1:%d:%d" % (ssh_port, sshd_port), "-e", "SSHD_PORT=%d" % sshd_port,
            "-v", "%s.pub:/lab/authorized_keys:ro" % key()]
    if systemd:
        argv += ["--tmpfs", "/run", "--tmpfs", "/run/lock", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
                 "--cgroupns=host", "-e", "container=docker"]
        if docker:  # overlayfs cannot stack on the container's own overlay: the engine's data on volumes
            argv += ["-v", "%s-docker:/var/lib/docker" % name, "-v", "%s-containerd:/var/lib/containerd" % name]
        sh(*(argv + [SYSTEMD_IMAGE]))
        wait("systemd of %s" % name, lambda: sh("docker", "exec", name, "systemctl", "is-system-running",
                                                check=False).stdout.strip() in ("running", "degraded"), timeout=90)
        if ssh_socket:  # Ubuntu 24.04's way: systemd listens, each connection starts an sshd
            sh("docker", "exec", name, "sh", "-c", "systemctl disable --now ssh.service >/dev/null 2>&1; "
               "mkdir -p /etc/systemd/system/ssh.socket.d && printf '[Socket]\\nListenStream=\\nListenStream=%d\\n' "
               "> /etc/systemd/system/ssh.socket.d/port.conf && systemctl daemon-reload && "
               "systemctl enable --now ssh.socket >/dev/null 2>&1" % sshd_port)
        wait("sshd of %s" % name, lambda: ssh(ssh_port, "true", check=False).returncode == 0)
        if nginx_conf:  # the admin's own file, nginx run by systemd as Debian's package does
            sh("docker", "cp", os.path.abspath(nginx_conf), "%s:/etc/nginx/nginx.conf" % name)
            sh("docker", "exec", name, "sh", "-c", "systemctl enable nginx.service >/dev/null 2>&1; "
               "systemctl restart nginx.service")
        if docker:
            engine29(name)
            if load:
                load_images(name, load)
        return name
    if nginx_conf:
        argv += ["-e", "HOST_NGINX=yes"]
    if docker:
        argv += ["-e", "HOST_DOCKER=yes", "-v", "%s-docker:/var/lib/docker" % name]
    sh(*(argv + [HOST_IMAGE]))
    wait("sshd of %s" % name, lambda: ssh(ssh_port, "true", check=False).returncode == 0)
    if nginx_conf:  # the admin's own file, in place (not a bind mount: a real one can be replaced)
        sh("docker", "cp", os.path.abspath(nginx_conf), "%s:/etc/nginx/nginx.conf" % name)
        sh("docker", "exec", name, "sh", "-c", "nginx -s reload 2>/dev/null || nginx")
    if docker:
        wait("docker in %s" % name, lambda: sh("docker", "exec", name, "docker", "info", check=False).returncode == 0)
        if privileged_runtime:
            runtime_wrapper(name)
        if load:
            load_images(name, load)
    return name


def engine29(name):
    """Docker Engine 29 installed and started as its packages do: binaries, units, systemctl enable --now."""
    for binary, path in ENGINE29.items():
        src = os.path.realpath(os.path.join(CACHE, "bin", binary))
        if not os.path.exists(src):
            raise RuntimeError("no %s: run lab/lab.sh engine29 (make setup does)" % binary)
        sh("docker", "cp", src, "%s:%s" % (name, path))
    for unit in ("docker.service", "docker.socket", "containerd.service"):
        sh("docker", "cp", os.path.join(CACHE, "engine29-units", unit), "%s:/etc/systemd/system/%s" % (name, unit))
    sh("docker", "exec", name, "sh", "-c", "systemctl daemon-reload && systemctl enable --now containerd.service "
       "docker.socket docker.service >/dev/null 2>&1")
    wait("Docker Engine 29 in %s" % name,
         lambda: sh("docker", "exec", name, "docker", "info", check=False).returncode == 0, timeout=90)


CAP_SYS_RESOURCE = 24
WRAPPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine", "runc-drop-sys-resource")
WRAPPER_NAME = "homelab-edge-runc"


def runtime_wrapper(name):
    """The lab's OCI runtime wrapper as the default runtime of the host's engine (daemon.json merged, SIGHUP:
    nothing restarts), where the host's root lacks CAP_SYS_RESOURCE."""
    bounding = sh("docker", "exec", name, "awk", "/^CapBnd/ {print $2}", "/proc/self/status").stdout.strip()
    if int(bounding, 16) & (1 << CAP_SYS_RESOURCE):
        return
    path = "/usr/local/libexec/%s" % WRAPPER_NAME
    sh("docker", "exec", name, "mkdir", "-p", "/usr/local/libexec", "/etc/docker")
    sh("docker", "cp", WRAPPER, "%s:%s" % (name, path))
    conf = json.loads(sh("docker", "exec", name, "sh", "-c", "cat /etc/docker/daemon.json 2>/dev/null || echo {}").stdout)
    conf.setdefault("runtimes", {})[WRAPPER_NAME] = {"path": path}
    conf["default-runtime"] = WRAPPER_NAME
    sh("docker", "exec", "-i", name, "sh", "-c", "cat > /etc/docker/daemon.json && pkill -HUP -x dockerd",
       input=json.dumps(conf, indent=2))
    wait("the runtime wrapper in %s" % name, lambda: sh("docker", "exec", name, "docker", "info", "-f",
                                                         "{{.DefaultRuntime}}", check=False).stdout.strip() == WRAPPER_NAME)


def client(name, net):
    network(net)
    sh("docker", "run", "-d", "--name", name, "--hostname", name, "--network", net, "--label", LABEL,
       CLIENT_IMAGE, "sleep", "infinity")
    return name


def down(*names):
    """The hosts, their volumes, and those of their lab networks no other container is on (not every
    empty lab network: another scenario may have just made one for the host it is about to start)."""
    nets = set()
    for name in names:
        out = sh("docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", name, check=False)
        if out.returncode == 0:
            nets.update(json.loads(out.stdout or "{}") or {})
        sh("docker", "rm", "-f", "-v", name, check=False)
        sh("docker", "volume", "rm", "%s-docker" % name, "%s-containerd" % name, check=False)
    labelled = set(sh("docker", "network", "ls", "--format", "{{.Name}}", "--filter", "label=%s" % LABEL).stdout.split())
    for net in sorted(nets & labelled):
        sh("docker", "network", "rm", net, check=False)  # only the emptied ones go


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["up", "client", "down", "key"])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--network")
    ap.add_argument("--ssh-port", type=int)
    ap.add_argument("--sshd-port", type=int, default=22)
    ap.add_argument("--docker", action="store_true")
    ap.add_argument("--load", action="append", default=[])
    ap.add_argument("--nginx-conf")
    ap.add_argument("--systemd", action="store_true")
    ap.add_argument("--ssh-socket", action="store_true")
    ap.add_argument("--privileged-runtime", action="store_true")
    a = ap.parse_args(argv)
    if a.action == "key":
        print(key())
    elif a.action == "up":
        print(up(a.names[0], a.network, a.ssh_port, a.docker, a.load, a.nginx_conf, sshd_port=a.sshd_port,
                 systemd=a.systemd, ssh_socket=a.ssh_socket, privileged_runtime=a.privileged_runtime))
    elif a.action == "client":
        for n in a.names:
            print(client(n, a.network))
    else:
        down(*a.names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
