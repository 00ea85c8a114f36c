"""What the module tests share: a module's main() run in this process with a
host's commands faked, and its argument spec held against its DOCUMENTATION
(as ansible-doc shows it: test_one_home's reading, doc fragments included)."""
import json
import os
import types

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

from ...test_one_home import module_options
from ..module_utils.test_k3d_serverlb import Client


class Spec(Exception):
    """Raised where main() would build its AnsibleModule: the argument spec it passes."""


def argument_spec(mod, monkeypatch):
    def capture(argument_spec, **kw):
        raise Spec(argument_spec)
    monkeypatch.setattr(mod, "AnsibleModule", capture)
    with pytest.raises(Spec) as e:
        mod.main()
    return e.value.args[0]


def assert_documented_as_specified(mod, monkeypatch):
    """Every option in DOCUMENTATION and in the argument spec alike: names, types, defaults, choices."""
    documented = module_options(mod.__name__.rsplit(".", 1)[-1])
    spec = argument_spec(mod, monkeypatch)
    assert sorted(documented) == sorted(spec)
    for name, option in spec.items():
        doc = documented[name]
        for key, absent in (("type", "str"), ("default", None), ("choices", None), ("elements", None),
                            ("required", False), ("aliases", None)):
            assert doc.get(key, absent) == option.get(key, absent), (name, key)


def run_module(mod, args, monkeypatch, capsys):
    """main() of a module with these arguments: its result, as Ansible would read it."""
    try:  # ansible-core 2.19 and later
        from ansible.module_utils.testing import patch_module_args
    except ImportError:  # 2.16-2.18
        patch_module_args = None
    if patch_module_args:
        with patch_module_args(args), pytest.raises(SystemExit):
            mod.main()
    else:
        monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def run_main(monkeypatch, capsys):
    """run_module, with check and diff mode as keywords."""
    def run(mod, check=False, diff=False, **args):
        return run_module(mod, dict(args, _ansible_check_mode=check, _ansible_diff=diff), monkeypatch, capsys)
    return run


class Commands(object):
    """A host's commands: `answers` maps the first words of an argv (the program's base name first) to
    (rc, out, err) or to a function of the argv; the longest match answers, anything else gets (0, "", "").
    Programs named in `missing` are not installed. Every argv run is kept in `calls`, as words."""

    def __init__(self):
        self.answers, self.missing, self.calls = {}, set(), []

    def bin(self, module, name, required=False, opt_dirs=None):
        if name in self.missing:
            if required:
                module.fail_json(msg="Failed to find required executable %s" % name)
            return None
        return "/usr/bin/" + name

    def run(self, module, argv, **kw):
        words = [os.path.basename(argv[0])] + [str(a) for a in argv[1:]]
        self.calls.append(words)
        for n in range(len(words), 0, -1):
            answer = self.answers.get(tuple(words[:n]))
            if answer is not None:
                return answer(words) if callable(answer) else answer
        return 0, "", ""

    def ran(self, *words):
        """The argvs run that start with these words."""
        return [c for c in self.calls if tuple(c[:len(words)]) == words]


@pytest.fixture
def commands(monkeypatch):
    fake = Commands()

    def get_bin_path(module, *a, **kw):  # a method of AnsibleModule: the module comes first
        return fake.bin(module, *a, **kw)

    def run_command(module, argv, **kw):
        return fake.run(module, argv, **kw)

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    return fake


# the UDP ports module_utils' fake load balancers forward (their values file): the modules' udp_ports for them
K3D_UDP_PORTS = {"53": "dns", "1053": "dns"}


def k3d_engine(monkeypatch, mod, containers):
    """The engine of a k3d host for a module that connects through docker_engine: these containers (module_utils'
    fakes), with or without the Docker SDK installed. `connected` lists each docker_host the module connected to."""
    engine = types.SimpleNamespace(connected=[])
    errors = types.SimpleNamespace(NotFound=KeyError, DockerException=RuntimeError)
    monkeypatch.setattr(mod, "docker", types.SimpleNamespace(errors=errors))
    monkeypatch.setattr(mod, "connect", lambda module, docker_host: engine.connected.append(docker_host)
                        or Client(containers))
    return engine
