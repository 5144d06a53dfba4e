# simdedup: a small runtime image with the `simdedup` binary as entrypoint.
#
#   docker build -t simdedup:latest .
#   docker run --rm -e SIMDEDUP_REDIS_URL=redis://redis:6379 simdedup:latest worker
#
# Stage 1 builds the dependencies alone (cached until Cargo.toml/Cargo.lock
# change), then the crate. Stage 2 is Debian slim with the binary and a
# non-root user. tests/it/deploy.rs checks this file against the code (port,
# binary name, copied paths).

# ---- build ------------------------------------------------------------------
# Same Debian release as the runtime stage (glibc must match). The crate's MSRV
# is `rust-version` of Cargo.toml; 1.95 is the toolchain it is developed and tested with.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src

# Dependency layer: the manifests plus stub targets, so `cargo build` compiles
# every dependency and nothing of ours. Re-run only when the manifests change.
# The workspace's bench tool is not built; cargo needs its manifest and a
# target to load the workspace, so it keeps its stubs.
COPY Cargo.toml Cargo.lock ./
COPY simdedup-bench/Cargo.toml ./simdedup-bench/
RUN mkdir -p src benches simdedup-bench/src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs simdedup-bench/src/lib.rs \
 && echo 'fn main() {}' > simdedup-bench/src/main.rs \
 && echo 'fn main() {}' > benches/fingerprint.rs \
 && echo 'fn main() {}' > benches/normalize.rs \
 && cargo build --profile dist --locked --bin simdedup \
 && rm -rf src benches

# The crate itself. `include_str!` pulls in lua/, src/stopwords/ and the
# bundled sample (examples/articles.jsonl, for `simdedup demo`).
COPY src ./src
COPY lua ./lua
COPY benches ./benches
COPY examples ./examples
# COPY keeps the files' times, which may be older than the stub build: touch
# the crate roots so cargo rebuilds them.
RUN touch src/main.rs src/lib.rs \
 && cargo build --profile dist --locked --bin simdedup \
 && cp target/dist/simdedup /usr/local/bin/simdedup

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim AS runtime
# The binary needs glibc and libgcc (both in the base) and, for rediss:// URLs,
# the system's CA roots (ca-certificates; a private CA: mount it and set
# SSL_CERT_FILE). No curl.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 simdedup \
 && useradd --system --uid 10001 --gid simdedup --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin simdedup
COPY --from=build /usr/local/bin/simdedup /usr/local/bin/simdedup
COPY examples/articles.jsonl /usr/share/simdedup/articles.jsonl

# The worker's HTTP listener (/metrics, /healthz, /readyz) defaults to
# 127.0.0.1:9464; in a container it must listen on every interface.
ENV SIMDEDUP_WORKER__HTTP_ADDR=0.0.0.0:9464
EXPOSE 9464

USER 10001:10001

# /healthz answers 200 while the worker's main loop runs. bash (Essential in
# Debian) speaks HTTP through /dev/tcp, so the image needs no curl. For the
# one-shot commands (produce, stats) disable it (compose: healthcheck: disable).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9464 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]

ENTRYPOINT ["/usr/local/bin/simdedup"]
CMD ["worker"]
