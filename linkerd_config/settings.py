"""One typed settings object, read from flags and environment once, validated once.

Precedence: a flag, else its environment variable, else the default. A bad value is an error
that names the flag, the variable and the value, before anything starts.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from linkerd_config.kube.labels import LabelSelector
from linkerd_config.logs import LOG_FORMATS

T = TypeVar("T")


class SettingsError(ValueError):
    """A flag or environment variable has a value we cannot use."""


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected true or false")


def _whole(text: str, what: str) -> int:
    """An integer, or a ValueError that says what was expected (not Python's wording)."""
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{what} must be a whole number") from None


def _https_origin(text: str) -> str:
    """``https://host:port`` (or empty): where a webhook is reached, no path."""
    if not text:
        return ""
    scheme, sep, rest = text.partition("://")
    host, _, port = rest.rpartition(":")
    if scheme != "https" or not sep or not host or "/" in rest or not port.isdigit():
        raise ValueError("expected https://host:port, with no path")
    if not 0 < int(port) < 65536:
        raise ValueError("the port must be 1-65535")
    return text


def _address(text: str) -> tuple[str, int]:
    """``host:port`` or ``:port`` (all interfaces); ``0`` or port 0 means disabled, as in
    controller-runtime."""
    if text.strip() == "0":
        return "", 0
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError("expected host:port, :port, or 0 to disable")
    number = _whole(port, "the port")
    if not 0 <= number <= 65535:
        raise ValueError("the port must be 0-65535")
    return host or "0.0.0.0", number


def _positive_int(text: str) -> int:
    value = _whole(text, "it")
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text.strip().removesuffix("s"))
    except ValueError:
        raise ValueError("expected a number of seconds, e.g. 15 or 15s") from None
    if not value > 0:
        raise ValueError("must be a positive number of seconds")
    return value


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return text

    return parse


@dataclass(frozen=True)
class _Opt:
    flag: str
    env: str
    default: str | None
    parse: Callable[[str], Any]
    help: str


def _opt(flag: str, env: str, default: str | None, parse: Callable[[str], Any], help: str) -> Any:
    return field(metadata={"opt": _Opt(flag, env, default, parse, help)})


