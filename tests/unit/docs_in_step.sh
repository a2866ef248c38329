#!/usr/bin/env bash
# The README's option reference, the sample config and --help must match the binary.
set -euo pipefail
bin=${POSTBOX_BIN:?}
src=${POSTBOX_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$bin" config --reference >"$tmp/reference"
# the README holds the reference verbatim inside its fenced block
awk '/<!-- reference: generated/{f=1; next} f && /^```$/{if (++n == 2) exit; next} f && n == 1' \
    "$src/README.md" >"$tmp/readme-reference"
if ! diff -u "$tmp/readme-reference" "$tmp/reference"; then
    echo "FAIL: README.md option reference is stale: paste the output of 'postbox config --reference'" >&2
    exit 1
fi

"$bin" config --sample >"$tmp/sample"
if ! diff -u "$src/deploy/postbox.ini" "$tmp/sample"; then
    echo "FAIL: deploy/postbox.ini is stale: regenerate with 'postbox config --sample'" >&2
    exit 1
fi
# the sample loads without error
"$bin" -c "$src/deploy/postbox.ini" config >/dev/null

# every command the binary knows is documented in --help and the README
"$bin" --help >"$tmp/help"
for cmd in init check relay consume status dlq purge demo shadow config; do
    grep -q "^  $cmd " "$tmp/help" || { echo "FAIL: --help does not list $cmd" >&2; exit 1; }
    grep -q "postbox.* $cmd" "$src/README.md" || { echo "FAIL: README does not show $cmd" >&2; exit 1; }
done
echo "docs in step"
