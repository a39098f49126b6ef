#!/usr/bin/env bash
# Makes what the container test needs to build the image with no network: a Debian 12 minbase
# (debootstrap) whose apt reads a local flat repository, and that repository, holding every
# package the Dockerfile's stages install (PACKAGE... and what they depend on, as the base lacks
# them). The test imports the base with podman and mounts the repository into every RUN step.
#
#   scripts/container/offline_base.sh DIR PACKAGE...      (as root; scripts/setup.sh --tests runs it)
#
# DIR receives base.tar (the root file system, for `podman import`), debs/ (the .deb files and
# their Packages index) and packages.txt (what it was made for: when the list changes, both are
# made again). The base's /etc/apt/sources.list names file:/var/cache/titan-debs, where the test
# mounts debs/.
# Environment: DEBIAN_MIRROR, debootstrap's mirror (default http://deb.debian.org/debian).
set -euo pipefail
dir=$(realpath -m "${1:?usage: offline_base.sh DIR PACKAGE...}")
shift
(($#)) || { echo "offline_base.sh: no packages given" >&2; exit 2; }

if [[ $(id -u) -ne 0 ]]; then
  echo "setup: not root, so the container test's offline Debian base is not made (that test needs root and skips without it)"
  exit 0
fi
wanted=$(printf '%s\n' "$@" | sort -u)
if [[ -f $dir/base.tar && -f $dir/debs/Packages ]] && [[ $(cat "$dir/packages.txt" 2>/dev/null) == "$wanted" ]]; then
  exit 0
fi

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
echo "setup: making the container test's offline Debian 12 base in $dir (debootstrap from $mirror, then the packages its image installs)"
rm -rf "$dir"
mkdir -p "$dir"
rootfs=$dir/rootfs
log=$dir/offline_base.log
fail() {
  tail -n 20 "$log" >&2
  echo "setup: error: $* (the log's end is above; the whole log is $log)" >&2
  exit 1
}
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > "$log" 2>&1 ||
  fail "debootstrap of Debian 12 from $mirror failed; set DEBIAN_MIRROR to a mirror this machine reaches"

# The packages and their dependencies as the minbase lacks them, downloaded by the base's own apt.
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
{
  chroot "$rootfs" apt-get update &&
    chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive apt-get install -y --download-only \
      --no-install-recommends "$@"
} >> "$log" 2>&1 || fail "downloading the image's packages inside the Debian 12 base failed"
mkdir -p "$dir/debs"
mv "$rootfs"/var/cache/apt/archives/*.deb "$dir/debs/"
(cd "$dir/debs" && dpkg-scanpackages --multiversion . > Packages 2>> "$log") ||
  fail "dpkg-scanpackages could not index the downloaded packages"

# The base's apt reads only the local repository (mounted at /var/cache/titan-debs).
echo "deb [trusted=yes] file:/var/cache/titan-debs ./" > "$rootfs/etc/apt/sources.list"
rm -f "$rootfs/etc/resolv.conf"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
tar -C "$rootfs" -cf "$dir/base.tar" .
rm -rf "$rootfs"
echo "$wanted" > "$dir/packages.txt"
echo "setup: the offline base is $(du -sh "$dir/base.tar" | cut -f1) with $(find "$dir/debs" -maxdepth 1 -name '*.deb' | wc -l) packages ($(du -sh "$dir/debs" | cut -f1))"