@dataclass(frozen=True)
class Settings:
    """Everything ``linkerd-config run`` can be told."""

    kubeconfig: str | None = _opt(
        "--kubeconfig", "KUBECONFIG", None, str,
        "kubeconfig file; unset: ~/.kube/config if present, else the pod's service account",
    )  # fmt: skip
    context: str | None = _opt(
        "--context", "KUBECONTEXT", None, str,
        "the kubeconfig context to use; unset: its current-context",
    )  # fmt: skip
    kube_api_content_type: str = _opt(
        "--kube-api-content-type", "KUBE_API_CONTENT_TYPE", "protobuf", _choice("protobuf", "json"),
        "how the informers ask for built-in types (custom resources and writes are JSON "
        "either way); protobuf falls back to JSON, with a warning, where a server or proxy "
        "refuses it",
    )  # fmt: skip
    watch_list: bool = _opt(
        "--watch-list", "WATCH_LIST", "false", _bool,
        "fill the caches from streaming lists (a watch that starts with every object, "
        "client-go's WatchListClient) instead of paged LISTs (client-go's default, and "
        "what a server that refuses streaming lists gets)",
    )  # fmt: skip
    namespace: str = _opt(
        "--namespace", "POD_NAMESPACE", "linkerd", str,
        "namespace of the controller's own Lease and Events",
    )  # fmt: skip
    config_namespace: str = _opt(
        "--config-namespace", "LINKERD_NAMESPACE", "linkerd", str,
        "namespace of the Linkerd control plane whose ConfigMaps this controller manages",
    )  # fmt: skip
    metrics_address: tuple[str, int] = _opt(
        "--metrics-bind-address", "METRICS_BIND_ADDRESS", ":8080", _address,
        "where /metrics is served (port 0 disables it); with --metrics-secure, kubebuilder "
        "projects use :8443 (pass --metrics-bind-address=:8443)",
    )  # fmt: skip
    metrics_secure: bool = _opt(
        "--metrics-secure", "METRICS_SECURE", "false", _bool,
        "serve /metrics over HTTPS, only to callers whose bearer token passes a TokenReview "
        "(else 401) and whom RBAC allows `get` on the non-resource URL /metrics (else 403); "
        "the controller then needs `create` on tokenreviews and subjectaccessreviews",
    )  # fmt: skip
    metrics_cert_dir: str = _opt(
        "--metrics-cert-dir", "METRICS_CERT_DIR", "", str,
        "with --metrics-secure: folder with tls.crt and tls.key, reloaded on change; empty: "
        "a self-signed certificate made in memory at start (scrapers skip verification)",
    )  # fmt: skip
    health_address: tuple[str, int] = _opt(
        "--health-probe-bind-address", "HEALTH_PROBE_BIND_ADDRESS", ":8081", _address,
        "where /healthz and /readyz are served",
    )  # fmt: skip
    enable_webhooks: bool = _opt(
        "--enable-webhooks", "ENABLE_WEBHOOKS", "true", _bool,
        "serve the admission webhooks (false for a local run the API server cannot reach)",
    )  # fmt: skip
    webhook_address: tuple[str, int] = _opt(
        "--webhook-bind-address", "WEBHOOK_BIND_ADDRESS", ":9443", _address,
        "where the HTTPS admission webhooks listen",
    )  # fmt: skip
    serve_conversion: str = _opt(
        "--serve-conversion", "SERVE_CONVERSION", "auto", _choice("auto", "true", "false"),
        "with the webhooks off, serve the CRD's conversion webhook on --webhook-bind-address "
        "with a certificate made at start, and point the CRD (make install's) at it, so "
        "v1alpha1 objects work in a local run; auto: when run from a kubeconfig, not in a pod. "
        "A CRD converted by the in-cluster Service is left alone",
    )  # fmt: skip
    conversion_url: str = _opt(
        "--conversion-url", "CONVERSION_URL", "", _https_origin,
        "the https://host:port at which the API server reaches this process's conversion "
        "webhook (a kind node: the host's address on its network); empty: "
        "https://127.0.0.1:<the webhook port>",
    )  # fmt: skip
    webhook_cert_dir: str = _opt(
        "--webhook-cert-dir", "WEBHOOK_CERT_DIR", "/tmp/k8s-webhook-server/serving-certs", str,
        "folder with tls.crt and tls.key (cert-manager writes them); reloaded on change",
    )  # fmt: skip
    workers: int = _opt(
        "--workers", "WORKERS", "2", _positive_int, "concurrent reconciles per controller"
    )  # fmt: skip
    max_restarts_per_pass: int = _opt(
        "--max-restarts-per-pass", "MAX_RESTARTS_PER_PASS", "10", _positive_int,
        "at most this many workloads restarted per rollout pass",
    )  # fmt: skip
    restart_interval: float = _opt(
        "--restart-interval", "RESTART_INTERVAL", "5s", _seconds,
        "at least this long between one pass's last restart and the next pass",
    )  # fmt: skip
    injector_wait: float = _opt(
        "--injector-wait", "INJECTOR_WAIT", "60s", _seconds,
        "when the injector's version cannot be confirmed by dry-run, wait this long after "
        "writing the config before restarting",
    )  # fmt: skip
    restart_namespaces: LabelSelector = _opt(  # noqa: RUF009 (frozen, hashable)
        "--restart-namespace-selector", "RESTART_NAMESPACE_SELECTOR", "", LabelSelector.parse,
        "restart only in namespaces this label selector selects (kubectl's -l syntax; each "
        "namespace carries kubernetes.io/metadata.name=<its name>); pods elsewhere are "
        "excluded, never restarted. Empty: every namespace. RBAC must grant the restart in "
        "the namespaces selected (manifests/components/restart-namespaces)",
    )  # fmt: skip
    leader_elect: bool = _opt(
        "--leader-elect", "LEADER_ELECT", "true", _bool,
        "elect a leader on a Lease so only one replica writes",
    )  # fmt: skip
    lease_name: str = _opt(
        "--leader-election-id", "LEADER_ELECTION_ID", "linkerd-config-leader", str,
        "name of the Lease",
    )  # fmt: skip
    lease_duration: float = _opt(
        "--leader-elect-lease-duration", "LEADER_ELECT_LEASE_DURATION", "15s", _seconds,
        "how long followers wait after the last renewal before taking over",
    )  # fmt: skip
    renew_deadline: float = _opt(
        "--leader-elect-renew-deadline", "LEADER_ELECT_RENEW_DEADLINE", "10s", _seconds,
        "how long the leader keeps trying to renew before it stops writing",
    )  # fmt: skip
    retry_period: float = _opt(
        "--leader-elect-retry-period", "LEADER_ELECT_RETRY_PERIOD", "2s", _seconds,
        "how often to try to acquire or renew",
    )  # fmt: skip
    log_level: str = _opt(
        "--log-level", "LOG_LEVEL", "info", _choice("debug", "info", "warning", "error"),
        "log verbosity",
    )  # fmt: skip
    log_format: str = _opt(
        "--log-format", "LOG_FORMAT", "auto", _choice(*LOG_FORMATS),
        "auto: JSON unless stderr is a terminal",
    )  # fmt: skip
    identity: str | None = _opt(
        "--identity", "POD_NAME", None, str,
        "this replica's Lease holder identity (default: host name plus a random suffix)",
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.metrics_cert_dir and not self.metrics_secure:
            raise SettingsError(
                f"--metrics-cert-dir = {self.metrics_cert_dir!r} is used only with "
                "--metrics-secure; set both, or neither (plain HTTP)"
            )
        if self.leader_elect and not (
            self.retry_period < self.renew_deadline < self.lease_duration
        ):
            raise SettingsError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{self.retry_period}s, {self.renew_deadline}s, {self.lease_duration}s"
            )


