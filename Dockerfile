# Rover's image: the rover binary (operator, master and node agent; also
# dlrover-run), Python 3 with Debian's PyTorch, the rover Python package and
# the examples. The operator, the master pods and the worker pods all run it:
#
#   docker build -t rover:latest .
#   docker build --build-arg VERSION=$(git describe --always --dirty) -t rover:latest .
#
# deploy/deploy_test.go checks this file against the tree and the manifests.

# The Go version follows go.mod's go directive.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# cgo for NVML (internal/nvml: GPU health; libnvidia-ml is loaded at run time,
# from the NVIDIA container runtime, and a node without it runs without).
RUN CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations go build -tags nvml -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/rover ./cmd/rover

# Debian's python3-torch: the PyTorch the project tests with (scripts/find-python).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 python3-torch \
 && rm -rf /var/lib/apt/lists/*
# A non-root user; its uid is the operator Deployment's runAsUser.
RUN groupadd --gid 65532 rover \
 && useradd --uid 65532 --gid 65532 --home-dir /home/rover --create-home --shell /usr/sbin/nologin rover \
 && install -d -o 65532 -g 65532 /workspace
COPY --from=build /out/rover /usr/local/bin/rover
RUN ln -s rover /usr/local/bin/dlrover-run
# rover run puts its own copy of the package on its workers' PYTHONPATH; this
# one serves python3 run by hand.
COPY python/rover /opt/rover/python/rover
ENV PYTHONPATH=/opt/rover/python \
    PYTHONDONTWRITEBYTECODE=1
# Jobs name their script relative to here (examples/ddp/train.py) and write
# their checkpoints here, so the user owns it.
COPY --chown=65532:65532 examples /workspace/examples
WORKDIR /workspace
USER 65532:65532
CMD ["rover", "help"]
