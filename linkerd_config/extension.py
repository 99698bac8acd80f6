"""``linkerd-config`` as a Linkerd CLI extension (issue 38).

Linkerd's CLI runs ``linkerd <x> ...`` as ``linkerd-<x> ...`` when ``<x>`` is none of its own
commands (``cli/main.go``), so ``linkerd config status`` is ``linkerd-config status``. And
``linkerd check`` runs ``linkerd-<x> check --output=json`` (with its ``--kubeconfig``,
``--context``, ``--linkerd-namespace``, ``--wait`` ... flags) for every ``linkerd-*`` on PATH
whose ``_extension-metadata`` answers ``{"name": "linkerd-<x>", "checks": "always"}``
(``cli/cmd/check_extensions.go``), and reads Linkerd's ``CheckOutput`` JSON
(``pkg/healthcheck/healthcheck_output.go``): categories of checks, each ``success``,
``warning`` or ``error``, with an error and a hint when not a success.

Our category is ``linkerd-config-controller``: ``linkerd-config`` is already one of Linkerd's
own (its checks of the ``linkerd-config`` ConfigMap). The checks: the CRD and the versions it
serves, one leader, the controller's pods ready, the webhooks registered with a certificate
that is valid now and answering (a server-side dry run through them), and for each
LinkerdConfig what ``linkerd-config status`` finds: its ConfigMaps in sync, no halted or
rolled-back rollout (errors), its data plane on the desired proxy and bundle, no trust-anchor
removal held, Ready (warnings while it gets there by itself).

The decisions (``checks``) are pure, over what ``observe`` read.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import json
import sys
from dataclasses import dataclass, field
from typing import TextIO

import aiohttp

from linkerd_config.inspection import CommandError, read_cluster
from linkerd_config.kube import x509_reader
from linkerd_config.kube.client import MERGE_PATCH, ApiError, KubeClient, Timeouts
from linkerd_config.kube.conditions import Progress
from linkerd_config.kube.kubeconfig import AccessError, load_access
from linkerd_config.kube.resource import (
    CRDS,
    LEASES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    PODS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Json,
    unix_time,
)
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.conversion import SERVED_VERSIONS, STORAGE_VERSION
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS
from linkerd_config.linkerd.status import readiness
from linkerd_config.linkerd.status.plan import ConfigStatus, status
from linkerd_config.settings import Settings

NAME = "linkerd-config"
CATEGORY = "linkerd-config-controller"
"""Not ``linkerd-config``: that is one of Linkerd's own categories."""
LEASE = "linkerd-config-leader"
WEBHOOK_CONFIGURATIONS = ("linkerd-config-mutating", "linkerd-config-validating")
CONTROLLER_SELECTOR = "app.kubernetes.io/name=linkerd-config"
HINT = "docs/operations.md, When something is wrong (linkerd-config status says more)"
READ_TIMEOUT = 60.0
SUCCESS, WARNING, ERROR = "success", "warning", "error"
EXIT_FAILED = 1


def metadata_command(stdout: TextIO | None = None) -> int:
    """``_extension-metadata``: at once, without reading any cluster."""
    out = stdout or sys.stdout
    out.write(json.dumps({"name": NAME, "checks": "always"}) + "\n")
    return 0


@dataclass(frozen=True)
class Check:
    """One check as Linkerd's ``CheckOutput`` carries it."""

    description: str
    error: str = ""
    warning: bool = False
    hint: str = HINT

    @property
    def result(self) -> str:
        if not self.error:
            return SUCCESS
        return WARNING if self.warning else ERROR

    def as_json(self) -> Json:
        found: Json = {"description": self.description, "result": self.result}
        if self.error:
            found.update({"error": self.error, "hint": self.hint})
        return found