def add_arguments(parser: argparse.ArgumentParser, only: Collection[str] | None = None) -> None:
    """The flags of ``Settings``' fields (of those named in ``only``, when given)."""
    for f in fields(Settings):
        if only is not None and f.name not in only:
            continue
        opt: _Opt = f.metadata["opt"]
        default = f"default {opt.default}" if opt.default is not None else "no default"
        # A switch may stand alone (``--leader-elect`` means true), as in controller-runtime.
        switch = {"nargs": "?", "const": "true"} if opt.parse is _bool else {}
        parser.add_argument(
            opt.flag,
            dest=f.name,
            default=None,
            help=f"{opt.help} (env {opt.env}; {default})",
            **switch,  # type: ignore[arg-type]
        )


def from_namespace(
    args: argparse.Namespace,
    env: Mapping[str, str] | None = None,
    only: Collection[str] | None = None,
) -> Settings:
    """Flags, else environment, else defaults; a field not in ``only`` (when given) takes
    its default, whatever the environment says (a command that has no such flag)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for f in fields(Settings):
        opt: _Opt = f.metadata["opt"]
        raw, source = getattr(args, f.name, None), opt.flag
        if only is not None and f.name not in only:
            raw = None
        elif raw is None and env.get(opt.env):
            raw, source = env[opt.env], f"${opt.env}"
        if raw is None:
            raw, source = opt.default, "default"
        if raw is None:
            values[f.name] = None
            continue
        try:
            values[f.name] = opt.parse(raw)
        except ValueError as exc:
            where = opt.flag if source == opt.flag else f"{opt.flag} (from {source})"
            raise SettingsError(f"{where} = {raw!r}: {exc}") from exc
    return Settings(**values)


def parse(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_namespace(parser.parse_args(argv), env)
