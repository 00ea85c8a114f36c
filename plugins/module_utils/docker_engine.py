# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Docker SDK for the modules that talk to the engine of the k3d host:
imported once here, and one way to connect with one kind of error."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import traceback

from ansible.module_utils.basic import missing_required_lib

try:
    import docker
    HAS_DOCKER = True
    DOCKER_IMPORT_ERROR = None
except ImportError:
    docker = None
    HAS_DOCKER = False
    DOCKER_IMPORT_ERROR = traceback.format_exc()


def connect(module, docker_host=None):
    """A pinged DockerClient, or the task fails with what to do."""
    if not HAS_DOCKER:
        module.fail_json(msg=missing_required_lib("docker"), exception=DOCKER_IMPORT_ERROR)
    try:
        client = docker.DockerClient(base_url=docker_host) if docker_host else docker.from_env()
        client.ping()
        return client
    except docker.errors.DockerException as e:
        hint = (" (permission denied: run as root with become: true, or as a member of the docker group)"
                if "ermission denied" in str(e) else "")
        module.fail_json(msg="cannot reach the Docker engine: %s%s" % (e, hint), exception=traceback.format_exc())
