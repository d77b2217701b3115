# The pipeline image: a static binary on a distroless base with CA
# certificates, run as a non-root user.
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t pipeline .
#   docker run -v $PWD/pipeline.yaml:/etc/pipeline/pipeline.yaml:ro -p 9090:9090 pipeline
#
# Metrics are served only when the configuration sets metrics.listen (":9090"
# to match EXPOSE below).

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so that a code change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/pipeline-run/pipeline/cli.Version=${VERSION}" \
    -o /out/pipeline ./cmd/pipeline

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/pipeline /pipeline
USER nonroot:nonroot
EXPOSE 9090
ENTRYPOINT ["/pipeline"]
CMD ["run", "-c", "/etc/pipeline/pipeline.yaml"]
