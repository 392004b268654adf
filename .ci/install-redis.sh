#!/usr/bin/env bash
# Installs redis-server and redis-tools (redis-benchmark, redis-cli) for the proxy_redis test,
# when they are missing. CI runs as root on Debian; elsewhere this only reports what is missing,
# and the tests that need them are skipped (failed under CI=true), which `cargo xtask test`'s
# summary lists.
set -euo pipefail

missing=()
for bin in redis-server redis-benchmark redis-cli; do
    command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-redis: redis-server, redis-benchmark and redis-cli are present"
    exit 0
fi

echo "install-redis: missing ${missing[*]}"
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-redis: not root or no apt-get; install redis-server and redis-tools by hand" >&2
    echo "install-redis: (without them cargo xtask test skips the redis tests and says so)" >&2
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends: the server binary only; the packaged service is never started
# (no init system in CI containers), the test starts its own redis-server on a free port.
apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
for bin in redis-server redis-benchmark redis-cli; do
    command -v "$bin" >/dev/null 2>&1 || { echo "install-redis: $bin still missing" >&2; exit 1; }
done
echo "install-redis: installed $(redis-server --version | head -n1)"
