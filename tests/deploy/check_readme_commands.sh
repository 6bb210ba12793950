#!/usr/bin/env bash
# ctest docs.readme_commands: every command in the ```sh blocks of README.md's
# section "Use it from your application" is one that CI runs: it appears,
# as written and whole, in a line of scripts/consumers, scripts/deb or .ci/run that is not a
# comment. Not checked: blank and comment lines, a trailing `# comment`,
# and plain assignments (`prefix=$HOME/opt/cmdbus`), which the scripts make
# with their own values.
#
# Usage: check_readme_commands.sh SOURCE_DIR
set -euo pipefail
src=$1
fail() { echo "docs.readme_commands: $*" >&2; exit 1; }

section=$(awk '/^## /{on = ($0 == "## Use it from your application")} on' "$src/README.md")
[ -n "$section" ] || fail "README.md has no section '## Use it from your application'"
commands=$(printf '%s\n' "$section" | awk '/^```/{if (inblk) {inblk = 0} else if ($0 == "```sh") {inblk = 1}; next} inblk')
[ -n "$commands" ] || fail "the section has no \`\`\`sh blocks"

scripts=$(cat "$src/scripts/consumers" "$src/scripts/deb" "$src/.ci/run" | grep -v '^[[:space:]]*#')
checked=0
missing=()
while IFS= read -r line; do
  cmd=$(printf '%s' "$line" | sed -e 's/[[:space:]]\{1,\}# .*$//' -e 's/[[:space:]]*$//')
  case "$cmd" in
    ''|'#'*) continue ;;
  esac
  if printf '%s' "$cmd" | grep -qE '^[A-Za-z_][A-Za-z0-9_]*=[^ ]*$'; then
    continue
  fi
  checked=$((checked + 1))
  found=0
  while IFS= read -r l; do
    # as a whole: at the end of the script's line or followed by a blank
    if [[ "$l" == *"$cmd" || "$l" == *"$cmd "* ]]; then found=1; break; fi
  done <<<"$scripts"
  [ "$found" = 1 ] || missing+=("$cmd")
done <<<"$commands"

if [ ${#missing[@]} -gt 0 ]; then
  fail "these README commands are not run by scripts/consumers, scripts/deb or .ci/run:
$(printf '  %s\n' "${missing[@]}")"
fi
[ "$checked" -ge 5 ] || fail "only $checked commands found in the section's sh blocks"
echo "docs.readme_commands: ok ($checked commands)"
