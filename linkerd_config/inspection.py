"""The ``plan`` and ``status`` commands: read the cluster once, decide, print, exit.

Reading is the controller's own caches filled by one LIST each (``LinkerdCaches``); deciding is
``linkerd.status.plan``'s, over the reconciler's functions. Nothing here writes to the cluster.

Exit status, as ``terraform plan -detailed-exitcode`` and ``kubectl diff``: 0 nothing to do
(plan: no change; status: every opted-in proxy up to date and the LinkerdConfig Ready), 2
something to do (plan: changes; status: stale or failing), 1 the command itself failed (an
invalid LinkerdConfig, an unreachable cluster).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import aiohttp
import yaml

from linkerd_config.kube.client import ApiError, KubeClient, Timeouts
from linkerd_config.kube.kubeconfig import AccessError, load_access
from linkerd_config.kube.resource import Json, go_seconds
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.caches import LinkerdCaches
from linkerd_config.linkerd.formats import bounded
from linkerd_config.linkerd.formats.config_diff import Change
from linkerd_config.linkerd.formats.helm_values import dump_yaml
from linkerd_config.linkerd.rollout import canary
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.conversion import GROUP, SERVED_VERSIONS, convert
from linkerd_config.linkerd.spec.crd import KIND, LINKERD_CONFIGS
from linkerd_config.linkerd.status.plan import (
    ConfigStatus,
    NextPass,
    Plan,
    WorkloadLine,
    plan,
    status,
)
from linkerd_config.linkerd.status.view import ClusterView
from linkerd_config.linkerd.trust.guard import Decision
from linkerd_config.settings import Settings

NO_CHANGES, FAILED, CHANGES = 0, 1, 2
API_VERSIONS = tuple(f"{GROUP}/{version}" for version in SERVED_VERSIONS)
READ_TIMEOUT = 120.0
"""Seconds for reading the whole cluster (every LIST, every page)."""


class CommandError(Exception):
    """The command cannot answer: said in one line, exit 1."""


def read_linkerdconfig(
    path: str, stdin: TextIO | None = None, command: str = "plan"
) -> dict[str, Any]:
    """The one LinkerdConfig in a YAML or JSON file (``-``: standard input)."""
    stdin = sys.stdin if stdin is None else stdin
    where = "standard input" if path == "-" else path
    try:
        # At most one byte past the bound, which then refuses it: never all of /dev/zero.
        if path == "-":
            text = stdin.read(bounded.MAX_BYTES + 1)
        else:
            with Path(path).open(encoding="utf-8", errors="replace") as file:
                text = file.read(bounded.MAX_BYTES + 1)
        # Bounded (size, depth, values; no anchors or aliases): a hostile file costs one scan.
        documents = [d for d in bounded.yaml_documents(text) if d is not None]
    except OSError as exc:
        raise CommandError(f"cannot read {where}: {exc.strerror or exc}") from exc
    except bounded.Unreadable as exc:
        raise CommandError(f"{where} {exc}") from exc
    found = [
        d
        for d in documents
        if isinstance(d, dict) and d.get("apiVersion") in API_VERSIONS and d.get("kind") == KIND
    ]
    if len(found) != 1:
        raise CommandError(
            f"{where} holds {len(found)} {KIND} object(s) ({' or '.join(API_VERSIONS)}); "
            f"{command} takes exactly one"
        )
    return found[0]


def convert_command(path: str, version: str, stdout: TextIO | None = None) -> int:
    """``convert``: the LinkerdConfig in ``path`` as ``version`` (YAML), as the conversion
    webhook would answer; offline, for a cluster whose API server cannot call the webhook
    (webhooks off), where only the storage version (v1alpha2) can be written."""
    stdout = sys.stdout if stdout is None else stdout
    try:
        obj = read_linkerdconfig(path, command="convert")
    except CommandError as exc:
        print(f"linkerd-config convert: {exc}", file=sys.stderr)
        return FAILED
    converted = convert(obj, version)
    stdout.write(dump_yaml(converted, sort_keys=False))
    return NO_CHANGES


async def read_cluster(settings: Settings) -> ClusterView:
    """What the controller's caches would hold now."""
    try:
        access = await load_access(settings.kubeconfig, settings.context)
    except AccessError as exc:
        raise CommandError(str(exc)) from exc
    client = KubeClient(access, user_agent="linkerd-config-inspect", timeouts=Timeouts(30.0, 10.0))
    caches = LinkerdCaches(client, settings.config_namespace)
    try:
        async with client:
            await asyncio.wait_for(caches.list_once(), READ_TIMEOUT)
    except ApiError as exc:
        if exc.not_found and exc.path.startswith(LINKERD_CONFIGS.path()):
            raise CommandError(
                "the API server does not serve LinkerdConfigs: install the CRD "
                "(kubectl apply -k manifests/crd, or the Helm chart)"
            ) from exc
        raise CommandError(f"reading the cluster: {exc}") from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise CommandError(f"cannot reach the API server at {access.server}: {exc}") from exc
    except TimeoutError as exc:
        raise CommandError(
            f"reading the cluster took longer than {READ_TIMEOUT:.0f}s ({access.server})"
        ) from exc
    return caches.view()


