"""Launchers: N ``gymhub serve`` processes on an engine you already run, as URLs.

An episode lives in one server process's memory, so scaling out is more processes, each
addressed directly by :class:`~gymhub.client.EnvPool`; never a load balancer in front of
them (Ray Serve or a plain Kubernetes Service would send an episode's steps to replicas
that do not hold it). The launchers only place, start, restart and list those processes;
the data path stays gymhub's batched HTTP protocol.

* :func:`ray` (:mod:`.ray_launch`): servers as Ray actors, one CPU each, spread over the
  cluster's nodes and restarted by Ray; returns a :class:`RayServers` handle with the URLs.
  Ray is the optional ``gymhub[ray]`` extra and is imported only when this is called.
* :mod:`.k8s`: a StatefulSet with a headless Service (one stable DNS name per server),
  probes, limits, a PodDisruptionBudget, and the image's Dockerfile, as text to apply.
* :mod:`.cli`: ``gymhub launch ray`` and ``gymhub launch k8s``.
"""

from __future__ import annotations

if __name__ != "gymhub." + __name__.rpartition(".")[2]:  # run from the repo root
    raise ImportError(f"import gymhub.{__name__}, not {__name__}: the top-level folders "
                      "are subpackages of gymhub and must not load a second time")

from .ray_launch import RayServers, ray

__all__ = ["RayServers", "ray"]
