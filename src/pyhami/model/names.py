"""Names that must not be confused with one another."""

from typing import NewType

NodeName = NewType("NodeName", str)
CardUUID = NewType("CardUUID", str)
PodUID = NewType("PodUID", str)
# A device backend's common word: "NVIDIA", "MLU", "DCU", ... (HAMi's CommonWord()).
VendorKey = NewType("VendorKey", str)
