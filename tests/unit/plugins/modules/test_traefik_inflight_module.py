"""traefik_inflight's reading of the container: a container that is not
there and an engine that does not answer are told apart, the engine's own
words carried (an unreachable engine read as "No running container named
traefik" before)."""
import pytest

from ansible_collections.homelab.edge.plugins.module_utils.text_edit import EditError
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
