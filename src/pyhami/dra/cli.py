"""`pyhami dra-driver`: the DRA driver `gpu.pyhami.io` on this node."""

import os
from pathlib import Path, PurePosixPath
from typing import Annotated

import typer

from pyhami.cli_errors import check_kubeconfig, fail, run_service
from pyhami.cli_habits import DebugOption, LogFormatOption
from pyhami.cli_klog import DEBUG_VERBOSITY, KlogVerbosity
from pyhami.deviceplugin import cli as plugin_cli
from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.health import HealthSettings, XidPolicy
from pyhami.dra import cdi
from pyhami.dra.api import KUBELET_PLUGINS_DIR, KUBELET_REGISTRY_DIR
from pyhami.dra.checkpoint import CheckpointError
from pyhami.dra.service import DraDriver, DriverOptions
from pyhami.kube import KubeClient
from pyhami.logs import LogFormat, configure_logging
from pyhami.nvml import Nvml, NvmlUnavailableError, open_nvml


def dra_driver(
    *,
    node_name: Annotated[
        str, typer.Option(envvar="NODE_NAME", help="This node (downward API spec.nodeName)")
    ] = "",
    kubelet_plugins_dir: Annotated[
        Path, typer.Option(envvar="KUBELET_PLUGINS_DIR", help="holds <driver>/dra.sock")
    ] = KUBELET_PLUGINS_DIR,
    kubelet_registry_dir: Annotated[
        Path,
        typer.Option(envvar="KUBELET_REGISTRY_DIR", help="kubelet's plugin-registration dir"),
    ] = KUBELET_REGISTRY_DIR,
    cdi_dir: Annotated[
        Path, typer.Option(envvar="CDI_DIR", help="where the runtime reads CDI specs")
    ] = cdi.CDI_DIR,
    hook_path: plugin_cli.HookPathOption = "/usr/local",
    libvgpu_version: plugin_cli.LibvgpuVersionOption = "v2.10.0",
    health_recovery_seconds: plugin_cli.RecoveryOption = 300.0,
    kubeconfig: Annotated[str, typer.Option(envvar="KUBECONFIG")] = "",
    verbosity: KlogVerbosity = 0,
    debug: DebugOption = False,
    log_format: LogFormatOption = LogFormat.CONSOLE,
) -> None:
    """Run the DRA driver gpu.pyhami.io on this node (ResourceSlice, kubelet DRA plugin)."""
    configure_logging(debug=debug or verbosity >= DEBUG_VERBOSITY, log_format=log_format)
    plugin_cli.check_node_flags(node_name, hook_path)
    options = DriverOptions(
        node_name=node_name,
        plugins_dir=kubelet_plugins_dir,
        registry_dir=kubelet_registry_dir,
        cdi_dir=cdi_dir,
        settings=AllocationSettings(hook_path=PurePosixPath(hook_path), version=libvgpu_version),
        health=HealthSettings(
            XidPolicy.from_environment(os.environ),
            recovery_after=health_recovery_seconds if health_recovery_seconds >= 0 else None,
        ),
    )
    check_kubeconfig(kubeconfig or None, "dra-driver")
    try:
        nvml = open_nvml()
    except NvmlUnavailableError as error:
        fail("dra-driver", str(error), 1)
    try:
        run_service(
            "dra-driver",
            _serve(kubeconfig, nvml, options),
            debug=debug or verbosity >= DEBUG_VERBOSITY,
            usage_errors=(CheckpointError,),
        )
    finally:
        nvml.close()


async def _serve(kubeconfig: str, nvml: Nvml, options: DriverOptions) -> None:
    stop = plugin_cli.stop_on_signals()
    async with await KubeClient.from_kubeconfig(kubeconfig or None) as kube:
        await DraDriver(kube, nvml, options).run(stop)
