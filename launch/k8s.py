"""Kubernetes manifests for N ``gymhub serve`` pods, and the Dockerfile of their image.

An episode lives in one server's memory, so every server must be addressable on its
own: a **StatefulSet** behind a **headless Service** (``clusterIP: None``) gives pod
``i`` the stable name ``NAME-i.NAME.NAMESPACE.svc.cluster.local``, and
:class:`~gymhub.client.EnvPool` is given those N URLs (:func:`server_urls`). Never a
load-balanced Service (it sends an episode's steps to pods that do not hold it) and
never ``sessionAffinity: ClientIP`` (it pins all of one learner's episodes to one pod).

What else the manifests carry, and why:

* **Probes on ``/healthz``.** A startup probe gives a server time to load its tasks;
  readiness turns false as soon as a server drains (``/healthz`` answers 503), so no new
  client resolves it; liveness restarts a hung server, with a failure budget longer than
  the drain so that a draining server is not killed before its in-flight steps finish.
* **``terminationGracePeriodSeconds`` > ``--drain-timeout``**: ``SIGTERM`` starts the
  server's drain; the kubelet's ``SIGKILL`` must come after it.
* **Requests equal to limits** (Guaranteed QoS): such pods are the last evicted under
  node pressure, and an eviction loses every episode the pod holds. One CPU per server
  (the server runs one event loop; more processes, not more cores per process).
* **A PodDisruptionBudget** (``maxUnavailable: 1``): a node drain moves one server at a
  time, so the episodes lost at once are one server's.
* **The bearer token from a Secret**, given as ``GYMHUB_SERVER_TOKEN`` (what
  ``gymhub serve`` reads), never on the command line.
* **Topology spread** over nodes (as Ray's ``SPREAD``), preferred, not required.

The sandbox (``sandbox=``):

* ``"bwrap"`` (default): environments that run agent code (``code-v0``, ``math-v0``'s
  Python tool...) use gymhub's bubblewrap sandbox (:mod:`gymhub.sandbox.bwrap`). Every
  call there makes a new **user namespace** (plus mount, pid, net, ipc, uts, cgroup
  namespaces), **mounts a fresh ``/proc``** inside it, and, when it runs as root, drops
  to host ``nobody`` with ``setpriv`` and puts the call in its own **cgroup** (memory,
  pids and CPU caps for the whole process tree). A default container forbids all three:
  the runtime's default seccomp profile refuses ``unshare``/``clone`` of a user namespace
  without ``CAP_SYS_ADMIN``, the runtime masks paths under ``/proc`` (so the kernel
  refuses a new procfs mount), AppArmor's default profile denies ``mount``, and the
  cgroup filesystem is read-only. So the container runs **privileged, as root**; the
  code the agent writes runs as ``nobody``, with no capabilities, in its own namespaces
  and cgroup. The node must allow unprivileged user namespaces (``user.max_user_namespaces``
  > 0; on Ubuntu 23.10 and later ``kernel.apparmor_restrict_unprivileged_userns=0``).
  Without privileges the sandbox cannot run at all; with them but not as root it runs
  without cgroups (rlimits only, see :mod:`gymhub.sandbox.cgroups`).
* ``"none"``: environments that run no agent code (``echo-v0``, ``sql-v0``, whose SQL
  guard is in-process) get the restricted profile: non-root (uid 10001), no privilege
  escalation, all capabilities dropped, the runtime's default seccomp profile.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from gymhub import __version__
from gymhub.errors import ConfigError

from .yaml_text import dump_all

__all__ = ["SANDBOXES", "dockerfile", "manifests", "render", "server_urls"]

SANDBOXES = ("bwrap", "none")
#: The image's non-root user (Dockerfile ``USER``), used by the ``none`` profile.
IMAGE_UID = 10001
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_LIVENESS_PERIOD_S = 10


def _check_name(what: str, value: str, max_len: int) -> None:
    if len(value) > max_len or not _DNS_LABEL.match(value):
        raise ConfigError(f"{what} {value!r} must be a DNS label: lowercase letters, digits "
                          f"and '-', starting with a letter, at most {max_len} characters")


def server_urls(*, name: str, servers: int, namespace: str = "default",
                port: int = 8000) -> list[str]:
    """The URL of each server pod: what ``EnvPool`` (or ``--env-urls-file``) is given."""
    return [f"http://{name}-{i}.{name}.{namespace}.svc.cluster.local:{port}"
            for i in range(servers)]


def manifests(env_ids: Sequence[str], *, servers: int, image: str, name: str = "gymhub",
              namespace: str = "default", port: int = 8000, token_secret: str | None = None,
              token_key: str = "token", cpu: str = "1", memory: str = "2Gi",
              drain_timeout_s: float = 30.0, sandbox: str = "bwrap",
              serve_args: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The headless Service, StatefulSet and PodDisruptionBudget, as plain dicts.

    Args:
        env_ids: environments every server serves.
        servers: replicas (one server process each).
        image: an image with gymhub installed (see :func:`dockerfile`).
        name: the StatefulSet's and the Service's name (pods are ``NAME-0``...).
        namespace: where they go.
        port: the servers' port.
        token_secret: a Secret holding the bearer token under ``token_key``; without it
            the servers accept every request (only for a private network).
        token_key: the key in ``token_secret``.
        cpu: CPU request and limit per server.
        memory: memory request and limit per server.
        drain_timeout_s: ``gymhub serve --drain-timeout``; the grace period exceeds it.
        sandbox: ``"bwrap"`` or ``"none"`` (see the module docstring).
        serve_args: more ``gymhub serve`` options.

    Raises:
        ConfigError: a name that is not a DNS label, no env ids, fewer than one server,
            or an unknown sandbox.
    """
    _check_name("name", name, 52)  # room for "-NNNN" and the StatefulSet's revision label
    _check_name("namespace", namespace, 63)
    if not env_ids:
        raise ConfigError("name at least one environment to serve")
    if servers < 1:
        raise ConfigError(f"servers must be at least 1, got {servers}")
    if sandbox not in SANDBOXES:
        raise ConfigError(f"sandbox must be one of {', '.join(SANDBOXES)}, got {sandbox!r}")
    labels = {"app.kubernetes.io/name": "gymhub", "app.kubernetes.io/instance": name,
              "app.kubernetes.io/component": "env-server"}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": meta,
        "spec": {"clusterIP": "None", "selector": labels,
                 "ports": [{"name": "http", "port": port, "targetPort": "http"}]},
    }
    statefulset = {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
        "spec": {
            "serviceName": name, "replicas": servers,
            # Servers are independent: start and replace them all at once, not in order.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels},
                         "spec": _pod_spec(env_ids, image, port, token_secret, token_key, cpu,
                                           memory, drain_timeout_s, sandbox, serve_args,
                                           labels)},
        },
    }
    pdb = {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": meta,
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
    }
    return [service, statefulset, pdb]


