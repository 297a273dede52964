# The otelcol-dedup distribution as a container image: the build stage runs
# ocb on builder-config.yaml exactly as `make build` does (ocb v0.165.0, the
# version of go.mod's tool line, run as `go tool builder`), producing a static
# binary (CGO_ENABLED=0, which is also ocb's default); the image is distroless
# static, runs as a non-root user, and listens on 0.0.0.0 with
# deploy/image/config.yaml unless given another --config.
#
#   docker build -t otelcol-dedup .
#   docker run --rm -p 4317:4317 -p 4318:4318 -p 8888:8888 -p 13133:13133 otelcol-dedup
#
# internal/docscheck (TestImage*) keeps this file in step with the Makefile,
# builder-config.yaml and go.mod, and runs its build stage outside Docker.

# The Go release of go.mod's go line.
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Module files first: the dependency download is a layer of its own, reused
# until they change.
COPY go.mod go.sum ./
COPY processor/dedupprocessor/go.mod processor/dedupprocessor/go.sum ./processor/dedupprocessor/
RUN go mod download
COPY builder-config.yaml ./
COPY processor/dedupprocessor/ ./processor/dedupprocessor/
ENV CGO_ENABLED=0
RUN go tool builder --config builder-config.yaml --gcflags=all=-dwarf=false

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/_build/otelcol-dedup /otelcol-dedup
COPY deploy/image/config.yaml /etc/otelcol-dedup/config.yaml
# distroless's nonroot user.
USER 65532:65532
# OTLP gRPC, OTLP HTTP, internal metrics (Prometheus), health_check.
EXPOSE 4317 4318 8888 13133
ENTRYPOINT ["/otelcol-dedup"]
CMD ["--config", "/etc/otelcol-dedup/config.yaml"]
