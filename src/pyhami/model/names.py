"""Names that must not be confused with one another."""

from typing import NewType

NodeName = NewType("NodeName", str)
PodUID = NewType("PodUID", str)
