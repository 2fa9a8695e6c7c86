# One image for every pyhami component: libvgpu built from native/libvgpu, pyhami installed.
FROM debian:bookworm-slim AS libvgpu
RUN apt-get update && apt-get install -y --no-install-recommends build-essential && rm -rf /var/lib/apt/lists/*
COPY native/libvgpu /src/libvgpu
RUN make -C /src/libvgpu

FROM python:3.11-slim
COPY . /src/pyhami
RUN pip install --no-cache-dir /src/pyhami && rm -rf /src/pyhami
COPY --from=libvgpu /src/libvgpu/build/ /opt/pyhami/lib/
ENTRYPOINT []
