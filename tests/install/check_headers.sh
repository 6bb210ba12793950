#!/usr/bin/env bash
# install.public_headers: installs the build into a temporary prefix and
# compiles every installed header alone against it (warnings are errors).
#  - Exactly the public headers are installed (the list the install rules
#    use), so a public header that includes a private one fails to compile.
#  - Apart from the two headers for applications' own handler actors, no
#    public header reaches CAF, libpq, spdlog or RapidJSON: an application
#    that only sends commands needs none of them.
# Usage: check_headers.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: check_headers.sh BUILD_DIR}
cxx=${CXX:-c++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install.public_headers: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 \
  || { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
inc="$tmp/prefix/include"
sort "$build/public-headers.txt" | sed '/^$/d' >"$tmp/expected"
(cd "$inc/cmdbus" && find . -type f | sed 's|^\./||' | sort) >"$tmp/installed"
diff -u "$tmp/expected" "$tmp/installed" \
  || fail "the installed headers are not the public list (above: - missing, + extra)"
[ -s "$tmp/expected" ] || fail "no public headers"

check() {  # one header: compiles alone; its dependency list, for the check below
  local h=$1 name=${1//\//_}
  printf '#include <cmdbus/%s>\n' "$h" >"$tmp/$name.cpp"
  "$cxx" -std=c++17 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$inc" "$tmp/$name.cpp" \
    2>"$tmp/$name.err" || { echo "--- $h does not compile alone:"; head -20 "$tmp/$name.err"; return 1; }
  "$cxx" -std=c++17 -I"$inc" -MM "$tmp/$name.cpp" >"$tmp/$name.deps"
}
export -f check
export cxx inc tmp
xargs -P "${CMDBUS_JOBS:-2}" -I{} bash -c 'check {}' <"$tmp/expected" \
  || fail "some public headers do not compile alone against the installed tree"

caf_ok='^(actors/actor_handler\.hpp|actors/handler_actor\.hpp)$'
bad=0
while read -r h; do
  [[ $h =~ $caf_ok ]] && continue
  if grep -Eq '/caf/|libpq-fe\.h|/spdlog/|/rapidjson/' "$tmp/${h//\//_}.deps"; then
    echo "--- $h reaches a third-party header:"
    tr ' ' '\n' <"$tmp/${h//\//_}.deps" | grep -E '/caf/|libpq-fe\.h|/spdlog/|/rapidjson/' | head -5
    bad=1
  fi
done <"$tmp/expected"
[ "$bad" = 0 ] || fail "public headers outside the actor ones must not include CAF, libpq, spdlog or RapidJSON"
echo "install.public_headers: $(wc -l <"$tmp/expected") public headers, each compiles alone;" \
     "only the actor handler headers include CAF"
