"""The kubelet-facing gRPC side: the DRAPlugin service and the Registration service.

kubelet finds `<registry dir>/gpu.pyhami.io-reg.sock`, asks `GetInfo` (type DRAPlugin, our
endpoint, the services we serve) and answers with `NotifyRegistrationStatus`; then it calls
`NodePrepareResources` / `NodeUnprepareResources` on `<plugins dir>/gpu.pyhami.io/dra.sock`.
Each claim gets its own answer: a claim that cannot be prepared carries its error and never
fails the call for the others.
"""

import logging
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from pyhami.dra.api import (
    DRA_PLUGIN_SERVICE,
    DRIVER,
    PLUGIN_TYPE,
    dra_pb2,
    dra_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from pyhami.dra.checkpoint import PreparedClaim
from pyhami.dra.prepare import ClaimKey, PrepareError, Preparer

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]


def _response(prepared: PreparedClaim) -> dra_pb2.NodePrepareResourceResponse:
    devices = [
        dra_pb2.Device(
            request_names=list(device.requests),
            pool_name=device.pool,
            device_name=device.device,
            cdi_device_ids=list(prepared.cdi_ids),
            share_id=device.share_id,  # None leaves the optional field unset
        )
        for device in prepared.devices
    ]
    return dra_pb2.NodePrepareResourceResponse(devices=devices)


class DRAPluginServicer(dra_pb2_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer) -> None:
        self._preparer = preparer

    async def NodePrepareResources(
        self, request: dra_pb2.NodePrepareResourcesRequest, context: Context
    ) -> dra_pb2.NodePrepareResourcesResponse:
        response = dra_pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            key = ClaimKey(claim.namespace, claim.name, claim.uid)
            try:
                prepared = await self._preparer.prepare(key)
            except PrepareError as error:
                log.error("NodePrepareResources: %s", error)
                response.claims[claim.uid].error = str(error)
            except Exception as error:
                log.exception("NodePrepareResources failed unexpectedly for claim %s", key)
                response.claims[claim.uid].error = f"{DRIVER}: preparing failed: {error}"
            else:
                response.claims[claim.uid].CopyFrom(_response(prepared))
        return response

    async def NodeUnprepareResources(
        self, request: dra_pb2.NodeUnprepareResourcesRequest, context: Context
    ) -> dra_pb2.NodeUnprepareResourcesResponse:
        response = dra_pb2.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            try:
                await self._preparer.unprepare(claim.uid)
            except Exception as error:
                log.exception("NodeUnprepareResources failed for claim %s", claim.uid)
                response.claims[claim.uid].error = f"{DRIVER}: unpreparing failed: {error}"
            else:
                response.claims[claim.uid].SetInParent()
        return response


class RegistrationServicer(pluginregistration_pb2_grpc.RegistrationServicer):
    """What kubelet's plugin watcher asks on the registration socket."""

    def __init__(self, endpoint: Path) -> None:
        self._endpoint = endpoint
        self.registered: bool | None = None  # kubelet's last word
        self.error = ""

    async def GetInfo(
        self, request: pluginregistration_pb2.InfoRequest, context: Context
    ) -> pluginregistration_pb2.PluginInfo:
        return pluginregistration_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRIVER,
            endpoint=str(self._endpoint),
            supported_versions=[DRA_PLUGIN_SERVICE],
        )

    async def NotifyRegistrationStatus(
        self, request: pluginregistration_pb2.RegistrationStatus, context: Context
    ) -> pluginregistration_pb2.RegistrationStatusResponse:
        self.registered = request.plugin_registered
        self.error = request.error
        if request.plugin_registered:
            log.info("kubelet registered DRA driver %s", DRIVER)
        else:
            log.error("kubelet refused DRA driver %s: %s", DRIVER, request.error)
        return pluginregistration_pb2.RegistrationStatusResponse()
