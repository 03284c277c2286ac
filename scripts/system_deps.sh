#!/usr/bin/env bash
# The system tools EvoHarness needs, checked first by `make test` and `make serve`.
#   scripts/system_deps.sh test    everything the tests use
#   scripts/system_deps.sh serve   what `make serve` uses: the toolchain for the install, redis-server unless REDIS_URL
# Missing tools are installed with apt-get when running as root with apt-get on PATH (EVOHARNESS_NO_INSTALL=1: never).
# Otherwise it exits 1 before anything else runs, with one line on stderr, e.g.
#   missing: chromium prometheus — install with: sudo apt-get update && sudo apt-get install -y chromium prometheus
# Silent when nothing is missing. Uses only bash builtins, so it works on any PATH.
set -uo pipefail

declare -A PACKAGE=(                 # tool -> the Debian/Ubuntu package that provides it
  [redis-server]=redis-server [redis-cli]=redis-tools
  [chromium]=chromium                # headless browser: tests/service/api/test_ui.py
  [cmake]=cmake [g++]=build-essential  # alfworld compiles jericho and Fast Downward on install
  [prometheus]=prometheus [promtool]=prometheus
)

case "${1:-}" in
  test) TOOLS=(redis-server redis-cli chromium cmake g++ prometheus promtool) ;;
  serve) TOOLS=(cmake g++); [ -n "${REDIS_URL:-}" ] || TOOLS+=(redis-server) ;;
  *) echo "usage: $0 test|serve" >&2; exit 2 ;;
esac

has() {
  command -v "$1" >/dev/null || { [ "$1" = chromium ] && command -v chromium-browser >/dev/null; }
}

find_missing() {                     # sets MISSING (tools) and PACKAGES (their packages, each once)
  MISSING=() PACKAGES=()
  local -A seen=()
  local tool
  for tool in "${TOOLS[@]}"; do
    has "$tool" && continue
    MISSING+=("$tool")
    [ -n "${seen[${PACKAGE[$tool]}]:-}" ] || PACKAGES+=("${PACKAGE[$tool]}")
    seen[${PACKAGE[$tool]}]=1
  done
}

find_missing
[ ${#MISSING[@]} -eq 0 ] && exit 0

if [ "$EUID" -eq 0 ] && [ "${EVOHARNESS_NO_INSTALL:-0}" != 1 ] && command -v apt-get >/dev/null; then
  echo "[system_deps] installing ${PACKAGES[*]} (for ${MISSING[*]})" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${PACKAGES[@]}" >/dev/null
  find_missing
  [ ${#MISSING[@]} -eq 0 ] && exit 0
fi

sudo=$([ "$EUID" -eq 0 ] || echo "sudo ")
where=$(command -v apt-get >/dev/null || echo " (Debian/Ubuntu package names)")
echo "missing: ${MISSING[*]} — install with: ${sudo}apt-get update && ${sudo}apt-get install -y ${PACKAGES[*]}$where" >&2
exit 1
