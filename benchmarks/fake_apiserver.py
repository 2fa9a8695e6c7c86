"""What the fake API server costs over the bare HTTP round trip it rides on.

Both sides use the same client (`pyhami.kube.KubeClient`) and the same aiohttp server stack.
The baseline server answers every PATCH by echoing the decoded body (JSON in, JSON out, no
semantics). The measured server is `FakeKubeAPIServer` holding `--nodes` nodes, with one
informer watching nodes (so every write also fans out to a watch), answering merge patches
of one node annotation, the shape of the node-lock write HAMi's bind makes.
Prints p50/p99 latency and writes/s of both and their ratio.
Run: `python3 benchmarks/fake_apiserver.py [--nodes 1000] [--writes 500]`.
"""

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from aiohttp import web
from kubernetes_asyncio.client import Configuration

from benchmarks.stats import percentile
from pyhami.kube import NODES, Informer, KubeClient
from pyhami.testing import FakeKubeAPIServer


async def echo_server() -> tuple[web.AppRunner, str]:
    async def echo(request: web.Request) -> web.Response:
        return web.json_response(await request.json())

    app = web.Application()
    app.router.add_route("PATCH", "/{tail:.*}", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def timed_writes(client: KubeClient, writes: int, nodes: int) -> list[float]:
    latencies = []
    for i in range(writes):
        name = f"node-{i % nodes:04d}"
        body = {"metadata": {"annotations": {"hami.io/mutex.lock": f"t{i},default,p{i}"}}}
        start = time.perf_counter()
        await client.patch_node(name, body)
        latencies.append(time.perf_counter() - start)
    return latencies


async def main(nodes: int, writes: int) -> None:
    runner, url = await echo_server()
    async with KubeClient(Configuration(host=url)) as client:
        await timed_writes(client, 20, nodes)  # warm up the connection pool
        baseline = await timed_writes(client, writes, nodes)
    await runner.cleanup()

    async with FakeKubeAPIServer() as server, KubeClient(server.configuration()) as client:
        for i in range(nodes):
            server.store.create("nodes", None, {"metadata": {"name": f"node-{i:04d}"}})
        informer = Informer(client, NODES)
        informer.start()
        await informer.wait_synced(30)
        await timed_writes(client, 20, nodes)
        measured = await timed_writes(client, writes, nodes)
        await informer.stop()

    def line(label: str, values: list[float]) -> str:
        return (f"{label:<22} p50 {percentile(values, 0.5) * 1e3:7.2f} ms   "
                f"p99 {percentile(values, 0.99) * 1e3:7.2f} ms   "
                f"{len(values) / sum(values):8.0f} writes/s")

    print(f"merge-patch writes, {nodes} nodes, {writes} writes each")
    print(line("baseline (echo)", baseline))
    print(line("FakeKubeAPIServer", measured))
    ratio = statistics.median(measured) / statistics.median(baseline)
    print(f"ratio (fake / echo, p50): {ratio:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--writes", type=int, default=500)
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.writes))
