"""Tests of the vGPU monitor."""