def _pod_spec(env_ids: Sequence[str], image: str, port: int, token_secret: str | None,
              token_key: str, cpu: str, memory: str, drain_timeout_s: float, sandbox: str,
              serve_args: Sequence[str], labels: dict[str, str]) -> dict[str, Any]:
    drain = math.ceil(drain_timeout_s)
    env: list[dict[str, Any]] = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    if token_secret:
        _check_name("token secret", token_secret, 253)
        env.append({"name": "GYMHUB_SERVER_TOKEN", "valueFrom": {
            "secretKeyRef": {"name": token_secret, "key": token_key}}})
    probe = {"httpGet": {"path": "/healthz", "port": "http"}, "timeoutSeconds": 2}
    container: dict[str, Any] = {
        "name": "server", "image": image,
        "command": ["gymhub"],
        "args": ["serve", *env_ids, "--host", "0.0.0.0", "--port", str(port),
                 "--drain-timeout", f"{drain_timeout_s:g}", *serve_args],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "env": env,
        "resources": {"requests": {"cpu": cpu, "memory": memory},
                      "limits": {"cpu": cpu, "memory": memory}},
        "startupProbe": {**probe, "periodSeconds": 1, "failureThreshold": 300},
        "readinessProbe": {**probe, "periodSeconds": 2, "failureThreshold": 2},
        "livenessProbe": {**probe, "timeoutSeconds": 5, "periodSeconds": _LIVENESS_PERIOD_S,
                          "failureThreshold": drain // _LIVENESS_PERIOD_S + 3},
    }
    pod: dict[str, Any] = {
        "terminationGracePeriodSeconds": drain + 15,
        "automountServiceAccountToken": False,  # the server never calls the API server
        "enableServiceLinks": False,
        "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": labels}}],
        "containers": [container],
    }
    if sandbox == "bwrap":
        container["securityContext"] = {"privileged": True, "runAsUser": 0, "runAsGroup": 0,
                                        "runAsNonRoot": False}
    else:
        pod["securityContext"] = {"runAsNonRoot": True, "runAsUser": IMAGE_UID,
                                  "runAsGroup": IMAGE_UID,
                                  "seccompProfile": {"type": "RuntimeDefault"}}
        container["securityContext"] = {"allowPrivilegeEscalation": False,
                                        "capabilities": {"drop": ["ALL"]}}
    return pod


