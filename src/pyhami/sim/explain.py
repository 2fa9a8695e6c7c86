"""`pyhami explain`: every node and every card for one pending pod, and the check that said no."""

from pyhami.devices.reasons import CardCheck
from pyhami.engine import Decision, EngineConfig, NodeFailure, Outcome
from pyhami.sim.inputs import ClusterInput, InputError
from pyhami.sim.simulate import prepare, schedule


def explain(cluster: ClusterInput, config: EngineConfig, pod_ref: str, now: int) -> Decision:
    """Decide the pending pods before `pod_ref` as simulate would, then explain that one."""
    simulation = prepare(cluster, config)
    for pod in cluster.pending:
        metadata = pod.get("metadata") or {}
        name = str(metadata.get("name"))
        namespace = str(metadata.get("namespace") or "default")
        if pod_ref in (name, f"{namespace}/{name}"):
            return schedule(simulation, pod, now, explain=True)
        schedule(simulation, pod, now)
    raise InputError(f"no pending pod {pod_ref!r} in the input (use NAME or NAMESPACE/NAME)")


def render(decision: Decision) -> str:
    lines = [f"pod {decision.namespace}/{decision.name}"]
    if decision.outcome is Outcome.NO_DEVICE_REQUEST:
        return lines[0] + ": asks for no GPU; every node passes the filter\n"
    if decision.outcome is Outcome.ERROR:
        return lines[0] + f": cannot be scheduled: {decision.error}\n"
    chosen = decision.node
    lines.append(f"chosen node: {chosen}" if chosen else "no node fits")
    for verdict in decision.verdicts.values():
        lines.append("")
        if verdict.fits:
            mark = "CHOSEN" if verdict.node == chosen else "fits"
            lines.append(f"node {verdict.node}: {mark}, node score {verdict.score:.2f}")
        elif verdict.failure is NodeFailure.UNREGISTERED:
            lines.append(f"node {verdict.node}: not registered (no usable GPU registration)")
            continue
        else:
            container = "" if verdict.container is None else f" (container {verdict.container})"
            lines.append(f"node {verdict.node}: rejected{container}: {verdict.reason}")
        lines.extend(_card_line(check) for check in verdict.checks)
        for position, devices in enumerate(verdict.devices):
            for device in devices:
                lines.append(
                    f"    container {position} gets {device.uuid}: "
                    f"{device.usedmem} MiB, {device.usedcores} % cores"
                )
    return "\n".join(lines) + "\n"


def _card_line(check: CardCheck) -> str:
    verdict = "taken" if check.reason is None else f"rejected: {check.reason}"
    return f"    container {check.container} card {check.uuid} (index {check.index}): {verdict}"
