# Comb's image: `comb serve` and `comb loadtest` in one static binary.
#
# Stage 1 builds cmd/comb with the Go release go.mod names; stage 2 is a
# distroless image with the binary and deploy/comb.conf. PostgreSQL is not
# in the image: in docker-compose.yml it is its own service, and serve gets
# -postgres-url (its password in PGPASSWORD).
#
# Authentication is on: comb.conf requires a NATS token, read from the
# environment variable COMB_NATS_TOKEN, which has no default: without it
# the container exits with an error saying so.
FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/comb ./cmd/comb \
	&& mkdir -p /out/data /out/loadtest

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/comb /usr/local/bin/comb
COPY deploy/comb.conf /etc/comb/comb.conf
# comb.conf plus a route listener, for several bridges in one cluster.
COPY deploy/comb-cluster.conf /etc/comb/comb-cluster.conf
# Writable by the nonroot user: serve's -data-dir and the loader's -out.
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build --chown=65532:65532 /out/loadtest /out
# NATS clients, NATS monitoring, NATS routes (comb-cluster.conf).
EXPOSE 4222 8222 6222
ENTRYPOINT ["/usr/local/bin/comb"]
CMD ["serve", "-config", "/etc/comb/comb.conf", "-data-dir", "/data"]
