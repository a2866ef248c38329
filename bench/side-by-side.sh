# shellcheck shell=bash
# Sourced by bench/relay-amqp, bench/relay-nats and bench/relay-cdc: `--vs OLD NEW` runs two
# postbox binaries side by side in one run (same servers, same broker objects; each binary with its
# own scratch database, initialised by that binary) in alternating order, and compares each relay
# run with the raw publisher run just before and just after it. Not a script of its own; see
# bench/README.md.
#
# The including script defines median (one number a line on stdin -> the median) and, before
# calling vs_summary, the file $TMP/vs.rec that vs_record appends to.

VS=0
VS_BINS=()
# shellcheck disable=SC2034 # used by the including scripts
VS_SIDES=(old new)
ARGS=()

# vs_parse NAME "$@": takes `--vs OLD NEW` out of the arguments (ARGS keeps the rest)
vs_parse() {
    local name=$1
    shift
    while (($#)); do
        case $1 in
        --vs)
            (($# >= 3)) || { echo "$name: --vs needs two postbox binaries: --vs OLD NEW" >&2; exit 2; }
            VS=1
            VS_BINS=("$(vs_abs "$2")" "$(vs_abs "$3")")
            shift 3
            ;;
        --) shift; ARGS+=("$@"); break ;;
        -*) echo "$name: unknown option '$1' (usage: $name [--vs OLD_POSTBOX NEW_POSTBOX] [N [PAYLOAD_BYTES]])" >&2; exit 2 ;;
        *) ARGS+=("$1"); shift ;;
        esac
    done
    if ((VS)); then
        local b
        for b in "${VS_BINS[@]}"; do
            [[ -x $b && ! -d $b ]] || { echo "$name: --vs: $b is not an executable" >&2; exit 1; }
        done
    fi
    return 0
}
vs_abs() { if [[ $1 == /* ]]; then echo "$1"; else echo "$PWD/$1"; fi; }

# vs_tool NAME DEFAULT: the raw publisher used for both columns: $POSTBOX_*_TOOL if set (the
# caller passes it as DEFAULT then), else the one beside the new binary, else DEFAULT
vs_tool() { # ENV_VALUE TOOL_NAME DEFAULT
    if [[ -n $1 ]]; then echo "$1"
    elif [[ -x $(dirname "${VS_BINS[1]}")/$2 ]]; then echo "$(dirname "${VS_BINS[1]}")/$2"
    else echo "$3"; fi
}

# vs_order ROUND: the sides in the order they run in that round (old first in odd rounds)
vs_order() { if (($1 % 2)); then echo "0 1"; else echo "1 0"; fi; }
# vs_reverse WORDS...: the words in reverse order
vs_reverse() { local out="" w; for w in "$@"; do out="$w${out:+ $out}"; done; echo "$out"; }

# vs_record ROUND MODE SIDE RELAY RAW_BEFORE RAW_AFTER CPU_PER_1000 [EXTRA...]
# prints the ratio relay / mean(raw before, raw after)
vs_record() {
    local ratio
    ratio=$(awk -v x="$4" -v a="$5" -v b="$6" 'BEGIN { printf "%.3f\n", x / ((a + b) / 2) }')
    echo "$1 $2 $3 $4 $5 $6 $7 $ratio ${*:8}" >>"$TMP/vs.rec"
    echo "$ratio"
}
# vs_column MODE SIDE FIELD: one field of the matching records, one a line
# (fields: 1 round, 2 mode, 3 side, 4 relay/s, 5 raw before, 6 raw after, 7 cpu, 8 ratio, 9... extra)
vs_column() {
    awk -v m="$1" -v s="$2" -v f="$3" '$2 == m && $3 == s { if (f == "raw") print ($5 + $6) / 2; else print $f }' "$TMP/vs.rec"
}
# vs_quotients MODE: per round, ratio(new) / ratio(old), one a line
vs_quotients() {
    awk -v m="$1" '$2 == m { r[$1 " " $3] = $8; if ($1 > n) n = $1 }
        END { for (i = 1; i <= n; i++) if ((i " new") in r && (i " old") in r) printf "%.3f\n", r[i " new"] / r[i " old"] }' "$TMP/vs.rec"
}
vs_minmax() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s..%s\n", lo, hi }'; }

# vs_summary UNIT MODE...: per mode, each side's medians and the quotient new/old of the ratios
vs_summary() {
    local unit=$1 m s q
    shift
    echo
    echo "side by side: old = ${VS_BINS[0]}"
    echo "              new = ${VS_BINS[1]}"
    printf '%-11s %-4s %10s %10s %12s %15s %12s\n' mode side "relay/s" "raw/s" "ratio(med)" "ratio(min..max)" "CPU ms/1000"
    for m in "$@"; do
        for s in old new; do
            printf '%-11s %-4s %10.0f %10.0f %12.3f %15s %12.1f\n' "$m" "$s" \
                "$(vs_column "$m" $s 4 | median)" "$(vs_column "$m" $s raw | median)" \
                "$(vs_column "$m" $s 8 | median)" "$(vs_column "$m" $s 8 | vs_minmax)" "$(vs_column "$m" $s 7 | median)"
        done
    done
    echo
    for m in "$@"; do
        q=$(vs_quotients "$m")
        printf '%-11s ratio new/old: median %.3f (rounds: %s); ratio of the median ratios %.3f\n' "$m" \
            "$(median <<<"$q")" "$(tr '\n' ' ' <<<"$q" | sed 's/ $//')" \
            "$(awk -v a="$(vs_column "$m" new 8 | median)" -v b="$(vs_column "$m" old 8 | median)" 'BEGIN { printf "%.3f", a / b }')"
    done
    # round 1: the first relay runs on each side's fresh database
    for m in "$@"; do
        awk -v m="$m" '$1 == 1 && $2 == m { r[$3] = $8; x[$3] = $4 }
            END { if (("old" in r) && ("new" in r))
                      printf "%-11s first round: old ratio %.3f, new ratio %.3f (new/old %.3f; relay/s old %.0f, new %.0f)\n", m, r["old"], r["new"], r["new"] / r["old"], x["old"], x["new"] }' "$TMP/vs.rec"
    done
    echo "(ratio: $unit / the mean of the raw publisher's runs just before and just after it, per run; new/old >= 1 passes,"
    echo " the old-vs-old spread of these quotients is the noise)"
}
