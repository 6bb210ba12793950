#!/usr/bin/env bash
# ctest deploy.systemd_unit: deploy/cmdbus-worker.service is a unit systemd
# accepts without a single remark, its program accepts its arguments with the
# sample deploy/worker.ini (and its environment), and it gives the worker more
# time to stop than the worker gives its in-flight commands.
#
# Usage: check_unit.sh SOURCE_DIR WORKER_BINARY [ARGS...]
# The unit's program (/usr/local/bin/payments-worker) is replaced by
# WORKER_BINARY ARGS: `systemd-analyze verify` insists that it exists.
set -euo pipefail
src=$1; bin=$2; shift 2
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
extra=("$@")
unit="$src/deploy/cmdbus-worker.service"
ini="$src/deploy/worker.ini"
program=/usr/local/bin/payments-worker
config=/etc/cmdbus/worker.ini

fail() { echo "deploy.systemd_unit: $*" >&2; exit 1; }

command -v systemd-analyze >/dev/null \
  || fail "systemd-analyze not found (scripts/install-deps installs systemd)"
[ -x "$bin" ] || fail "$bin is not an executable"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The values the rest of the checks rely on.
value() { sed -n "s/^$1=//p" "$unit"; }
exec_start=$(value ExecStart)
[ "$exec_start" = "$program --config $config" ] \
  || fail "ExecStart is '$exec_start', expected '$program --config $config'"
[ "$(value Restart)" = on-failure ] || fail "Restart is not on-failure"
grep -qx 'Environment=CMDBUS_LOG_FORMAT=journal' "$unit" \
  || fail "the unit does not set CMDBUS_LOG_FORMAT=journal"

# 1. systemd's own check. It exits 0 on "Unknown key ..., ignoring" and on
#    invalid values, so any output at all is a failure.
sed "s|^ExecStart=$program|ExecStart=$bin${extra[*]:+ ${extra[*]}}|" "$unit" \
  > "$tmp/cmdbus-worker.service"
out=$(systemd-analyze verify "$tmp/cmdbus-worker.service" 2>&1) \
  || fail "systemd-analyze verify failed: $out"
[ -z "$out" ] || fail "systemd-analyze verify has remarks:
$out"

# 2. The program takes the unit's arguments and environment with the sample
#    configuration (a DSN from the environment, as the unit's EnvironmentFile
#    would give it).
env_args=()
while IFS= read -r kv; do env_args+=("$kv"); done < <(value Environment)
args=()
for a in ${exec_start#"$program"}; do
  [ "$a" = "$config" ] && a=$ini
  args+=("$a")
done
if ! env "${env_args[@]}" CMDBUS_DSN="host=db.invalid dbname=app" \
     "$bin" "${extra[@]}" "${args[@]}" --dump-config >"$tmp/dump" 2>"$tmp/err"; then
  fail "$bin ${extra[*]} ${args[*]} --dump-config (with ${env_args[*]}) failed:
$(cat "$tmp/err")"
fi
[ -s "$tmp/err" ] && fail "$bin --dump-config printed on stderr:
$(cat "$tmp/err")"
grep -q '^domains = \["payments"\]' "$tmp/dump" \
  || fail "the dumped configuration does not serve payments:
$(cat "$tmp/dump")"

# 3. TimeoutStopSec above the worker's shutdown-timeout, with 5 s to spare
#    for closing connections and the HTTP endpoint.
to_ms() {   # 30s, 1min, 500ms, 2h; a bare number is seconds (systemd's rule)
  local v=$1
  case "$v" in
    *ms)  echo $(( ${v%ms} )) ;;
    *min) echo $(( ${v%min} * 60000 )) ;;
    *h)   echo $(( ${v%h} * 3600000 )) ;;
    *s)   echo $(( ${v%s} * 1000 )) ;;
    *[!0-9]*|'') fail "cannot read the duration '$v'" ;;
    *)    echo $(( v * 1000 )) ;;
  esac
}
stop=$(value TimeoutStopSec)
shutdown=$(sed -n 's/^shutdown-timeout *= *\([^ ;]*\).*/\1/p' "$ini")
[ -n "$stop" ] || fail "the unit sets no TimeoutStopSec"
[ -n "$shutdown" ] || fail "$ini sets no shutdown-timeout"
grep -q "^shutdown-timeout = $shutdown\$" "$tmp/dump" \
  || fail "the worker does not read shutdown-timeout = $shutdown from $ini"
stop_ms=$(to_ms "$stop"); shutdown_ms=$(to_ms "$shutdown")
[ "$stop_ms" -ge $(( shutdown_ms + 5000 )) ] \
  || fail "TimeoutStopSec ($stop) must exceed the worker's shutdown-timeout ($shutdown) by 5s at least"
echo "deploy.systemd_unit: ok (TimeoutStopSec $stop, shutdown-timeout $shutdown)"
