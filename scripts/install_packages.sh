#!/usr/bin/env bash
# Installs those of the given Debian packages that are missing: with apt-get as root; otherwise
# it prints the apt-get line to run and exits 1. The one place that installs packages, for
# scripts/setup.sh (the build), the tests that need a system component (Slurm, podman) and the
# container's runtime stage.
#
#   scripts/install_packages.sh PACKAGE...
set -euo pipefail

missing=()
for package in "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
((${#missing[@]} == 0)) && exit 0

if [[ $(id -u) -ne 0 ]]; then
  echo "install_packages: missing Debian packages; install them with:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "install_packages: installing ${missing[*]}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  echo "install_packages: error: apt-get could not install ${missing[*]} (its last lines are above)" >&2
  exit 1
fi
