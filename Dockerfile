# syntax=docker/dockerfile:1
#
# chatd images. Two runtime targets:
#   gpu (default)  NVIDIA CUDA 12 runtime + cuDNN 9, onnxruntime-node with its CUDA 12 provider,
#                  and the Vulkan loader, glvnd and Mesa's GPU drivers for onnxruntime's WebGPU
#                  provider (NVIDIA, AMD and Intel GPUs; docs/deployment.md)
#   cpu            slim Node 24, CPU only
#
#   docker build -t chatd:gpu .
#   docker build -t chatd:cpu --target cpu .
#
# No secrets are baked in: HF_TOKEN, keys and passwords come from the environment
# at run time (docker compose reads them from .env). Model files and the SQLite
# database live on volumes (/models, /data), never in the image.

ARG NODE_IMAGE=node:24-bookworm-slim
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04

# ---------------------------------------------------------------------------
# deps: production dependencies. The `node` dev dependency (Node 24 for npm
# scripts) is left out: the images run on the base image's own Node 24.
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# onnxruntime-node's install script would download CUDA libraries: right only for
# the GPU image. package.json's allowScripts denies it on npm 11.16 and newer; the
# variable makes the script itself skip under an npm that predates allowScripts.
RUN ONNXRUNTIME_NODE_INSTALL=skip npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# ---------------------------------------------------------------------------
# deps-cuda: the same, plus onnxruntime-node's CUDA 12 execution provider
# libraries, fetched by running its install script explicitly (the only place
# it runs).
FROM deps AS deps-cuda
RUN ONNXRUNTIME_NODE_INSTALL=cuda12 node node_modules/onnxruntime-node/script/install.js \
 && test -f node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime_providers_cuda.so

# ---------------------------------------------------------------------------
# app: chatd's own files (which ones: see .dockerignore, an allowlist).
FROM ${NODE_IMAGE} AS app
WORKDIR /app
COPY . .

# ---------------------------------------------------------------------------
# cpu: slim Node 24, CPU inference. GLIBC_TUNABLES (both stages) has glibc's
# malloc ask for transparent huge pages: a decode step streams every weight,
# and 2 MiB pages spare it ~250,000 TLB misses (decode +3-9% on a 2-core host).
FROM ${NODE_IMAGE} AS cpu
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    MODELS_FILE=/app/models/models.json \
    MODELS_DIR=/models \
    DATABASE_URL=sqlite:///data/chatd.db \
    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 \
    ONNX_DEVICE=cpu
WORKDIR /app
RUN groupadd --system --gid 10001 chatd \
 && useradd --system --uid 10001 --gid chatd --home-dir /app --shell /usr/sbin/nologin chatd \
 && mkdir -p /models /data && chown chatd:chatd /models /data
COPY --from=deps /app/node_modules ./node_modules
COPY --from=app /app ./
USER chatd
VOLUME ["/models", "/data"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "bin/chatd.js"]
CMD ["serve"]

# ---------------------------------------------------------------------------
# node: where the GPU image takes its Node 24 from.
FROM ${NODE_IMAGE} AS node

# ---------------------------------------------------------------------------
# gpu: CUDA 12 runtime with cuDNN 9 (what onnxruntime-node's CUDA provider
# links against), Node 24 copied in; ONNX_DEVICE=auto takes CUDA when it loads,
# then a real GPU through WebGPU, else the CPU (docker-compose.gpu.yml asks for
# one by name, so a GPU that cannot be used is an error).
#
# WebGPU is built into onnxruntime-node's own library (Dawn) and runs over
# Vulkan: the image carries the Vulkan loader and glvnd (NVIDIA's Vulkan driver,
# libGLX_nvidia.so.0, which the NVIDIA runtime mounts with its ICD file when
# NVIDIA_DRIVER_CAPABILITIES includes graphics, needs glvnd), and Mesa's Vulkan
# drivers for AMD and Intel GPUs, without Mesa's software renderer (lavapipe):
# a CPU-speed "GPU" is never what a GPU image should run on. Dawn wants a
# writable XDG_RUNTIME_DIR.
FROM ${CUDA_IMAGE} AS gpu
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    MODELS_FILE=/app/models/models.json \
    MODELS_DIR=/models \
    DATABASE_URL=sqlite:///data/chatd.db \
    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 \
    ONNX_DEVICE=auto \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics \
    XDG_RUNTIME_DIR=/run/chatd
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libvulkan1 libglvnd0 libglx0 libegl1 libgl1 libopengl0 libgles2 mesa-vulkan-drivers \
 && rm -f /usr/share/vulkan/icd.d/lvp_icd*.json \
 && rm -rf /var/lib/apt/lists/*
COPY --from=node /usr/local/bin/node /usr/local/bin/node
# Fails the build here, not at start, if this base image cannot run that Node.
RUN node --version
WORKDIR /app
RUN groupadd --system --gid 10001 chatd \
 && useradd --system --uid 10001 --gid chatd --home-dir /app --shell /usr/sbin/nologin chatd \
 && mkdir -p /models /data /run/chatd && chown chatd:chatd /models /data /run/chatd && chmod 700 /run/chatd
COPY --from=deps-cuda /app/node_modules ./node_modules
COPY --from=app /app ./
USER chatd
VOLUME ["/models", "/data"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "bin/chatd.js"]
CMD ["serve"]
