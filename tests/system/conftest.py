"""What the system tests share: the checkout's root, and the built libvgpu's description (the
`native` fixture that builds it is in tests/conftest.py)."""

from pathlib import Path

from pyhami.testing.native_build import Native

ROOT = Path(__file__).resolve().parents[2]
__all__ = ["ROOT", "Native"]
