"""RealControlPlane: Kubernetes' own etcd, kube-apiserver, kube-controller-manager and
kube-scheduler as local processes, for the tests and the demo.

    binaries = build_control_plane()           # pyhami control-plane build, cached
    async with RealControlPlane(binaries) as plane:
        admin = await plane.client(plane.admin_kubeconfig)
        ...                                     # start pyhami's scheduler, then:
        await plane.start_kube_scheduler(extender)

What runs, on 127.0.0.1 and free ports, everything under one temporary folder:
* etcd on a temporary data dir (no fsync: nothing here outlives the run);
* kube-apiserver with its own CA (`plane.ca`, which signs its serving certificate and the
  client certificates of the cluster's users), `--authorization-mode=Node,RBAC`, the default
  admission plugins (webhooks, ResourceQuota, ServiceAccount ...) plus NodeRestriction, and
  service-account
  tokens signed by a key of its own;
* kube-controller-manager with the controllers the tests need (service accounts, namespaces,
  resource quotas, garbage collection; with `dra=True` also the ResourceClaim and device-taint
  controllers of Dynamic Resource Allocation), each as its own service account;
* kube-scheduler (started by `start_kube_scheduler` once the extender listens) with the
  profiles `hami-scheduler` and `default-scheduler` and pyhami's extender: `filter`, `bind`,
  `preempt`, `nodeCacheCapable`, every resource name pyhami owns as a managed resource ignored by
  kube-scheduler, HTTPS with the CA and a client certificate; without an extender it runs the
  `default-scheduler` profile alone (DRA claims are kube-scheduler's own work).

Identities: the admin (`system:admin` in `system:masters`) and the components get client
certificates (`kubeconfig_for`), pyhami's components ServiceAccount tokens from the
TokenRequest API (`service_account_kubeconfig`). `stop()` ends every process and removes the
folder; a process that exits early fails `start` with the end of its log.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import ssl
import tempfile
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from pyhami.controlplane import BuiltBinaries
from pyhami.kube import AsyncService, Conflict, KubeClient, NotFound
from pyhami.kube.component_config import AuditEvent, LeaderElection
from pyhami.testing import certs
from pyhami.testing.certs import CertificateAuthority, KeyPair, write_private_key
from pyhami.testing.fake_apiserver.identity import ADMIN, SERVICE_ACCOUNT_PREFIX
from pyhami.testing.scheduler_harness.config import ExtenderConfig

NODE_PREFIX = "system:node:"
KUBE_SCHEDULER_USER = "system:kube-scheduler"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CIDR = "10.96.0.0/16"
# kube-controller-manager's controllers the tests rely on: ServiceAccounts (pods need their
# namespace's `default` one), namespace deletion, ResourceQuota status, ownerReference cleanup,
# the aggregation that fills the admin, edit and view ClusterRoles, and node lifecycle (a new
# Node is tainted not-ready at admission; this lifts the taint once the node reports Ready and
# renews its Lease, and taints it again when the heartbeat stops).
CONTROLLERS = (
    "nodelifecycle",
    "serviceaccount",
    "namespace",
    "resourcequota",
    "garbagecollector",
    "clusterrole-aggregation",
    "disruption",  # PodDisruptionBudgets' status, which evictions are checked against
)
# With `dra=True`: ResourceClaims made from a pod's ResourceClaimTemplates (and deleted with the
# pod), and pods evicted from devices tainted NoExecute. Kubernetes 1.37 turns on every DRA
# feature pyhami uses by default (core DRA, DRAConsumableCapacity, DRAExtendedResource,
# DRADeviceTaints, DRAPrioritizedList), so no component needs a feature gate.
DRA_CONTROLLERS = ("resourceclaim-controller", "device-taint-eviction-controller")
# Every request's who, what and answer code (no bodies), once it is answered: the tests hold
# our components' requests against RBAC with it.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "Metadata"}],
}
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 15


def _code(event: AuditEvent) -> int:
    return event.get("responseStatus", {}).get("code", 0)


def _request_of(event: AuditEvent) -> tuple[str, str, str]:
    return (event["user"]["username"], event["verb"], event["requestURI"])


def _graph_lag(event: AuditEvent) -> bool:
    """A node refused a request by the Node authorizer for lack of a pod linking it."""
    message = event.get("responseStatus", {}).get("message", "")
    return event["user"]["username"].startswith(NODE_PREFIX) and (
        "no relationship found between node" in message
    )


class ControlPlaneError(Exception):
    """A control-plane process could not start; the message ends with its log's last lines."""