@dataclass(frozen=True)
class CheckedCluster:
    """What ``check`` read of the cluster; a field is None where reading it was refused."""

    now: datetime.datetime
    crd: Json | None
    lease: Json | None
    pods: list[Json] | None
    webhooks: list[Json] | None
    """Our Mutating- and ValidatingWebhookConfigurations (those that exist)."""
    dry_run: dict[str, str] = field(default_factory=dict)
    """LinkerdConfig -> what a server-side dry run through the webhooks said ("" admitted)."""
    reports: list[ConfigStatus] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)
    """What could not be read, and why."""


def checks(seen: CheckedCluster) -> list[Check]:
    """Every check, decided from what was read."""
    found = [_crd(seen), _leader(seen), _pods(seen), *_webhooks(seen)]
    for report in seen.reports:
        found.extend(_linkerdconfig(report))
    return found


def _crd(seen: CheckedCluster) -> Check:
    what = f"the LinkerdConfig CRD serves {', '.join(SERVED_VERSIONS)}"
    if seen.crd is None:
        return Check(what, seen.unreadable.get("crd", "the CRD linkerdconfigs is not installed"))
    versions = {str(v.get("name")): v for v in seen.crd.get("spec", {}).get("versions") or ()}
    missing = [v for v in SERVED_VERSIONS if not (versions.get(v) or {}).get("served")]
    if missing:
        return Check(what, f"it does not serve {', '.join(missing)}: apply manifests/crd")
    if not (versions.get(STORAGE_VERSION) or {}).get("storage"):
        return Check(what, f"it does not store {STORAGE_VERSION}: apply manifests/crd")
    conversion = seen.crd.get("spec", {}).get("conversion") or {}
    if conversion.get("strategy") == "Webhook":
        client = (conversion.get("webhook") or {}).get("clientConfig") or {}
        problem = _ca_problem(client.get("caBundle"), seen.now)
        if problem:
            return Check(what, f"its conversion webhook's caBundle: {problem}")
    return Check(what)


def _leader(seen: CheckedCluster) -> Check:
    what = "the controller has a leader"
    lease = seen.lease
    if lease is None:
        said = seen.unreadable.get("lease", f"no Lease {LEASE}: no replica has ever led")
        return Check(what, said)
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    renewed = unix_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    if not holder:
        return Check(what, f"Lease {LEASE} has no holder: no replica leads, nothing is reconciled")
    if renewed is None or not isinstance(duration, int):
        return Check(what, f"Lease {LEASE} held by {holder} says no renewal time or duration")
    late = seen.now.timestamp() - renewed - duration
    if late > 0:
        return Check(
            what,
            f"Lease {LEASE} held by {holder} expired {late:.0f}s ago: the leader is gone and "
            "no other replica took over",
        )
    return Check(f"{what} ({holder})")


def _pods(seen: CheckedCluster) -> Check:
    what = "the controller's pods are ready"
    if seen.pods is None:
        return Check(what, seen.unreadable.get("pods", "cannot list pods"), warning=True)
    if not seen.pods:
        return Check(
            what,
            f"no pod labelled {CONTROLLER_SELECTOR}: the controller runs outside the cluster "
            "(make run), or is not installed",
            warning=True,
        )
    unready = [
        str(p["metadata"]["name"])
        for p in seen.pods
        if not any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or ()
        )
    ]
    if unready:
        return Check(what, f"not ready: {', '.join(sorted(unready))}", warning=True)
    return Check(what)


def _webhooks(seen: CheckedCluster) -> list[Check]:
    what = "the webhooks are registered with a valid caBundle"
    if seen.webhooks is None:
        return [Check(what, seen.unreadable.get("webhooks", "cannot read them"), warning=True)]
    if not seen.webhooks:
        return [
            Check(
                what,
                "none registered: the controller runs with ENABLE_WEBHOOKS=false, so the API "
                "server neither defaults nor validates LinkerdConfigs (the controller still "
                "validates before it writes)",
                warning=True,
            )
        ]
    problems = []
    for configuration in seen.webhooks:
        for hook in configuration.get("webhooks") or ():
            problem = _ca_problem((hook.get("clientConfig") or {}).get("caBundle"), seen.now)
            if problem:
                problems.append(f"{hook.get('name')}: {problem}")
    found = [Check(what, "; ".join(problems))]
    refused = {name: said for name, said in seen.dry_run.items() if said}
    answering = "the webhooks answer the API server (a dry run through them)"
    if refused:
        said = "; ".join(f"LinkerdConfig {name}: {why}" for name, why in sorted(refused.items()))
        found.append(Check(answering, said))
    elif seen.dry_run:
        found.append(Check(answering))
    return found