# -- plan ------------------------------------------------------------------------------------


def plan_command(settings: Settings, path: str, output: str) -> int:
    out, err = sys.stdout, sys.stderr
    try:
        config = read_linkerdconfig(path)
        view = asyncio.run(read_cluster(settings))
    except CommandError as exc:
        print(f"linkerd-config plan: {exc}", file=err)
        return FAILED
    result = plan(config, view, RolloutOptions.of(settings))
    if output in STRUCTURED:
        out.write(structured(result.as_json(), output))
    else:
        out.write(render_plan(result))
    if result.problem is not None:
        return FAILED
    return CHANGES if result.changes else NO_CHANGES


STRUCTURED = ("json", "yaml")
"""``-o`` values that print the answer as data rather than text."""


def structured(data: Any, output: str) -> str:
    if output == "yaml":
        return yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)
    return json.dumps(data, indent=2) + "\n"


def render_plan(result: Plan) -> str:
    lines: list[str] = []
    add = lines.append
    if result.problem is not None:
        add(f'LinkerdConfig "{result.name}" cannot be applied ({result.problem.reason}):')
        add(f"  {result.problem.message}")
        return "\n".join(lines) + "\n"
    add(f'LinkerdConfig "{result.name}": valid (the admission webhook\'s checks)')
    lines.extend(f"  warning: {w}" for w in result.warnings)
    add("")
    hashes = f"configuration hash {result.current_hash or 'none'} → {result.config_hash}"
    if result.current_hash == result.config_hash:
        hashes = f"configuration hash {result.config_hash}"
    add(
        f"ConfigMap {result.target} ({result.config_format} format, Linkerd "
        f"{result.linkerd_version}; {hashes}):"
    )
    if not (result.keys or result.metadata):
        add("  no change")
    shown = ""
    for change in result.keys:
        if change.configmap not in (shown, result.target):
            add(f"ConfigMap {change.configmap}:")
        shown = change.configmap
        add(f"  {change.key}:")
        lines.extend(f"    {_change(c)}" for c in change.changes)
    if result.metadata:
        add(f"  metadata of {result.target}:")
        lines.extend(f"    {_change(c)}" for c in result.metadata)
    add("")
    if result.anchors is not None:
        add(f"Trust anchors: {_anchor_state(result.anchors)}")
        add(f"  {result.anchors.message()}")
        add("")
    pods = sum(w.pods for w in result.restarts)
    if result.restarts:
        held = "held while spec.rollout.paused is true; once resumed, " if result.paused else ""
        if result.halted:
            held = "held: this configuration's rollout is halted; once resumed, "
        if result.anchor_hold:
            held = "held: the trust-anchor guard holds the write; once it proceeds, "
        if result.canary_unmatched:
            held = "held: no workload to restart matches spec.rollout.canary; once one does, "
        add(
            f"Restarts: {len(result.restarts)} workload(s) ({pods} pod(s)) onto proxy "
            f"{result.proxy_version}, {held}in {result.batches} pass(es) of at most "
            f"{result.batch_size}, {result.interval:g}s apart, once the proxy injector "
            "injects it:"
        )
        for number in range(1, result.batches + 1):
            lines.extend(_pass_heading(result, number))
            lines.extend(
                f"    {_workload(w)}" for w in result.restarts if w.batch == number
            )  # fmt: skip
    else:
        add(f"Restarts: none (no opted-in pod is stale against proxy {result.proxy_version})")
    if result.kept:
        add("Not restarted (opted in):")
        lines.extend(f"  {_workload(w)}" for w in result.kept)
    add("")
    lines.extend(_plan_summary(result))
    return "\n".join(lines) + "\n"


