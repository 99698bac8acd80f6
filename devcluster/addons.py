"""What ``dev-cluster up --with`` can add (a module of its own: the command line names them
without importing the cluster machinery)."""

from __future__ import annotations

ADDONS = ("cert-manager", "prometheus-operator-crds")
"""The real cert-manager (its controller and cainjector, from its Go module, on the host), and
the Prometheus Operator's CRDs (PodMonitor, PrometheusRule): the two things the default
kustomize overlay needs of a cluster."""
