# Figures of several rounds, sourced by bench scripts: read numbers, one per line, on stdin.
# median: the middle one (the mean of the two middle ones for an even count)
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
# range: "lowest..highest"
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s..%s", lo, hi }'; }
