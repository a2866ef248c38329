#!/usr/bin/env bash
# libpostbox.so is the public API and nothing else: every symbol it exports starts with postbox_
# (include/postbox/postbox.h), it needs no library but libpq (and libc), and the example programs
# built against it load with every symbol resolved at start (LD_BIND_NOW) and run.
# Environment (tests/CMakeLists.txt): POSTBOX_LIB, and the programs linked against it in
# POSTBOX_LIB_PROGRAMS (space-separated paths).
set -euo pipefail
lib=${POSTBOX_LIB:?POSTBOX_LIB must name libpostbox.so}
read -r -a programs <<<"${POSTBOX_LIB_PROGRAMS:?POSTBOX_LIB_PROGRAMS must name the example programs}"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# exported symbols; the linker's own markers are not API
exports=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' |
    grep -Ev '^(_init|_fini|__bss_start|_edata|_end|__end__|_etext|__data_start|_DYNAMIC|_GLOBAL_OFFSET_TABLE_)$' || true)
echo "exported by $(basename "$lib"): $(echo $exports)"
[[ -n $exports ]] || fail "libpostbox exports nothing"
for s in $exports; do
    [[ $s == postbox_* ]] || fail "libpostbox exports $s (only postbox_* may be exported)"
done
for s in postbox_enqueue postbox_enqueue_batch postbox_inbox_process postbox_version; do
    grep -qx "$s" <<<"$exports" || fail "libpostbox does not export $s"
done

# shared libraries it needs: libpq and libc (and the dynamic loader) only (no broker, HTTP, config or JSON libraries)
needed=$(objdump -p "$lib" | awk '$1 == "NEEDED" {print $2}')
echo "needed by $(basename "$lib"): $(echo $needed)"
for n in $needed; do
    # the sanitizer build links its runtimes into everything
    case $n in libpq.so.* | libc.so.* | ld-linux*.so.* | libasan.so.* | libubsan.so.*) ;; *) fail "libpostbox needs $n" ;; esac
done

# the programs built against the library: what they take from it, it exports; they load with
# every symbol bound at start and run (without arguments they print their usage and exit 2)
for p in "${programs[@]}"; do
    name=$(basename "$p")
    for s in $(nm -D --undefined-only "$p" | awk '{print $NF}' | sed 's/@.*//' | grep '^postbox_' || true); do
        grep -qx "$s" <<<"$exports" || fail "$name uses $s, which libpostbox does not export"
    done
    [[ $(ldd "$p") == *libpostbox.so* ]] || fail "$name is not linked against libpostbox.so"
    rc=0
    out=$(LD_BIND_NOW=1 "$p" 2>&1) || rc=$?
    if ((rc != 2)) || ! grep -q usage <<<"$out"; then
        fail "$name did not run (exit $rc): $out"
    else
        echo "$name: loads against $(basename "$lib") and runs"
    fi
done

((failures == 0)) || { echo "$failures failure(s)" >&2; exit 1; }
echo "libpostbox exports only postbox_*"
