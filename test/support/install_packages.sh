# install_packages PACKAGE...: installs the Debian packages that are missing (as root, with
# apt-get), for tests that need a system component (Slurm, a container runtime) the build does
# not. Prints what it installs; fails with the apt-get output when apt-get does.
install_packages() {
  local missing=() package
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$package")
  done
  ((${#missing[@]} == 0)) && return 0
  echo "installing ${missing[*]} (apt-get)"
  local log
  log=$(mktemp)
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    echo "FAIL: apt-get could not install ${missing[*]}:"
    tail -n 20 "$log"
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}
