# syntax=docker/dockerfile:1
# Build: docker build -t vigil .
# Run:   docker run -p 8080:8080 vigil serve --backend http://vllm:8000

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# cgo stays on: the GPU sampler loads libnvidia-ml at run time through go-nvml.
RUN go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/vigil ./cmd/vigil

FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/vigil /usr/local/bin/vigil
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/vigil"]
CMD ["serve", "--config", "/etc/vigil/vigil.yaml"]
