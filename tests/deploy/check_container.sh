#!/usr/bin/env bash
# ctest deploy.container_packages: the runtime packages deploy/Dockerfile
# installs on debian:bookworm-slim (the list between its "runtime packages"
# markers) are exactly the packages that own the shared libraries the built
# programs and libraries link (NEEDED), minus cmdbus's own libraries and what
# the slim image already has (libc6, libstdc++6, libgcc-s1).
#
# Usage: check_container.sh DOCKERFILE BINARY_OR_LIBRARY...
set -euo pipefail
dockerfile=$1; shift

fail() { echo "deploy.container_packages: $*" >&2; exit 1; }
[ $# -gt 0 ] || fail "no binaries given"

# In the Dockerfile: the package names in the RUN between the markers.
listed=$(sed -n '/^# runtime packages (begin)/,/^# runtime packages (end)/p' "$dockerfile" \
  | sed -e 's/#.*//' -e 's/\\$//' | tr ' \t' '\n\n' \
  | grep -E '^[a-z0-9][a-z0-9.+-]+$' \
  | grep -vxE 'RUN|apt-get|update|install|rm|-rf|/var/lib/apt/lists/\*|&&|-y|--no-install-recommends' \
  | sort -u)
[ -n "$listed" ] || fail "no packages between the '# runtime packages (begin)/(end)' markers in $dockerfile"

# usrmerge: libc6 and libgcc-s1 register their files under /lib, the others
# under /usr/lib; a bare */libm.so.6 pattern would also match libc6-i386.
arch=$(gcc -print-multiarch)
owner() {
  local so=$1 out
  out=$(dpkg -S "/usr/lib/$arch/$so" 2>/dev/null || dpkg -S "/lib/$arch/$so" 2>/dev/null) \
    || fail "no installed package owns $so (needed by $2)"
  echo "${out%%:*}"
}

needed=""
for f in "$@"; do
  [ -f "$f" ] || fail "$f does not exist"
  sonames=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  [ -n "$sonames" ] || fail "$f has no NEEDED entries (not a dynamic binary?)"
  for so in $sonames; do
    case "$so" in
      libcmdbus-*) continue ;;                          # ours, copied into the image
      libasan*|libtsan*|libubsan*) fail "$f is a sanitizer build" ;;
    esac
    needed+="$(owner "$so" "$f")"$'\n'
  done
done
needed=$(printf '%s' "$needed" | grep -vxE 'libc6|libstdc\+\+6|libgcc-s1' | sort -u)

if [ "$needed" != "$listed" ]; then
  fail "deploy/Dockerfile's runtime packages differ from what the binaries need
  binaries:   $*
  Dockerfile: $(echo $listed)
  needed:     $(echo $needed)
  (missing in the Dockerfile: $(comm -13 <(echo "$listed") <(echo "$needed") | xargs);
   not needed: $(comm -23 <(echo "$listed") <(echo "$needed") | xargs))"
fi
echo "deploy.container_packages: ok ($(echo $needed))"