@dataclass
class _Process:
    name: str
    log: Path
    process: asyncio.subprocess.Process

    def tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-LOG_TAIL_LINES:])


def free_port() -> int:
    """A port nothing listens on now, below the ephemeral range: the processes bind it a few
    seconds later, and a port the OS hands out as a connection's source meanwhile is taken."""
    try:
        floor = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        floor = 32768
    for _ in range(100):
        port = random.randrange(max(1024, floor - 12000), floor)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ControlPlaneError("no free port below the ephemeral range")


def port_is_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def kubeconfig(
    server: str, ca_file: Path, *, pair: KeyPair | None = None, token: str | None = None
) -> str:
    """A kubeconfig file's text for one identity: a client certificate or a bearer token."""
    user = {"token": token} if token is not None else {}
    if pair is not None:
        user = {"client-certificate": str(pair.cert_file), "client-key": str(pair.key_file)}
    return certs.kubeconfig({"server": server, "certificate-authority": str(ca_file)}, user)


def scheduler_configuration(
    kubeconfig_file: Path,
    extender: ExtenderConfig | None,
    leader_election: LeaderElection | None = None,
) -> str:
    """kube-scheduler's configuration file's text: its default profile, and with `extender`
    the `hami-scheduler` profile and that extender (kube-scheduler asks an extender only about
    pods that request one of its managed resources)."""
    targets = [] if extender is None else [extender]
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig_file), "qps": 200, "burst": 400},
        "leaderElection": leader_election or {"leaderElect": False},
        "profiles": [{"schedulerName": "hami-scheduler"} for _ in targets]
        + [{"schedulerName": "default-scheduler"}],
        "extenders": [
            {
                "urlPrefix": target.url_prefix,
                "filterVerb": target.filter_verb,
                "bindVerb": target.bind_verb,
                "preemptVerb": target.preempt_verb,
                "nodeCacheCapable": target.node_cache_capable,
                "weight": 1,
                "httpTimeout": f"{target.http_timeout_s:g}s",
                "enableHTTPS": target.url_prefix.startswith("https://"),
                "tlsConfig": {
                    "insecure": target.tls_insecure,
                    "caData": base64.b64encode(target.tls_ca_pem or b"").decode(),
                    "certFile": str(target.tls_cert_file or ""),
                    "keyFile": str(target.tls_key_file or ""),
                },
                "managedResources": [
                    {"name": r.name, "ignoredByScheduler": r.ignored_by_scheduler}
                    for r in target.managed_resources
                ],
                "ignorable": target.ignorable,
            }
            for target in targets
        ],
    }
    return yaml.safe_dump(config)


class _Ports:
    """The control plane's ports, all different."""

    def __init__(self) -> None:
        picked: set[int] = set()
        while len(picked) < 5:
            picked.add(free_port())
        (
            self.etcd_client,
            self.etcd_peer,
            self.apiserver,
            self.controller_manager,
            self.scheduler,
        ) = sorted(picked)