def _plan_summary(result: Plan) -> list[str]:
    """The plan's last lines: a halt in force, and what applying it changes."""
    lines: list[str] = []
    restarts = f"{len(result.restarts)} workload(s) to restart"
    why = "halted" if result.halted else "paused"
    if result.anchor_hold:
        why = "held by the trust-anchor guard"
    if result.canary_unmatched:
        why = "no workload matches spec.rollout.canary"
    if result.held and result.restarts:
        restarts = f"{len(result.restarts)} workload(s) to restart once resumed ({why})"
    if result.halted:
        lines.append("Rollout halted (config.linkerd.io/resume-rollout resumes it):")
        lines.extend(f"  {failed}" for failed in result.halted)
    if result.changes:
        configmaps = len({k.configmap for k in result.keys})
        later = " once the trust-anchor guard lets them (HELD now)" if result.anchor_hold else ""
        lines.append(
            f"Plan: {len(result.keys)} key(s) in {configmaps} ConfigMap(s) to change{later}"
            f"{', our annotations to update' if result.metadata else ''}; {restarts}."
        )
    elif result.restarts:
        lines.append(f"No changes while {why}: the ConfigMaps match; {restarts}.")
    else:
        lines.append("No changes: the cluster already matches this LinkerdConfig.")
    return lines


def _anchor_state(decision: Decision) -> str:
    if decision.held and decision.swap:
        return "every anchor replaced: STAGED as a rotation (trust-anchor guard)"
    if decision.held:
        return "removal HELD (trust-anchor guard)"
    if not decision.guarded:
        return "removal NOT GUARDED"
    if decision.swap:
        return "every anchor REPLACED (no meshed pod runs the old ones)"
    return "removal checked against every meshed pod"


def _pass_heading(result: Plan, number: int) -> list[str]:
    """``pass N:``. With a canary (spec.rollout.canary) still to pass, its own passes say so,
    and the first of the rest what it waits for."""
    said = result.canary
    if said.get("phase") != canary.SUMMARY_CANARY or said.get("unmatched"):
        return [f"  pass {number}:"]
    first = {w.batch for w in result.restarts if w.canary}
    if number in first:
        return [f"  pass {number} (canary):"]
    if number != min(set(range(1, result.batches + 1)) - first):
        return [f"  pass {number}:"]
    names = ", ".join(said.get("workloads") or ())
    return [
        f"  then, once the canary ({names}) has been healthy for "
        f"{go_seconds(said['stableForSeconds'])}:",
        f"  pass {number}:",
    ]


def _canary_line(said: Json, stale: bool) -> str | None:
    """What ``status`` says of the canary (``canary.summary``), if anything."""
    names = ", ".join(said.get("workloads") or ()) or "none chosen yet"
    if said.get("phase") == canary.SUMMARY_PASSED:
        return f"passed at {said.get('passedAt')} ({names})"
    if said.get("phase") != canary.SUMMARY_CANARY or not stale:
        return None
    since = said.get("healthySince")
    healthy = f"healthy since {since}" if since else "not healthy yet"
    return (
        f"{names}: {healthy}; the rest restart once it has been healthy for "
        f"{go_seconds(said['stableForSeconds'])}"
    )


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _change(change: Change) -> str:
    path = change.path or "(whole key)"
    if change.op == "added":
        return f"+ {path}: {_value(change.after)}"
    if change.op == "removed":
        return f"- {path}: {_value(change.before)}"
    return f"~ {path}: {_value(change.before)} → {_value(change.after)}"


def _workload(line: WorkloadLine) -> str:
    reasons = "; ".join(
        f"{reason}" + (f" ({pods} pod(s))" if len(line.reasons) > 1 else "")
        for reason, pods in sorted(line.reasons.items())
    )
    state = "" if line.state == mesh.STALE else f"[{line.state}] "
    return f"{line.workload} ({line.pods} pod(s)): {state}{reasons}"


# -- status ----------------------------------------------------------------------------------


