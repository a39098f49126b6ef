#!/usr/bin/env bash
# The packages a runtime image needs, found rather than listed by hand. The build stage lists
# the packages that hold every shared library its executables load; the runtime stage installs
# those its base lacks and checks that every library then resolves. So one Dockerfile serves
# Debian 12 (the CPU image) and Ubuntu 24.04 (the CUDA base), whose library packages are named
# differently (libopenmpi3 / libopenmpi3t64, libyaml-cpp0.7 / libyaml-cpp0.8, ...), and a new
# dependency cannot be forgotten in the runtime stage.
#
#   runtime_packages.sh list EXECUTABLE...     the packages, one a line (build stage)
#   runtime_packages.sh install FILE           apt-get install those of FILE not yet installed
#                                              (runtime stage; what the base already holds, such
#                                              as the CUDA base's held libnccl2, is left alone)
#   runtime_packages.sh check EXECUTABLE...    fail unless every shared library resolves
set -euo pipefail

fail() {
  echo "runtime_packages.sh: error: $*" >&2
  exit 2
}

# ldd's output for an executable, refusing one whose libraries do not all resolve here.
resolved_libraries() {
  local executable=$1 out missing
  [[ -x $executable ]] || fail "'$executable' is not an executable file"
  out=$(ldd "$executable") || fail "ldd '$executable' failed: is it a dynamically linked executable?"
  missing=$(grep "not found" <<<"$out" | tr -s ' \t' ' ' || true)
  [[ -z $missing ]] || fail "$executable needs shared libraries this machine lacks:$missing; install their packages"
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' <<<"$out"
}

# The package that owns a file. dpkg records some libraries under /lib and others under
# /usr/lib, which a merged /usr makes one folder, and ldd names a symlink as often as the file
# (libopenblas.so.0 is an alternatives link): each spelling is asked.
owner_of() {
  local path spelling owners
  for path in "$1" "$(realpath "$1")"; do
    for spelling in "$path" "${path#/usr}" "/usr$path"; do
      owners=$(dpkg-query -S "$spelling" 2>/dev/null | awk -F': ' '!/^diversion/ {print $1; exit}')
      if [[ -n $owners ]]; then
        # "libc6:amd64" or "a, b": one package a line, without the architecture.
        tr ',' '\n' <<<"$owners" | sed 's/^ *//; s/:.*//'
        return 0
      fi
    done
  done
  return 1
}

list_packages() {
  local executable libraries library packages=""
  (($#)) || fail "list needs the executables whose libraries to look up"
  for executable in "$@"; do
    libraries=$(resolved_libraries "$executable")
    for library in $libraries; do
      packages+=$(owner_of "$library")$'\n' ||
        fail "$library (loaded by $executable) belongs to no package, so a runtime stage could not install it; build against the library's package (e.g. the CUDA base's libnccl-dev, not a pip wheel)"
    done
  done
  sort -u <<<"${packages%$'\n'}"
}

install_packages() {
  local file=${1:-}
  [[ -f $file ]] || fail "no package list at '$file'; the build stage writes it (runtime_packages.sh list)"
  # What the base already holds (the CUDA base's held libnccl2) is left alone.
  xargs "$(dirname "$0")/../install_packages.sh" < "$file"
  # An image keeps what a layer leaves: no package lists, no downloaded .debs.
  apt-get clean
  rm -rf /var/lib/apt/lists/*
}

check_executables() {
  local executable
  (($#)) || fail "check needs the executables to check"
  for executable in "$@"; do
    resolved_libraries "$executable" > /dev/null
    echo "runtime_packages.sh: every shared library of $executable resolves"
  done
}

command=${1:-}
shift || true
case $command in
  list) list_packages "$@" ;;
  install) install_packages "$@" ;;
  check) check_executables "$@" ;;
  *) fail "the command is '$command'; use list EXECUTABLE..., install FILE or check EXECUTABLE..." ;;
esac