def _linkerdconfig(report: ConfigStatus) -> list[Check]:
    name = f"LinkerdConfig {report.name}"
    if report.problem is not None:
        return [Check(f"{name}: its ConfigMaps in sync", report.problem.message)]
    found = []
    drifted = set(report.drifted) - set(report.missing)
    said = ""
    if report.missing:
        said = f"missing: {', '.join(report.missing)}"
    elif drifted:
        said = f"not as configured: {', '.join(sorted(drifted))}"
    found.append(Check(f"{name}: its ConfigMaps in sync", said))
    if report.halted:
        what = f"failed, {report.rolled_back}" if report.rolled_back else "halted"
        found.append(
            Check(
                f"{name}: no rollout halted or rolled back",
                f"the rollout {what}: {'; '.join(report.halted)}",
                hint="fix the workloads, then change the spec or annotate it "
                "config.linkerd.io/resume-rollout (docs/user-guide.md)",
            )
        )
    else:
        found.append(Check(f"{name}: no rollout halted or rolled back"))
    stale = sum(w.pods for w in report.stale)
    found.append(
        Check(
            f"{name}: the data plane runs proxy {report.proxy_version} and its trust bundle",
            f"{stale} stale pod(s) in {len(report.stale)} workload(s)" if stale else "",
            warning=True,
        )
    )
    held = report.anchors is not None and report.anchors.held
    found.append(
        Check(
            f"{name}: no trust-anchor removal held",
            report.anchors.message() if held and report.anchors is not None else "",
            warning=True,
        )
    )
    conditions = list(report.conditions)
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None:
        found.append(Check(f"{name}: Ready", "no Ready condition: has the controller seen it?"))
    elif ready.get("status") != "True":
        stalled = readiness.progress(conditions) == Progress.STALLED
        found.append(
            Check(
                f"{name}: Ready",
                f"Ready is {ready.get('status')} ({ready.get('reason')}): {ready.get('message')}",
                warning=not stalled,
            )
        )
    else:
        found.append(Check(f"{name}: Ready"))
    return found


def _ca_problem(bundle: object, now: datetime.datetime) -> str:
    """What is wrong with a caBundle (base64 PEM) now; empty when nothing."""
    if not isinstance(bundle, str) or not bundle:
        return "empty"
    try:
        certificates = x509_reader.read_pem_bundle(base64.b64decode(bundle).decode())
    except ValueError as exc:  # not base64, not text, or CertificateError
        return f"not a PEM certificate bundle ({exc})"
    valid = [c for c in certificates if c.not_before <= now <= c.not_after]
    if not valid:
        return "no certificate in it is valid now"
    return ""


# -- reading --------------------------------------------------------------------------------


