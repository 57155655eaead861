# Shared by the A/B scripts that time dendro commands against one dendrod
# (import_ab.sh, warm_start_ab.sh). Source it after setting $pid (the
# server's process id).

# The server's CPU seconds so far (user + system, from /proc).
ticks=$(getconf CLK_TCK)
server_cpu() { awk -v t="$ticks" '{ print ($14 + $15) / t }' "/proc/$pid/stat"; }

# A JSON tree as 'dendro tree' writes it, without its metadata (which names
# the job and the time), in one canonical line: equal lines, equal trees.
tree_shape() {
  /usr/bin/python3 -c 'import json, sys
t = json.load(open(sys.argv[1]))
t.pop("metadata", None)
print(json.dumps(t, sort_keys=True))' "$1"
}

# The median of the numbers on stdin, one per line.
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
