"""What every pyhami HTTP listener shares: limits that slow or numerous clients cannot exhaust."""

from pyhami.serving.listener import (
    BodyTimeoutError,
    ConnectionGuard,
    ConnectionLimits,
    Handler,
    read_body,
)

__all__ = ["BodyTimeoutError", "ConnectionGuard", "ConnectionLimits", "Handler", "read_body"]
