"""`pyhami device-plugin`: flags and environment as HAMi's device plugin names them.

Unlike HAMi, the vGPU flags (`--device-split-count`, `--device-memory-scaling`,
`--device-cores-scaling`, `--disable-core-limit`, `--resource-name`) take effect; the
device-config YAML and the per-node JSON still override them (see `config`). GDRCOPY, GDS,
MOFED and IMEX channels are passed to containers as HAMi's envvar strategy does (`toolkit`).
Options HAMi offers that pyhami does not implement (CDI, volume-mounts, index ids, device specs,
static MIG) are refused with a message rather than silently ignored.
"""

import asyncio
import os
import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Annotated

import typer

from pyhami.cli_errors import check_kubeconfig, fail, run_service
from pyhami.cli_habits import DebugOption, LogFormatOption
from pyhami.cli_klog import DEBUG_VERBOSITY, KlogVerbosity
from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.api import DEVICE_PLUGIN_PATH, KUBELET_SOCKET
from pyhami.deviceplugin.config import (
    NODE_CONFIG_PATH,
    ConfigError,
    VgpuConfig,
    load_device_config,
    load_node_config,
)
from pyhami.deviceplugin.health import HealthSettings, XidPolicy
from pyhami.deviceplugin.service import DevicePlugin, PluginOptions
from pyhami.deviceplugin.toolkit import (
    ToolkitConfigError,
    ToolkitFeatures,
    imex_channels,
    parse_imex_channel_ids,
)
from pyhami.kube import KubeClient
from pyhami.logs import LogFormat, configure_logging
from pyhami.nvml import Nvml, NvmlUnavailableError, open_nvml


def load_config(
    flags: VgpuConfig, config_file: Path | None, node_config_file: Path, node_name: str
) -> VgpuConfig:
    """defaults < flags < device-config YAML (`nvidia:`) < per-node JSON, then checked."""
    config = flags if config_file is None else load_device_config(flags, config_file)
    return load_node_config(config, node_config_file, node_name).check(f"node {node_name}")


# The node agents' shared flags (the DRA driver's too).
HookPathOption = Annotated[
    str, typer.Option(envvar="HOOK_PATH", help="HAMi-core dir without /vgpu")
]
LibvgpuVersionOption = Annotated[
    str, typer.Option(envvar="LIBVGPU_VERSION", help="mount libvgpu.so.<this> if present")
]
RecoveryOption = Annotated[
    float,
    typer.Option(
        envvar="HEALTH_RECOVERY_SECONDS",
        help="quiet time before an XID-unhealthy GPU recovers (DRA: loses its taint); <0: never",
    ),
]


def check_node_flags(node_name: str, hook_path: str) -> None:
    """The node is named, and the hook path is one libvgpu's limits.env can carry."""
    if not node_name:
        raise typer.BadParameter(
            "set --node-name or NODE_NAME (downward API spec.nodeName)", param_hint="--node-name"
        )
    if any(c.isspace() for c in hook_path):
        raise typer.BadParameter(
            "must not contain whitespace (libvgpu's limits.env cannot carry it)",
            param_hint="--hook-path",
        )


def _refuse(flag: str, value: object, supported: object) -> None:
    if value != supported:
        raise typer.BadParameter(
            f"{value!r} is not supported by pyhami (only {supported!r})", param_hint=flag
        )


