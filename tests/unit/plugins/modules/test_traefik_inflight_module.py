"""traefik_inflight's reading of the container: a container that is not
there and an engine that does not answer are told apart, the engine's own
words carried (an unreachable engine read as "No running container named
traefik" before). A Traefik on the host's network: the host's listening ports read in it,
ping placed past them, no net.* sysctls; unreadable ports refused."""
import os
import shutil

import pytest

from ansible_collections.homelab.edge.plugins.module_utils.traefik.text_edit import EditError
from ansible_collections.homelab.edge.plugins.modules import traefik_inflight as ti


class Module(object):
    def __init__(self, answer):
        self.answer = answer

    def get_bin_path(self, name, required=False):
        return "/usr/bin/docker"

    def run_command(self, argv, **kw):
        return self.answer


def test_a_container_that_is_not_there_is_none():
    docker = ti.Docker(Module((1, "[]\n", "Error: No such object: traefik\n")), "traefik")
    assert docker.inspect("traefik") is None


@pytest.mark.parametrize("err", [
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
    "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock",
])
def test_an_engine_that_does_not_answer_says_so_in_its_own_words(err):
    docker = ti.Docker(Module((1, "", err + "\n")), "traefik")
    with pytest.raises(EditError) as e:
        docker.inspect("traefik")
    assert err in str(e.value) and "nothing was changed" in str(e.value)


def test_a_running_container_is_read():
    docker = ti.Docker(Module((0, '[{"Name": "/traefik"}]', "")), "traefik")
    assert docker.inspect("traefik") == {"Name": "/traefik"}


# ---- issue 53: a Traefik on the host's network, read as the module reads it (the real guide case 45)

HOST_CASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures", "traefik_guides",
                         "45-lukasnellen-host-network-v2-sample-toml")
PROC_NET_TCP = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
                "   0: 0100007F:238A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n")


class Params(object):
    def __init__(self, params):
        self.params = params


class HostDocker(object):
    """The docker CLI as a host-network Traefik started by compose from case 45 shows it."""

    def __init__(self, project, proc_net_tcp):
        self.project, self.proc = project, proc_net_tcp

    def inspect(self, what):
        return {"Name": "/traefik", "State": {"Running": True}, "HostConfig": {"NetworkMode": "host"},
                "Config": {"Image": "traefik", "Cmd": [], "Env": [], "WorkingDir": "",
                           "Labels": {"com.docker.compose.project": "t", "com.docker.compose.service": "traefik",
                                      "com.docker.compose.project.working_dir": self.project,
                                      "com.docker.compose.project.config_files":
                                          os.path.join(self.project, "docker-compose.yml")}},
                "Mounts": [{"Type": "bind", "Source": os.path.join(self.project, "traefik.toml"),
                            "Destination": "/etc/traefik/traefik.toml", "RW": True}]}

    def exec_(self, *argv):
        if argv[0] == "traefik":
            return 0, "Version:      3.6.12\n", ""
        if "/proc/net/tcp" in " ".join(argv):
            return 0, self.proc, ""
        return 0, "/etc/traefik/traefik.toml\n", ""  # which static config candidates exist

    def run(self, argv):
        return 0, "1.44\n", ""

    def running_labels(self):
        return []


def host_opts():
    p = dict((k, v.get("default")) for k, v in ti.ARGUMENT_SPEC.items())
    p.update(container="traefik", sysctls={"net.ipv4.tcp_fin_timeout": 15})
    return Params(p), ti.options(p)


def test_a_host_network_traefik_gets_ping_past_the_hosts_taken_ports_and_no_net_sysctls(tmp_path):
    project = str(tmp_path / "t")
    shutil.copytree(HOST_CASE, project)
    text = open(os.path.join(project, "traefik.toml")).read()
    start = text.index("# Enable ping\n[ping]\n")
    with open(os.path.join(project, "traefik.toml"), "w") as f:
        f.write(text[:start] + text[text.index("####", start):])  # no [ping] of the user's: the role places it
    module, opts = host_opts()
    facts, plan = ti.read_and_plan(module, HostDocker(project, PROC_NET_TCP), opts)
    assert facts["network_mode"] == "host" and plan["network_mode"] == "host"
    assert plan["ping"] == {"entrypoint": "homelab-edge-ping", "address": "127.0.0.1:9097", "by": "homelab.edge"}
    assert 'address = "127.0.0.1:9097"' in plan["static"]["new"] and "sysctls" not in plan["compose"]["new"]
    assert any("tcp_drain role's job" in w for w in plan["warnings"])


