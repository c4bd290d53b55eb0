# syntax=docker/dockerfile:1
#
# Service Deck for a GPU host: Node 20, the compiled service, a CUDA build of llama-server,
# whisper.cpp (CPU) and espeak-ng / pocketsphinx for the speech workers. See docs/operations.md ("Containers").
#
# Build (needs network access for apt, nodejs.org and the npm registry):
#   docker build -t service-deck .
#   docker build --build-arg CUDA_ARCHITECTURES=90 -t service-deck .   # H100/H200 only: faster
#
# Run (needs the NVIDIA Container Toolkit and a driver that supports CUDA_VERSION):
#   docker run -d --name service-deck --gpus all --pid=host --stop-timeout 75 \
#     -p 127.0.0.1:8110:8110 -p 127.0.0.1:8120:8120 \
#     -v service-deck-state:/var/lib/service-deck \
#     -v /srv/models:/models:ro \
#     -e SERVICE_DECK_ADMIN_PASSWORD='a long operator password' \
#     service-deck
#   docker logs service-deck     # the API token, printed once at the first start
# --pid=host: nvidia-smi reports host pids, and the GPU probe tells the service's own workers
# from foreign GPU processes by pid (docs/operations.md, "Containers").
#
# Inside a container 127.0.0.1 cannot be reached from the host. So the admin listener binds
# 0.0.0.0 (CMD below), and the operator publishes the ports to 127.0.0.1 on the host as above,
# never to all interfaces. Remote clients come in through the operator's own port forward. The
# inference listener also has to bind 0.0.0.0: once, while it is stopped, log in and send
#   POST /api/v1/endpoint/config {"host":"0.0.0.0","port":8120}
# then POST /api/v1/endpoint/start. Both are remembered in the state volume.

ARG CUDA_VERSION=12.8.1
ARG UBUNTU_VERSION=24.04

# ---------------------------------------------------------------------------------------------
# base: the CUDA development image with a compiler, cmake, git and Node 20.
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu${UBUNTU_VERSION} AS base

