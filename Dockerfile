# The vgpud image for real clusters. It cannot be built on the project's
# test machines (no Docker, no registry); scripts/images.sh builds the
# equivalent OCI image there from bin/vgpud.
#
# go-nvml uses cgo and loads libnvidia-ml.so.1 at run time (the NVIDIA
# container runtime mounts it), so the binary links glibc: the run stage is
# distroless/base (glibc, CA certificates, no shell).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# .dockerignore keeps .git out of the context: pass the commit in.
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=1 go build -trimpath -tags urfave_cli_no_docs \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/vgpud .

FROM gcr.io/distroless/base-debian12
COPY --from=build /out/vgpud /usr/bin/vgpud
ENTRYPOINT ["/usr/bin/vgpud"]