def test_a_host_network_traefik_whose_hosts_ports_cannot_be_read_is_refused(tmp_path):
    project = str(tmp_path / "t")
    shutil.copytree(HOST_CASE, project)
    module, opts = host_opts()
    with pytest.raises(EditError) as e:
        ti.read_and_plan(module, HostDocker(project, ""), opts)
    assert "could not be read" in str(e.value) and "nothing was changed" in str(e.value)


# ---- issue 62: a run cut off while Traefik restarts on the changed files

class Recorder(object):
    """What remember and resume need of AnsibleModule."""

    def __init__(self, state_dir, check_mode=False):
        self.params = {"state_dir": str(state_dir), "container": "traefik"}
        self.check_mode, self.warnings = check_mode, []

    def warn(self, text):
        self.warnings.append(text)

    def atomic_move(self, src, dest, unsafe_writes=False):
        os.rename(src, dest)


class Made(object):
    dirs, moved = [], None

    def __init__(self, module):
        self.previous = ti.host.read_record(ti.record_path(module))


def plan(**kw):
    return dict({"restart": False, "recreate": False, "trusted_added": [], "written": {}, "user_values": {},
                 "compose": None}, **kw)


def test_a_run_cut_off_before_its_restart_is_found_and_finished_by_the_next(tmp_path):
    module = Recorder(tmp_path / "state")
    changes = [(str(tmp_path / "traefik.yml"), "mine\n", "mine + ours\n")]
    ti.remember(module, plan(restart=True), changes, Made(module), in_flight=True)
    record = ti.host.read_record(ti.record_path(module))
    assert record["files"][changes[0][0]] == {"original": "mine\n", "written": "mine + ours\n"}  # the undo can run
    # the next run finds nothing left to write, and restarts Traefik as the cut-off run would have
    nxt, result = plan(), {"changed": False}
    ti.resume(module, nxt, result)
    assert nxt["restart"] and result["changed"] and result["restart"]
    assert "traefik.yml" in result["found"] and "restarted" in result["found"] and module.warnings
    ti.remember(module, nxt, [], Made(module))
    assert "in_flight" not in ti.host.read_record(ti.record_path(module))["extra"]
    assert ti.host.read_record(ti.record_path(module))["files"][changes[0][0]]["original"] == "mine\n"
    done = {"changed": False}
    ti.resume(module, plan(), done)
    assert done == {"changed": False}  # a run that ended: nothing found


def test_a_second_change_recorded_in_flight_then_at_its_end_keeps_the_users_original(tmp_path):
    module = Recorder(tmp_path / "state")
    path = str(tmp_path / "traefik.yml")
    ti.remember(module, plan(), [(path, "mine\n", "ours 1\n")], Made(module))
    made = Made(module)  # the second change: both records start from the one before it
    ti.remember(module, plan(), [(path, "ours 1\n", "ours 2\n")], made, in_flight=True)
    ti.remember(module, plan(), [(path, "ours 1\n", "ours 2\n")], made)
    assert ti.host.read_record(ti.record_path(module))["files"][path] == {"original": "mine\n", "written": "ours 2\n"}


class Gone(object):
    """Docker as a run cut off inside compose's re-creation leaves it: no container under Traefik's name."""

    def __init__(self, running=False):
        self.running, self.ran = running, []

    def inspect(self, what):
        return {"State": {"Running": True}} if self.running else None

    def compose(self, plan, *argv, **kw):
        self.ran.append((plan["compose"]["project_dir"],) + argv)
        return 0, "", ""


def test_traefik_left_down_by_a_cut_off_re_creation_is_brought_up_first(tmp_path):
    module = Recorder(tmp_path / "state")
    compose = {"project": "traefik", "project_dir": "/srv/traefik", "files": ["/srv/traefik/compose.yml"],
               "env_files": [], "service": "traefik"}
    ti.remember(module, plan(recreate=True, compose=compose), [], Made(module), in_flight=True)
    docker = Gone()
    ti.recover(module, docker)
    assert docker.ran == [("/srv/traefik", "up", "-d", "--no-deps", "--force-recreate", "traefik")]
    assert "found traefik not running after a run cut off" in module.warnings[0]
    running = Gone(running=True)
    ti.recover(module, running)
    assert running.ran == []  # it runs: nothing to bring up
    ti.remember(module, plan(recreate=True, compose=compose), [], Made(module))
    ended = Gone()
    ti.recover(module, ended)
    assert ended.ran == []  # a run that ended: not this module's to start
