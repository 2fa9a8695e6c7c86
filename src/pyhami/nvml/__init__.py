"""NVML behind a small interface: the real one on nvidia-ml-py, faked in pyhami.testing."""