async def gather(settings: Settings, options: RolloutOptions) -> CheckedCluster:
    """What the checks read: the CRD, the Lease, the controller's pods, our webhook
    configurations, a dry run of each LinkerdConfig through them, and what ``status`` says."""
    view = await read_cluster(settings)
    try:
        access = await load_access(settings.kubeconfig, settings.context)
    except AccessError as exc:
        raise CommandError(str(exc)) from exc
    client = KubeClient(access, user_agent="linkerd-config-check", timeouts=Timeouts(30.0, 10.0))
    unreadable: dict[str, str] = {}

    async def get(what: str, path: str, **params: str) -> Json | None:
        try:
            found: Json = await client.request("GET", path, params=params or None)
        except ApiError as exc:
            if not exc.not_found:
                unreadable[what] = f"cannot read it: {exc.status} {exc.message}"
            return None
        return found

    async with client:
        crd = await get("crd", CRDS.path(name=str(LINKERD_CONFIGS)))
        lease = await get("lease", LEASES.path(settings.namespace, LEASE))
        pods = await get("pods", PODS.path(settings.namespace), labelSelector=CONTROLLER_SELECTOR)
        webhooks = []
        for resource, name in zip(
            (MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS),
            WEBHOOK_CONFIGURATIONS,
            strict=True,
        ):
            found = await get("webhooks", resource.path(name=name))
            if found is not None:
                webhooks.append(found)
        dry_run: dict[str, str] = {}
        if webhooks:
            for config in view.configs:
                name = str(config["metadata"]["name"])
                try:
                    await client.request(
                        "PATCH", LINKERD_CONFIGS.path(name=name), body={},
                        content_type=MERGE_PATCH, params={"dryRun": "All"},
                    )  # fmt: skip
                    dry_run[name] = ""
                except ApiError as exc:
                    if exc.status in (401, 403):
                        unreadable["dry run"] = f"{exc.status} {exc.message}"
                        break
                    dry_run[name] = f"{exc.status} {exc.message}"
    return CheckedCluster(
        now=datetime.datetime.now(datetime.UTC),
        crd=crd,
        lease=lease,
        pods=None if "pods" in unreadable else list((pods or {}).get("items") or ()),
        webhooks=None if "webhooks" in unreadable else webhooks,
        dry_run=dry_run,
        reports=status(view, options),
        unreadable=unreadable,
    )


# -- the command ----------------------------------------------------------------------------


def check_command(settings: Settings, args: argparse.Namespace) -> int:
    """``check [--output table|json]``: Linkerd's ``CheckOutput``; exit 1 when a check
    errs (warnings do not), as ``linkerd check`` does."""
    out = sys.stdout
    # linkerd check passes every flag it has a value for: --as-group=[] (an empty list, as
    # pflag prints one) is no impersonation.
    groups = [g for g in getattr(args, "as_group", None) or () if g not in ("", "[]")]
    impersonating = bool(getattr(args, "as_user", None) or groups)
    try:
        if impersonating:
            raise CommandError("--as and --as-group (impersonation) are not supported")
        seen = asyncio.run(asyncio.wait_for(gather(settings, RolloutOptions.of(settings)),
                                            READ_TIMEOUT * 3))  # fmt: skip
        found = checks(seen)
    except (CommandError, TimeoutError, aiohttp.ClientError, OSError, ApiError) as exc:
        found = [Check("linkerd-config can read the cluster", str(exc) or type(exc).__name__)]
    success = all(c.result != ERROR for c in found)
    if args.output == "json":
        document = {
            "success": success,
            "categories": [{"categoryName": CATEGORY, "checks": [c.as_json() for c in found]}],
        }
        out.write(json.dumps(document, indent=2) + "\n")
    else:
        out.write(render(found, success))
    return 0 if success else EXIT_FAILED


SYMBOLS = {SUCCESS: "\u221a", WARNING: "\u203c", ERROR: "\u00d7"}
"""Linkerd's: a check mark, a double exclamation mark, a multiplication sign."""


def render(found: list[Check], success: bool) -> str:
    """As ``linkerd check`` prints a category (its table output)."""
    lines = [CATEGORY, "-" * len(CATEGORY)]
    for c in found:
        lines.append(f"{SYMBOLS[c.result]} {c.description}")
        if c.error:
            lines.append(f"    {c.error}")
            lines.append(f"    see {c.hint} for hints")
    lines.append("")
    lines.append(f"Status check results are {SYMBOLS[SUCCESS if success else ERROR]}")
    return "\n".join(lines) + "\n"
