"""`pyhami monitor` as a real process against the fake API server: serves, then stops on SIGTERM."""

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp

from pyhami.testing import FakeKubeAPIServer

from .builders import NODE, pod_object
from .regionfile import Mem, Proc, RegionSpec, uuid_of, write_region

MIB = 1 << 20


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.text()


async def test_the_command_serves_metrics_and_exits_cleanly(tmp_path: Path) -> None:
    async with FakeKubeAPIServer() as server:
        created = await _create_pod(server)
        write_region(
            tmp_path / "containers" / f"{created}_main" / "r.cache",
            RegionSpec(uuids=(uuid_of(0),), procs=(Proc(pid=1, used={0: Mem(total=64 * MIB)}),)),
        )
        port = _free_port()
        env = {
            **os.environ,
            "HOOK_PATH": str(tmp_path),
            "NODE_NAME": NODE,
            "KUBECONFIG": str(server.write_kubeconfig(tmp_path / "kubeconfig")),
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "from pyhami.cli import main; main()",
            "monitor",
            f"--metrics-bind-address=127.0.0.1:{port}",
            "--legacy-metrics=true",
            "-v=4",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            text = ""
            # Generous: a cold interpreter importing kubernetes_asyncio on a loaded 2-core CI box.
            for _ in range(1200):
                try:
                    status, text = await _get(f"http://127.0.0.1:{port}/healthz")
                    if status == 200:
                        break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.05)
            assert text == "ok\n", "the monitor never became healthy"
            status, metrics = await _get(f"http://127.0.0.1:{port}/metrics")
            assert status == 200
            assert (
                f'hami_vgpu_memory_used_bytes{{container="main",device_uuid="{uuid_of(0)}"'
                in metrics
            )
            assert "vGPU_device_memory_usage_in_bytes{" in metrics, "--legacy-metrics=true"
        finally:
            process.send_signal(signal.SIGTERM)
            output, _ = await asyncio.wait_for(process.communicate(), 20)
        assert process.returncode == 0, output.decode()
        assert b'FLAG: --legacy-metrics="true"' in output


async def _create_pod(server: FakeKubeAPIServer) -> str:
    from pyhami.kube import KubeClient

    async with KubeClient(server.configuration()) as kube:
        created = await kube.create_pod("default", pod_object("p", "ignored"))
    return str(created["metadata"]["uid"])
