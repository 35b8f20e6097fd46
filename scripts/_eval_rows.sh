# Sourced by the learning scripts: ROWS (bash array of `eval pasa` row mappings, each starting `{name: <name>,`)
# -> ROWS_ARG, the `rows=[...]` override of the rows named in RUN_ROWS (comma-separated; default all).
RUN_ROWS=${RUN_ROWS:-all}
SELECTED=()
for r in "${ROWS[@]}"; do
  name=$(sed -E 's/^\{name: ([a-z0-9_]+),.*/\1/' <<<"$r")
  if [ "$RUN_ROWS" = all ] || [[ ",$RUN_ROWS," == *",$name,"* ]]; then SELECTED+=("$r"); fi
done
ROWS_ARG="rows=[$(IFS=,; echo "${SELECTED[*]}")]"