def render(env_ids: Sequence[str], *, servers: int, image: str, name: str = "gymhub",
           namespace: str = "default", port: int = 8000, token_secret: str | None = None,
           token_key: str = "token", **kwargs: Any) -> str:
    """:func:`manifests` as YAML, headed by comments listing the servers' URLs."""
    docs = manifests(env_ids, servers=servers, image=image, name=name, namespace=namespace,
                     port=port, token_secret=token_secret, token_key=token_key, **kwargs)
    header = [f"gymhub: {servers} server(s) of {' '.join(env_ids)}: headless Service, "
              f"StatefulSet and PodDisruptionBudget {name!r} in namespace {namespace!r}.",
              "EnvPool URLs, one stable DNS name per server (address them directly, never "
              "through a load-balanced Service):",
              *(f"  {u}" for u in server_urls(name=name, servers=servers,
                                               namespace=namespace, port=port))]
    if token_secret:
        header += ["The bearer token comes from a Secret; create it first, e.g.",
                   f"  kubectl -n {namespace} create secret generic {token_secret} "
                   f"--from-literal={token_key}=$(openssl rand -hex 32)"]
    else:
        header += ["No --token-secret: the servers accept every request (private network "
                   "only)."]
    return dump_all(docs, header=header)


def dockerfile(*, package: str | None = None, python: str = "3.11") -> str:
    """The image's Dockerfile: Python slim, bubblewrap, ``gymhub[server]``, a non-root user.

    ``package`` is what ``pip install`` is given (default: this gymhub version with the
    ``server`` extra); a local wheel (``dist/gymhub-....whl``) is copied in first and
    installed with the ``server`` extra. Add your environments' packages after it.
    """
    spec, copy = package or f"gymhub[server]=={__version__}", ""
    if spec.endswith(".whl"):
        name = spec.rsplit("/", 1)[-1]
        copy, spec = f"COPY {spec} /tmp/{name}\n", f"/tmp/{name}[server]"
    return f"""\
# syntax=docker/dockerfile:1
# The image `gymhub launch k8s` manifests run. Build: docker build -t IMAGE .
FROM python:{python}-slim

# bubblewrap is the sandbox of environments that run agent code (code-v0, math-v0's
# Python tool); setpriv (util-linux) lets a root server run it as host nobody. The pod
# must allow user namespaces and a fresh /proc mount: `--sandbox bwrap` manifests run it
# privileged as root (see gymhub.launch.k8s). Environments without agent code need
# neither, and run as the non-root user below (`--sandbox none`).
RUN apt-get update \\
 && apt-get install -y --no-install-recommends bubblewrap util-linux \\
 && rm -rf /var/lib/apt/lists/*

{copy}RUN pip install --no-cache-dir "{spec}"

RUN useradd --uid {IMAGE_UID} --user-group --create-home gymhub
USER {IMAGE_UID}
WORKDIR /home/gymhub
EXPOSE 8000
ENTRYPOINT ["gymhub"]
CMD ["serve", "echo-v0", "--host", "0.0.0.0", "--port", "8000"]
"""
