#!/usr/bin/env bash
# Prints the path of a nats-server that a Troupe cluster may run on (2.9.21 or later; older releases store two
# compare-and-set writes at the same revision on a replicated stream, nats-io/nats-server#4320), fetching
# Debian's when none is at hand. Debian bookworm ships 2.9.10; its package from trixie (2.10) is a plain Go
# binary that runs on bookworm. Tried in order: $NATS_CLUSTER_SERVER_BIN, $NATS_SERVER_BIN or nats-server
# on PATH, .tmp/nats-server/nats-server (a fetch made before), then a fetch into .tmp/nats-server/ with
# apt-get (signed by Debian's archive keys, as any apt install; nothing is installed on the system).
#
#   scripts/nats-server.sh            # the path on stdout, what it did on stderr; exit 1 when it found none
#   NATS_SERVER_BIN=$(scripts/nats-server.sh) npx troupe cluster up
set -euo pipefail
cd "$(dirname "$0")/.."
MIN=2.9.21
DIR=.tmp/nats-server
SUITE=${NATS_SERVER_SUITE:-trixie}

version_of() { "$1" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1 || true; }
good() {
  local v
  v=$(version_of "$1")
  [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$MIN" "$v" | sort -V | head -1)" = "$MIN" ]
}
use() {
  echo "nats-server for clusters: $1 ($(version_of "$1"))" >&2
  case "$1" in */*) realpath "$1" ;; *) command -v "$1" ;; esac
  exit 0
}

if [ -n "${NATS_CLUSTER_SERVER_BIN:-}" ]; then
  good "$NATS_CLUSTER_SERVER_BIN" && use "$NATS_CLUSTER_SERVER_BIN"
  echo "NATS_CLUSTER_SERVER_BIN=$NATS_CLUSTER_SERVER_BIN is not nats-server $MIN or later ($(version_of "$NATS_CLUSTER_SERVER_BIN"))" >&2
  exit 1
fi
good "${NATS_SERVER_BIN:-nats-server}" && use "${NATS_SERVER_BIN:-nats-server}"

mkdir -p "$DIR"
# One fetch at a time (test files start clusters in parallel).
exec 9>"$DIR/.lock"
flock 9
good "$DIR/nats-server" && use "$DIR/nats-server"

command -v apt-get >/dev/null 2>&1 || { echo "no nats-server $MIN or later here and no apt-get to fetch one: install nats-server 2.10 or later (https://github.com/nats-io/nats-server/releases) and set NATS_CLUSTER_SERVER_BIN" >&2; exit 1; }
echo "nats-server $(version_of "${NATS_SERVER_BIN:-nats-server}") on this machine is older than $MIN: fetching Debian $SUITE's package into $DIR/" >&2
APT="$DIR/apt"
rm -rf "$APT" && mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial"
echo "deb http://deb.debian.org/debian $SUITE main" >"$APT/sources.list"
OPTS=(-o "Dir::Etc::sourcelist=$PWD/$APT/sources.list" -o "Dir::Etc::sourceparts=-" -o "Dir::State::Lists=$PWD/$APT/lists"
  -o "Dir::Cache=$PWD/$APT/cache" -o "APT::Sandbox::User=root" -q)
apt-get "${OPTS[@]}" update >&2
(cd "$APT" && apt-get "${OPTS[@]}" download nats-server >&2)
dpkg-deb -x "$APT"/nats-server_*.deb "$APT/root"
install -m 0755 "$APT/root/usr/sbin/nats-server" "$DIR/nats-server"
rm -rf "$APT"
good "$DIR/nats-server" && use "$DIR/nats-server"
echo "the fetched nats-server ($(version_of "$DIR/nats-server")) is not $MIN or later" >&2
exit 1
