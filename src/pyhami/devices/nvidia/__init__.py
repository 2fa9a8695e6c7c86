"""The NVIDIA backend (HAMi `pkg/device/nvidia`): requests, Fit, MIG and topology choices."""