class RealControlPlane(AsyncService):
    """Start with `async with`; stop ends every process and removes the folder."""

    def __init__(
        self, binaries: BuiltBinaries, workdir: Path | None = None, *, dra: bool = False
    ) -> None:
        self.binaries = binaries
        self.controllers = CONTROLLERS + (DRA_CONTROLLERS if dra else ())
        self._owns_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="pyhami-k8s-", dir="/tmp"))
        self.ports = _Ports()
        self.url = f"https://127.0.0.1:{self.ports.apiserver}"
        self._processes: list[_Process] = []
        self._clients: list[KubeClient] = []
        self._ca: CertificateAuthority | None = None
        self.started_in_s = 0.0

    # ----- what callers use -------------------------------------------------------------------

    @property
    def ca(self) -> CertificateAuthority:
        if self._ca is None:
            raise RuntimeError("the control plane is not started")
        return self._ca

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def kubectl(self) -> Path:
        return self.binaries.path("kubectl")

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def audit_events(self) -> list[AuditEvent]:
        """Every request kube-apiserver answered so far, as audit events."""
        try:
            text = self.audit_log.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def refused_requests(self, users: Collection[str]) -> list[str]:
        """`user verb uri -> code message` of each request of `users` that RBAC or admission
        refused with 403.

        One refusal is a race, not a missing grant, and is left out once the same request by
        the same node has been answered since: the Node authorizer learns that a pod bound to a
        node uses a ResourceClaim from its own watch of pods, which may run behind kubelet's,
        so kubelet's first read of a new pod's claim can be refused ("no relationship found")
        and succeed when kubelet's pod worker tries again, as it does."""
        events = self.audit_events()
        answered = {_request_of(e): i for i, e in enumerate(events) if _code(e) < 400}
        return [
            f"{e['user']['username']} {e['verb']} {e['requestURI']} -> 403 "
            f"{e.get('responseStatus', {}).get('message', '')}"
            for i, e in enumerate(events)
            if e["user"]["username"] in users
            and _code(e) == 403
            and not (_graph_lag(e) and answered.get(_request_of(e), -1) > i)
        ]

    async def apply(self, manifests: str, *, dry_run: bool = False) -> str:
        """`kubectl apply` of `manifests` (YAML documents) as the admin (server-side dry run
        when asked); raises ControlPlaneError with kubectl's message when the API server
        refuses one."""
        args = ["apply", "-f", "-"] + (["--dry-run=server"] if dry_run else [])
        process = await asyncio.create_subprocess_exec(
            str(self.kubectl),
            f"--kubeconfig={self.admin_kubeconfig}",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate(manifests.encode())
        if process.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed: {err.decode().strip()}")
        return out.decode()

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig with a client certificate for `user` in `groups` (written once)."""
        stem = user.replace(":", "-")
        path = self.workdir / f"{stem}.kubeconfig"
        if not path.exists():
            pair = self.ca.client(f"client-{stem}", user, groups)
            path.write_text(kubeconfig(self.url, self.ca.cert_file, pair=pair))
        return path

    def node_kubeconfig(self, node: str) -> Path:
        """kubelet's identity on `node`: the Node authorizer and NodeRestriction judge it."""
        return self.kubeconfig_for(f"{NODE_PREFIX}{node}", ("system:nodes",))

    async def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """The ServiceAccount (made if missing) and a token for it from the TokenRequest API."""
        admin = await self.client(self.admin_kubeconfig)
        base = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        with contextlib.suppress(Conflict):
            await admin.request(
                "POST",
                base,
                body={
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": namespace},
                },
            )
        answer = await admin.request(
            "POST",
            f"{base}/{name}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 86400},  # a day: longer than any run here
            },
        )
        path = self.workdir / f"sa-{namespace}-{name}.kubeconfig"
        token = str(answer["status"]["token"])
        path.write_text(kubeconfig(self.url, self.ca.cert_file, token=token))
        return path

    async def kubeconfig_of(self, user: str) -> Path:
        """A kubeconfig for a Kubernetes user name, as the fake API server takes them: the admin,
        a ServiceAccount (a token), a node (in `system:nodes`), anyone else (no groups)."""
        if user == ADMIN:
            return self.admin_kubeconfig
        if user.startswith(SERVICE_ACCOUNT_PREFIX):
            namespace, _, name = user.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
            return await self.service_account_kubeconfig(namespace, name)
        if user.startswith(NODE_PREFIX):
            return self.node_kubeconfig(user.removeprefix(NODE_PREFIX))
        return self.kubeconfig_for(user)

    async def grant(self, cluster_role: str, user: str) -> None:
        """A ClusterRoleBinding of `cluster_role` to `user` (a ServiceAccount or a user)."""
        if user.startswith(SERVICE_ACCOUNT_PREFIX):
            namespace, _, name = user.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
            subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
        else:
            subject = {"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}
        admin = await self.client(self.admin_kubeconfig)
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{cluster_role}:{user}".replace(":", "-")},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_role,
            },
            "subjects": [subject],
        }
        with contextlib.suppress(Conflict):
            await admin.request(
                "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body=binding
            )

    async def client(self, kubeconfig_file: Path) -> KubeClient:
        """A client for that identity, closed by `stop()`."""
        client = await KubeClient.from_kubeconfig(str(kubeconfig_file))
        self._clients.append(client)
        return client

    def processes(self) -> dict[str, int]:
        """name -> pid of every process started and not stopped."""
        return {p.name: p.process.pid for p in self._processes}

    # ----- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._ca = CertificateAuthority(self.workdir, name="pyhami control-plane CA")
            await self._start_etcd()
            await self._start_apiserver()
            await self._start_controller_manager()
            await self._wait_default_service_accounts()
        except BaseException:
            await self.stop()
            raise
        self.started_in_s = time.monotonic() - started

    async def start_kube_scheduler(
        self,
        extender: ExtenderConfig | None = None,
        *,
        leader_election: LeaderElection | None = None,
        kubeconfig_file: Path | None = None,
    ) -> None:
        """kube-scheduler, its extender pyhami's scheduler at `extender.url_prefix`, shown
        `extender`'s client certificate, which the extender's client CA signed.
        Without an extender, kube-scheduler's default profile alone. It runs as
        `system:kube-scheduler` unless given another identity, and campaigns for a Lease when
        given a `leaderElection` section."""
        identity = kubeconfig_file or self.kubeconfig_for(KUBE_SCHEDULER_USER)
        config_file = self.workdir / "kube-scheduler.yaml"
        config_file.write_text(scheduler_configuration(identity, extender, leader_election))
        port = self.ports.scheduler
        process = await self._spawn(
            "kube-scheduler",
            [
                f"--config={config_file}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                # the benchmarks read its metrics; on loopback, as its health endpoints are
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                *(
                    (
                        f"--authentication-kubeconfig={kubeconfig_file}",
                        f"--authorization-kubeconfig={kubeconfig_file}",
                    )
                    if kubeconfig_file is not None
                    else ()
                ),
            ],
        )
        await self._wait_healthy(process, f"https://127.0.0.1:{port}/healthz")

    async def stop(self) -> None:
        for client in self._clients:
            await client.close()
        self._clients.clear()
        # the reverse of the start order: etcd last
        for process in reversed(self._processes):
            await _end(process.process)
        self._processes.clear()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ----- the processes ----------------------------------------------------------------------

    async def _spawn(self, name: str, args: Sequence[str]) -> _Process:
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        log = logs / f"{name}.log"
        with log.open("ab") as out:
            process = await asyncio.create_subprocess_exec(
                str(self.binaries.path("etcd" if name == "etcd" else name)),
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own group: a Ctrl-C in a terminal is ours to pass
            )
        running = _Process(name, log, process)
        self._processes.append(running)
        return running

    async def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports.etcd_client}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        process = await self._spawn(
            "etcd",
            [
                "--name=pyhami",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=pyhami={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        await self._wait_healthy(process, f"{client}/health")

    async def _start_apiserver(self) -> None:
        ca = self.ca
        serving = ca.serving(
            "apiserver",
            dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ips=("127.0.0.1", "10.96.0.1"),
        )
        signing_key = self.workdir / "sa.key"
        public_key = self.workdir / "sa.pub"
        _write_signing_key(signing_key, public_key)
        audit_policy = self.workdir / "audit-policy.yaml"
        audit_policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        port = self.ports.apiserver
        process = await self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'apiserver'}",
                f"--tls-cert-file={serving.cert_file}",
                f"--tls-private-key-file={serving.key_file}",
                f"--client-ca-file={ca.cert_file}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={public_key}",
                f"--service-account-signing-key-file={signing_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",  # as kubeadm sets it: the device plugin runs privileged
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                f"--audit-policy-file={audit_policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-mode=blocking",  # a request is in the log before it is answered
            ],
        )
        admin = ca.client("admin", ADMIN, ("system:masters",))
        self.admin_kubeconfig.write_text(kubeconfig(self.url, ca.cert_file, pair=admin))
        context = ssl.create_default_context(cafile=str(ca.cert_file))
        context.load_cert_chain(admin.cert_file, admin.key_file)
        await self._wait_healthy(process, f"{self.url}/readyz", context)

    async def _start_controller_manager(self) -> None:
        port = self.ports.controller_manager
        process = await self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.kubeconfig_for(CONTROLLER_MANAGER_USER)}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--controllers={','.join(self.controllers)}",
                "--use-service-account-credentials=true",
                "--node-monitor-period=1s",  # a new node is schedulable within a second
                f"--root-ca-file={self.ca.cert_file}",
                "--leader-elect=false",
                "--profiling=false",
            ],
        )
        await self._wait_healthy(process, f"https://127.0.0.1:{port}/healthz")

    async def _wait_default_service_accounts(self) -> None:
        """Pods are refused until their namespace's `default` ServiceAccount exists."""
        admin = await self.client(self.admin_kubeconfig)
        deadline = time.monotonic() + START_TIMEOUT_S
        for namespace in ("default", "kube-system"):
            while True:
                try:
                    await admin.request(
                        "GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
                    )
                    break
                except NotFound:
                    if time.monotonic() > deadline:
                        raise ControlPlaneError(
                            f"no ServiceAccount {namespace}/default after {START_TIMEOUT_S:.0f}s"
                        ) from None
                    await asyncio.sleep(0.2)

    async def _wait_healthy(
        self, process: _Process, url: str, context: ssl.SSLContext | None = None
    ) -> None:
        """Without `context` the server's certificate is not checked: kube-scheduler and
        kube-controller-manager serve /healthz with one they make up at start, and only whether
        they answer matters here."""
        deadline = time.monotonic() + START_TIMEOUT_S
        last = ""
        async with aiohttp.ClientSession() as session:
            while True:
                if process.process.returncode is not None:
                    raise ControlPlaneError(
                        f"{process.name} exited with status {process.process.returncode} "
                        f"while starting; its log ends:\n{process.tail()}"
                    )
                try:
                    async with session.get(
                        url,
                        ssl=context if context is not None else False,
                        timeout=aiohttp.ClientTimeout(total=5),
                    ) as answer:
                        if answer.status == 200:
                            return
                        last = f"{answer.status} {await answer.text()}"
                except (aiohttp.ClientError, TimeoutError, OSError) as err:
                    last = str(err) or type(err).__name__
                if time.monotonic() > deadline:
                    raise ControlPlaneError(
                        f"{process.name} not healthy after {START_TIMEOUT_S:.0f}s ({url}: {last}); "
                        f"its log ends:\n{process.tail()}"
                    )
                await asyncio.sleep(0.2)


def _write_signing_key(private_file: Path, public_file: Path) -> None:
    """The key kube-apiserver signs ServiceAccount tokens with, and its public half."""
    key = ec.generate_private_key(ec.SECP256R1())
    write_private_key(private_file, key)
    public_file.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


async def _end(process: asyncio.subprocess.Process) -> None:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; the whole process group either way."""
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