def device_plugin(
    *,
    node_name: Annotated[
        str,
        typer.Option(
            envvar=["NodeName", "NODE_NAME"], help="This node (downward API spec.nodeName)"
        ),
    ] = "",
    config_file: Annotated[
        Path | None, typer.Option(envvar="CONFIG_FILE", help="HAMi device-config YAML")
    ] = None,
    node_config_file: Annotated[
        Path, typer.Option(envvar="NODE_CONFIG_FILE", help="per-node JSON (HAMi: fixed path)")
    ] = NODE_CONFIG_PATH,
    device_split_count: Annotated[int, typer.Option(envvar="DEVICE_SPLIT_COUNT")] = 10,
    device_memory_scaling: Annotated[float, typer.Option(envvar="DEVICE_MEMORY_SCALING")] = 1.0,
    device_cores_scaling: Annotated[float, typer.Option(envvar="DEVICE_CORES_SCALING")] = 1.0,
    disable_core_limit: Annotated[bool, typer.Option(envvar="DISABLE_CORE_LIMIT")] = False,
    resource_name: Annotated[str, typer.Option(envvar="RESOURCE_NAME")] = "nvidia.com/gpu",
    kubelet_socket: Annotated[
        str, typer.Option(envvar="KUBELET_SOCKET", help="empty: never register")
    ] = str(KUBELET_SOCKET),
    plugin_dir: Annotated[Path, typer.Option(envvar="PLUGIN_DIR")] = DEVICE_PLUGIN_PATH,
    hook_path: HookPathOption = "/usr/local",
    libvgpu_version: LibvgpuVersionOption = "v2.10.0",
    enable_topology_score: Annotated[
        str,
        typer.Option(envvar="ENABLE_TOPOLOGY_SCORE", help="exactly 'true' publishes pair scores"),
    ] = "",
    health_recovery_seconds: RecoveryOption = 300.0,
    fail_on_init_error: Annotated[bool, typer.Option(envvar="FAIL_ON_INIT_ERROR")] = True,
    kubeconfig: Annotated[str, typer.Option(envvar="KUBECONFIG")] = "",
    mig_strategy: Annotated[str, typer.Option(envvar="MIG_STRATEGY")] = "none",
    device_list_strategy: Annotated[str, typer.Option(envvar="DEVICE_LIST_STRATEGY")] = "envvar",
    device_id_strategy: Annotated[str, typer.Option(envvar="DEVICE_ID_STRATEGY")] = "uuid",
    pass_device_specs: Annotated[bool, typer.Option(envvar="PASS_DEVICE_SPECS")] = False,
    gdrcopy_enabled: Annotated[
        bool, typer.Option(envvar="GDRCOPY_ENABLED", help="NVIDIA_GDRCOPY=enabled in containers")
    ] = False,
    gds_enabled: Annotated[
        bool, typer.Option(envvar="GDS_ENABLED", help="NVIDIA_GDS=enabled in containers")
    ] = False,
    mofed_enabled: Annotated[
        bool, typer.Option(envvar="MOFED_ENABLED", help="NVIDIA_MOFED=enabled in containers")
    ] = False,
    imex_channel_ids: Annotated[
        str,
        typer.Option(
            envvar="IMEX_CHANNEL_IDS", help="IMEX channels to offer, comma-separated (only 0)"
        ),
    ] = "",
    imex_required: Annotated[
        bool, typer.Option(envvar="IMEX_REQUIRED", help="fail when an IMEX channel is missing")
    ] = False,
    nvidia_driver_root: Annotated[str, typer.Option(envvar="NVIDIA_DRIVER_ROOT")] = "/",
    dev_root: Annotated[
        str,
        typer.Option(
            "--nvidia-dev-root",
            "--dev-root",
            envvar="NVIDIA_DEV_ROOT",
            help="host root of /dev (empty: the driver root), where IMEX channels are looked up",
        ),
    ] = "",
    limit_control_namespaces: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-limit-control-namespace",
            help="namespace whose containers may switch libvgpu off with CUDA_DISABLE_CONTROL "
            "(repeatable)",
        ),
    ] = None,
    verbosity: KlogVerbosity = 0,
    debug: DebugOption = False,
    log_format: LogFormatOption = LogFormat.CONSOLE,
) -> None:
    """Run the NVIDIA device plugin on this node (kubelet gRPC, node registration, Allocate)."""
    debug = debug or verbosity >= DEBUG_VERBOSITY
    configure_logging(debug=debug, log_format=log_format)
    _refuse("--mig-strategy", mig_strategy, "none")
    _refuse("--device-list-strategy", device_list_strategy, "envvar")
    _refuse("--device-id-strategy", device_id_strategy, "uuid")
    _refuse("--pass-device-specs", pass_device_specs, False)
    check_node_flags(node_name, hook_path)
    flags = VgpuConfig(
        resource_name=resource_name,
        device_split_count=device_split_count,
        device_memory_scaling=device_memory_scaling,
        device_core_scaling=device_cores_scaling,
        disable_core_limit=disable_core_limit,
    )
    load = partial(load_config, flags, config_file, node_config_file, node_name)
    try:
        load()
        channels = imex_channels(
            parse_imex_channel_ids(imex_channel_ids),
            Path(dev_root or nvidia_driver_root),
            required=imex_required,
        )
    except (ConfigError, ToolkitConfigError) as error:
        fail("device-plugin", str(error))
    toolkit = ToolkitFeatures(
        gdrcopy=gdrcopy_enabled, gds=gds_enabled, mofed=mofed_enabled, imex_channels=channels
    )
    options = PluginOptions(
        node_name=node_name,
        plugin_dir=plugin_dir,
        kubelet_socket=Path(kubelet_socket) if kubelet_socket else None,
        settings=AllocationSettings(
            hook_path=PurePosixPath(hook_path),
            version=libvgpu_version,
            toolkit_env=toolkit.env(),
            limit_control_namespaces=frozenset(limit_control_namespaces or ()),
        ),
        topology_score=enable_topology_score == "true",
        health=HealthSettings(
            XidPolicy.from_environment(os.environ),
            recovery_after=health_recovery_seconds if health_recovery_seconds >= 0 else None,
        ),
    )
    check_kubeconfig(kubeconfig or None, "device-plugin")
    try:
        nvml = open_nvml()
    except NvmlUnavailableError as error:
        typer.echo(f"pyhami device-plugin: {error}", err=True)
        if fail_on_init_error:
            raise typer.Exit(1) from error
        asyncio.run(_idle())
        return
    try:
        run_service("device-plugin", _serve(kubeconfig, nvml, options, load), debug=debug)
    finally:
        nvml.close()


async def _idle() -> None:
    stop = stop_on_signals()
    typer.echo("FAIL_ON_INIT_ERROR=false: idling without GPUs until stopped", err=True)
    await stop.wait()


def stop_on_signals(plugin: DevicePlugin | None = None) -> asyncio.Event:
    """An event set on SIGINT, SIGTERM or SIGQUIT; SIGHUP restarts `plugin`."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        loop.add_signal_handler(sig, stop.set)
    if plugin is not None:
        loop.add_signal_handler(signal.SIGHUP, plugin.request_restart)
    return stop


async def _serve(
    kubeconfig: str, nvml: Nvml, options: PluginOptions, load: Callable[[], VgpuConfig]
) -> None:
    async with await KubeClient.from_kubeconfig(kubeconfig or None) as kube:
        plugin = DevicePlugin(kube, nvml, options, load)
        await plugin.run(stop_on_signals(plugin))
