# The placement service as a container image: a release build in the Rust
# image, then only the binary on Debian slim. The image has no PostgreSQL:
# set DATABASE_URL (docker-compose.yml runs postgres:15 beside it).
#
# The container listens on all its interfaces, so it authenticates every
# caller with Keystone; its settings come from the environment:
#
#   docker build -t placement .
#   docker run -p 8778:8778 \
#     -e DATABASE_URL=postgres://user:pass@host:5432/placement \
#     -e PLACEMENT_KEYSTONE_URL=http://keystone:5000/v3 \
#     -e PLACEMENT_KEYSTONE_USERNAME=placement -e PLACEMENT_KEYSTONE_PASSWORD=... \
#     -e PLACEMENT_KEYSTONE_PROJECT=service placement
#
# For a throwaway test without Keystone, choose noauth2 explicitly
# (-e PLACEMENT_AUTH_STRATEGY=noauth2): anyone reaching the port is then
# admin, and the server says so at every start.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# Everything the manifest names (benches and tests are declared targets).
COPY Cargo.toml Cargo.lock build.rs ./
COPY src src
COPY migrations migrations
COPY data data
COPY ui ui
COPY benches benches
COPY tests tests
COPY testkit testkit
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin placement \
    && cp target/release/placement /usr/local/bin/placement

FROM debian:bookworm-slim
# ca-certificates: the system roots for an https Keystone and for
# PostgreSQL with sslmode=verify-full.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home placement
COPY --from=build /usr/local/bin/placement /usr/local/bin/placement
USER placement
# MIMALLOC_ALLOW_THP=0: no transparent huge pages for this process, also
# on hosts whose THP setting is `always` (docs/operating.md).
ENV PLACEMENT_BIND=0.0.0.0:8778 \
    PLACEMENT_AUTH_STRATEGY=keystone \
    MIMALLOC_ALLOW_THP=0 \
    RUST_LOG=info
EXPOSE 8778
ENTRYPOINT ["placement"]
CMD ["serve"]