def status_command(settings: Settings, output: str) -> int:
    out, err = sys.stdout, sys.stderr
    try:
        view = asyncio.run(read_cluster(settings))
    except CommandError as exc:
        print(f"linkerd-config status: {exc}", file=err)
        return FAILED
    reports = status(view, RolloutOptions.of(settings))
    if not reports:
        print(
            "linkerd-config status: no LinkerdConfig in the cluster (kubectl get linkerdconfigs); "
            "status compares the data plane with one",
            file=err,
        )
        return FAILED
    if output in STRUCTURED:
        out.write(structured([r.as_json() for r in reports], output))
    else:
        out.write("\n".join(render_status(r) for r in reports))
    return CHANGES if any(r.failing for r in reports) else NO_CHANGES


def render_status(report: ConfigStatus) -> str:
    lines: list[str] = []
    add = lines.append
    if report.problem is not None:
        add(f'LinkerdConfig "{report.name}": {report.problem.reason}: {report.problem.message}')
    else:
        add(
            f'LinkerdConfig "{report.name}" → ConfigMap {report.target} ({report.config_format} '
            f"format, Linkerd {report.linkerd_version}), proxy {report.proxy_version}, "
            f"configuration hash {report.config_hash}"
        )
        drift = ", ".join(report.drifted)
        add(f"  ConfigMaps: {f'not as configured: {drift}' if drift else 'as configured'}")
        if report.missing:
            add(f"  Missing (Linkerd's injector needs them): {', '.join(report.missing)}")
        if report.anchors is not None and report.anchors.held:
            add(f"  Trust anchors: {_anchor_state(report.anchors)}: {report.anchors.message()}")
        if report.halted:
            what = f"FAILED, {report.rolled_back}" if report.rolled_back else "HALTED"
            add(f"  Rollout {what} (config.linkerd.io/resume-rollout resumes it):")
            lines.extend(f"    {failed}" for failed in report.halted)
        rolled = report.rollout
        last = rolled.get("lastRestart")
        add(
            f"  Rollout: {rolled['workloadsRestartedForThisConfiguration']} workload(s) restarted "
            f"for this configuration{f', the last at {last}' if last else ''}; at most "
            f"{rolled['maxRestartsPerPass']} per pass, {rolled['restartIntervalSeconds']:g}s "
            f"apart{'; PAUSED (spec.rollout.paused)' if rolled['paused'] else ''}"
        )
        said = _canary_line(rolled.get("canary") or {}, bool(report.stale))
        if said is not None:
            add(f"  Canary: {said}")
        if report.next_pass is not None:
            lines.extend(_next_pass(report.next_pass))
    if report.conditions:
        add("  Conditions:")
        lines.extend(
            f"    {c.get('type', ''):<18} {c.get('status', ''):<7} {c.get('reason', ''):<18} "
            f"{c.get('message', '')}".rstrip()
            for c in report.conditions
        )
    if report.problem is None:
        add("  Opted-in pods, by namespace:")
        add(_row("NAMESPACE", *(s.upper() for s in mesh.PROXY_STATES)))
        lines.extend(
            _row(ns, *(str(counts.get(s, 0)) for s in mesh.PROXY_STATES))
            for ns, counts in sorted(report.namespaces.items())
        )
        if not report.namespaces:
            add("    (none: no Running pod is labelled config.linkerd.io/reconcile=auto)")
        if report.stale:
            add("  Stale workloads:")
            lines.extend(f"    {_workload(w)}" for w in report.stale)
    failing = report.failing
    add(f"  Not healthy: {'; '.join(failing)}" if failing else "  Healthy")
    return "\n".join(lines) + "\n"


def _next_pass(upcoming: NextPass) -> list[str]:
    """The controller's next pass, as its step decides it from what the caches hold."""
    found = [f"  Next pass ({upcoming.phase}): {upcoming.message}"]
    first = " once Linkerd's injector is seen injecting it" if upcoming.asks_injector else ""
    for verb, workloads in (("restarts", upcoming.restarts), ("brings back", upcoming.restores)):
        if workloads:
            shown = ", ".join(str(w) for w in workloads[:10])
            more = f" and {len(workloads) - 10} more" if len(workloads) > 10 else ""
            found.append(f"    {verb}{first}: {shown}{more}")
    return found


def _row(first: str, *counts: str) -> str:
    return f"    {first:<30}" + "".join(f"{c:>12}" for c in counts)
