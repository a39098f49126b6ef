#!/usr/bin/env bash
# Every shell script of the repository passes ShellCheck at warning level: the scripts CI runs,
# and those it never runs (scripts/gpu_check.sh runs only on a GPU machine, the .sbatch files
# only under Slurm), whose first user would otherwise meet a quoting slip or a typo'd variable.
# Sourced files name their shell with a `# shellcheck shell=bash` line; a finding that is meant
# carries a `# shellcheck disable=SCnnnn` line saying why.
#
#   check_shell_scripts.sh SOURCE_DIR
#
# Without ShellCheck it fails with one line naming scripts/setup.sh --tests, which installs
# Debian's shellcheck; the label `shellcheck` lets a tree without it leave the test out.
set -euo pipefail
source_dir=${1:?usage: check_shell_scripts.sh SOURCE_DIR}
if ! command -v shellcheck >/dev/null; then
  echo "check_shell_scripts: shellcheck is not installed; run scripts/setup.sh --tests, which installs it" >&2
  exit 1
fi
cd "$source_dir"
# The repository's own scripts: not the build trees, caches, outputs or bundles beside them.
mapfile -t scripts < <(find . \( -path './build*' -o -path './.cache' -o -path './outputs' \
                                 -o -path './corpus' -o -path './.devcarry*' -o -path './.git' \) -prune \
                            -o -type f \( -name '*.sh' -o -name '*.sbatch' -o -path './.ci/run' \) -print |
                       sort)
if ((${#scripts[@]} < 20)); then
  echo "check_shell_scripts: found only ${#scripts[@]} scripts under $source_dir; is it the repository root?" >&2
  exit 1
fi
shellcheck -S warning "${scripts[@]}"
echo "check_shell_scripts: ${#scripts[@]} scripts pass shellcheck -S warning"
