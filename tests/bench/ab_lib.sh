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

# Sets same=DIFFERENT unless the tree in $1 equals the one in the file
# $reference (a tree_shape line).
check_tree() { cmp -s <(tree_shape "$1") "$reference" || same=DIFFERENT; }

# ab_rounds ROUNDS NAME_A NAME_B TREE: ROUNDS rounds of run_a then run_b
# (the script's functions: each runs once, prints "wall_seconds
# server_cpu_seconds" and leaves its tree in the file $tree_a or $tree_b).
# Prints every round, the medians, the median of the rounds' wall ratios
# A/B, and whether every tree equals the one in the file TREE.
ab_rounds() {
  local rounds="$1" name_a="$2" name_b="$3" r a b
  local walls_a=() walls_b=() cpus_a=() cpus_b=() ratios=()
  reference="$(mktemp)"
  tree_shape "$4" >"$reference"
  same=identical
  for r in $(seq 1 "$rounds"); do
    a=$(run_a); check_tree "$tree_a"
    b=$(run_b); check_tree "$tree_b"
    walls_a+=("${a% *}"); cpus_a+=("${a#* }"); walls_b+=("${b% *}"); cpus_b+=("${b#* }")
    ratios+=("$(awk -v a="${a% *}" -v b="${b% *}" 'BEGIN { printf "%.4f", a / b }')")
    printf 'round %s: %s %s s (server CPU %s s) | %s %s s (server CPU %s s)\n' \
      "$r" "$name_a" "${a% *}" "${a#* }" "$name_b" "${b% *}" "${b#* }"
  done
  printf 'median wall: %s %s s, %s %s s; median server CPU: %s %s s, %s %s s; median %s/%s %s\n' \
    "$name_a" "$(printf '%s\n' "${walls_a[@]}" | median)" \
    "$name_b" "$(printf '%s\n' "${walls_b[@]}" | median)" \
    "$name_a" "$(printf '%s\n' "${cpus_a[@]}" | median)" \
    "$name_b" "$(printf '%s\n' "${cpus_b[@]}" | median)" \
    "$name_a" "$name_b" "$(printf '%s\n' "${ratios[@]}" | median)"
  echo "trees: $same"
  rm -f "$reference"
}