ARG DEBIAN_FRONTEND=noninteractive
ARG NODE_VERSION=20.20.2
# llama.cpp's own CUDA Dockerfile builds with gcc 14 on Ubuntu 24.04; CUDA 12.8 supports it.
ARG GCC_VERSION=14

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake git ca-certificates curl xz-utils \
      "gcc-${GCC_VERSION}" "g++-${GCC_VERSION}" \
 && rm -rf /var/lib/apt/lists/*

# Node 20 from the official tarball, checked against the release's SHASUMS256.txt. The runtime
# stage copies /opt/node.
RUN set -eu; \
    case "$(dpkg --print-architecture)" in \
      amd64) arch=x64 ;; \
      arm64) arch=arm64 ;; \
      *) echo "no Node build for $(dpkg --print-architecture)" >&2; exit 1 ;; \
    esac; \
    tarball="node-v${NODE_VERSION}-linux-${arch}.tar.xz"; \
    cd /tmp; \
    curl -fsSLO "https://nodejs.org/dist/v${NODE_VERSION}/${tarball}"; \
    curl -fsSLO "https://nodejs.org/dist/v${NODE_VERSION}/SHASUMS256.txt"; \
    grep " ${tarball}\$" SHASUMS256.txt | sha256sum -c -; \
    mkdir -p /opt/node; \
    tar -xJf "${tarball}" -C /opt/node --strip-components=1 --no-same-owner; \
    rm -f "${tarball}" SHASUMS256.txt; \
    /opt/node/bin/node --version
ENV PATH=/opt/node/bin:$PATH

# ---------------------------------------------------------------------------------------------
# llama: llama-server and llama-fit-params with CUDA, from the llama.cpp source that the
# node-llama-cpp package ships (llama/gitRelease.bundle).
FROM base AS llama

ARG GCC_VERSION=14
ARG NODE_LLAMA_CPP_VERSION=3.22.1
# Empty: llama.cpp's default list of CUDA architectures. For example "90" (H100/H200) or "89;90".
ARG CUDA_ARCHITECTURES=

# node-llama-cpp is not yet a dependency in package.json (the chat issue adds it). It is
# installed here, in a folder of its own, only to get that bundle: no install scripts and no
# prebuilt binaries (optional dependencies). Once package.json has it, the bundle is at
# /app/node_modules/node-llama-cpp/llama/gitRelease.bundle after `npm ci`.
WORKDIR /build
RUN npm install --no-save --ignore-scripts --omit=optional --no-audit --no-fund \
      "node-llama-cpp@${NODE_LLAMA_CPP_VERSION}" \
 && git clone --quiet node_modules/node-llama-cpp/llama/gitRelease.bundle llama.cpp

# GGML_NATIVE=OFF: there is no GPU at build time, and the binary must not depend on the build
# machine's CPU. Static libraries make llama-server one binary. It needs only the CUDA runtime
# libraries of the runtime image, and libcuda.so.1, which the NVIDIA Container Toolkit brings
# from the host driver. At build time the linker sees only the CUDA stub, so shared-library
# symbols are allowed to stay undefined, as in llama.cpp's own CUDA Dockerfile. No web UI and no
# HTTPS: the service talks to llama-server over loopback only.
WORKDIR /build/llama.cpp
RUN export CC="gcc-${GCC_VERSION}" CXX="g++-${GCC_VERSION}" CUDAHOSTCXX="g++-${GCC_VERSION}" \
 && cmake -B build \
      -DCMAKE_BUILD_TYPE=Release \
      -DGGML_CUDA=ON \
      -DLLAMA_CURL=OFF \
      -DGGML_NATIVE=OFF \
      -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_OPENSSL=OFF \
      -DLLAMA_USE_PREBUILT_UI=OFF \
      -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF \
      -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined \
      ${CUDA_ARCHITECTURES:+"-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}"} \
 && cmake --build build --config Release --target llama-server llama-fit-params -j"$(nproc)" \
 && install -D -m 0755 build/bin/llama-server /opt/llama.cpp/bin/llama-server \
 && install -D -m 0755 build/bin/llama-fit-params /opt/llama.cpp/bin/llama-fit-params

# ---------------------------------------------------------------------------------------------
# whisper: whisper-server and whisper-cli (the whisper.cpp STT backend, CPU only as spec 3.5 has
# it), from the whisper.cpp source that the nodejs-whisper package ships (cpp/whisper.cpp), with
# the flags of scripts/build-whisper.sh. GGML_NATIVE=OFF: the binary must not depend on the build
# machine's CPU. Static libraries: one binary each, needing only libgomp and the C++ runtime.
FROM base AS whisper

ARG NODEJS_WHISPER_VERSION=0.3.1
WORKDIR /build
RUN npm pack --silent "nodejs-whisper@${NODEJS_WHISPER_VERSION}" \
 && tar -xzf "nodejs-whisper-${NODEJS_WHISPER_VERSION}.tgz" package/cpp/whisper.cpp
WORKDIR /build/package/cpp/whisper.cpp
RUN cmake -B build \
      -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_SHARED_LIBS=OFF \
      -DGGML_NATIVE=OFF \
      -DGGML_CUDA=OFF \
      -DWHISPER_BUILD_TESTS=OFF \
      -DWHISPER_BUILD_EXAMPLES=ON \
      -DWHISPER_BUILD_SERVER=ON \
      -DWHISPER_SDL2=OFF \
      -DWHISPER_CURL=OFF \
      -DWHISPER_COMMON_FFMPEG=OFF \
 && cmake --build build --config Release --target whisper-server whisper-cli -j"$(nproc)" \
 && install -D -m 0755 build/bin/whisper-server /opt/whisper.cpp/bin/whisper-server \
 && install -D -m 0755 build/bin/whisper-cli /opt/whisper.cpp/bin/whisper-cli

# ---------------------------------------------------------------------------------------------
# app: the service compiled to dist/, and its production dependencies.
FROM base AS app

WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY . .
RUN chmod 0755 bin/service-deck.js \
 && npm run build \
 && mkdir /prod \
 && cp package.json package-lock.json /prod/ \
 && cd /prod \
 && npm ci --omit=dev --ignore-scripts --no-audit --no-fund

# ---------------------------------------------------------------------------------------------
# runtime: the CUDA runtime image (cudart, cuBLAS) with Node 20, the service and llama-server.
FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu${UBUNTU_VERSION} AS runtime

ARG DEBIAN_FRONTEND=noninteractive

# espeak-ng (TTS) and pocketsphinx with its en-us model (STT) for the speech workers (issue 5);
# libgomp1 for llama-server (OpenMP); tini as PID 1, so that signals reach node and exited
# children are reaped.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      espeak-ng pocketsphinx pocketsphinx-en-us libgomp1 tini \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --home-dir /home/service-deck --shell /usr/sbin/nologin \
      --uid 10001 --user-group service-deck \
 && install -d -m 0700 -o service-deck -g service-deck /var/lib/service-deck

COPY --from=base /opt/node /opt/node
COPY --from=llama /opt/llama.cpp /opt/llama.cpp
COPY --from=whisper /opt/whisper.cpp /opt/whisper.cpp
WORKDIR /opt/service-deck
COPY --from=app /app/package.json ./package.json
COPY --from=app /prod/node_modules ./node_modules
COPY --from=app /app/dist ./dist
COPY --from=app /app/bin ./bin
# The command `service-deck`, as npm would link it from package.json "bin".
RUN ln -s /opt/service-deck/bin/service-deck.js /usr/local/bin/service-deck

# The runtime lookup takes SERVICE_DECK_LLAMA_SERVER first. llama-fit-params sits beside it and
# on PATH. NODE_ENV=production refuses the development-only inspector relay. The inference port
# is limited to the published range 8120-8124 (docs/operations.md, "Port range").
ENV PATH=/opt/llama.cpp/bin:/opt/node/bin:$PATH \
    NODE_ENV=production \
    SERVICE_DECK_STATE_DIR=/var/lib/service-deck \
    SERVICE_DECK_LLAMA_SERVER=/opt/llama.cpp/bin/llama-server \
    SERVICE_DECK_WHISPER_SERVER=/opt/whisper.cpp/bin/whisper-server \
    SERVICE_DECK_WHISPER_CLI=/opt/whisper.cpp/bin/whisper-cli \
    SERVICE_DECK_API_PORTS=8120-8124

VOLUME ["/var/lib/service-deck"]
USER service-deck
EXPOSE 8110 8120-8124

# Every inference route, /health included, needs the bearer token, so the check only opens a TCP
# connection to the admin listener.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "require('node:net').connect(Number(process.env.SERVICE_DECK_UI_PORT || 8110), '127.0.0.1').on('connect', () => process.exit(0)).on('error', () => process.exit(1))"]

ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["service-deck", "serve", "--ui-host", "0.0.0.0"]
