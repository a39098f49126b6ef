#!/usr/bin/env bash
# Keeps docs/bad_input.md true. For every row of its table (| category | example | fragment |
# exit | test |):
#   - the test (the last cell, in backticks) is a test of this build tree (ctest -N);
#   - the fragment (the third cell, in backticks) is asserted verbatim by some test under test/;
#   - the exit code is a number, and no fragment is in two rows (a class counted twice);
# and at least 60 rows have exit code 2. Prints each problem and exits 1 when there is one.
#
#   check_bad_input_table.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
table=$src/docs/bad_input.md
minimum=60

tests=$(cd "$build" && ctest -N | sed -n 's/^ *Test *#[0-9]*: //p')
[[ -n $tests ]] || { echo "ctest -N in $build lists no test"; exit 1; }

# The text between the first and the last backtick of a cell ("" when there is none).
in_backticks() {
  local cell=$1
  [[ $cell == *\`*\`* ]] || { echo ""; return; }
  cell=${cell#*\`}
  echo "${cell%\`*}"
}

problems=0
problem() {
  echo "docs/bad_input.md line $1: $2"
  problems=$((problems + 1))
}

rows=0
exit2=0
declare -A fragment_line=()
line_number=0
while IFS= read -r line; do
  line_number=$((line_number + 1))
  # Table rows only: not the header, not the |---| separator.
  [[ $line == '| '* ]] || continue
  [[ $line == '| category |'* ]] && continue
  IFS='|' read -r _ _ _ fragment code test rest <<<"$line"
  if [[ -z ${test// /} || -n ${rest// /} ]]; then
    problem "$line_number" "not 5 cells (a '|' inside a cell?): $line"
    continue
  fi
  rows=$((rows + 1))
  code=${code// /}
  fragment=$(in_backticks "$fragment")
  name=$(in_backticks "$test")
  [[ $code =~ ^[0-9]+$ ]] || problem "$line_number" "exit code '$code' is not a number"
  [[ $code == 2 ]] && exit2=$((exit2 + 1))
  if [[ -z $name ]]; then
    problem "$line_number" "no test name in backticks"
  elif ! grep -qxF -- "$name" <<<"$tests"; then
    problem "$line_number" "no test named '$name' in ctest -N (renamed or removed?)"
  fi
  if [[ -z $fragment ]]; then
    problem "$line_number" "no fragment in backticks"
  elif ! grep -rqF --include='*.cpp' --include='*.h' --include='*.sh' -- "$fragment" "$src/test"; then
    problem "$line_number" "no test under test/ asserts '$fragment'"
  elif [[ -n ${fragment_line[$fragment]:-} ]]; then
    problem "$line_number" "'$fragment' is the fragment of line ${fragment_line[$fragment]} too"
  else
    fragment_line[$fragment]=$line_number
  fi
done <"$table"

echo "docs/bad_input.md: $rows rows, $exit2 of them exit code 2 (at least $minimum needed)"
((exit2 >= minimum)) || problem "-" "only $exit2 rows with exit code 2"
((problems == 0)) || { echo "$problems problem(s)"; exit 1; }
