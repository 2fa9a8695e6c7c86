# One image for every pyhami component: the scheduler extender, the device plugin and the monitor.
# Never built in this project's CI (no Docker daemon there); tests/chart/test_dockerfile.py checks
# what can be checked without one.

# Stage 1: HAMi-core's replacement, native/libvgpu, compiled against the CUDA headers only
# (the driver's libcuda/libnvidia-ml are resolved at run time inside GPU workloads).
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04 AS libvgpu
COPY native/libvgpu /src/libvgpu
RUN make -C /src/libvgpu lib BUILD=/out CUDA_INCLUDE=/usr/local/cuda/include

# Stage 2: pyhami as a wheel, so the runtime image carries no build tools or sources.
FROM python:3.11-slim AS wheel
COPY pyproject.toml README.md /src/pyhami/
COPY src /src/pyhami/src
RUN pip wheel --no-cache-dir --wheel-dir /wheels /src/pyhami

# Stage 3: runtime.
FROM python:3.11-slim
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --system --uid 10001 --no-create-home pyhami
# The device plugin's start script copies this file to <global.gpuHookPath>/vgpu on each node.
COPY --from=libvgpu /out/libvgpu.so /opt/pyhami/lib/libvgpu.so
# The scheduler extender runs as this user; the device plugin and the monitor need host access
# (device-plugin socket, hostPath dirs, NVML) and run as root with the chart's securityContext.
USER 10001
ENTRYPOINT ["pyhami"]
CMD ["--help"]
