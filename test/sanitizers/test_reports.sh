#!/usr/bin/env bash
# Each bug of sanitizer_probe is reported into the file its tool's log_path names, with the
# report's headline, and nothing on stderr; the probe's exit code is non-zero.
#
#   test_reports.sh PROBE address,undefined|thread
set -uo pipefail
probe=$1
sanitizers=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
status=0

expect() {  # expect BUG HEADLINE
  local bug=$1 headline=$2
  rm -rf "$dir/reports" && mkdir -p "$dir/reports"
  ASAN_OPTIONS="log_path=$dir/reports/asan:detect_leaks=1" UBSAN_OPTIONS="log_path=$dir/reports/ubsan" \
    TSAN_OPTIONS="log_path=$dir/reports/tsan" LSAN_OPTIONS="" "$probe" "$bug" 2>"$dir/stderr"
  local code=$?
  local files
  files=$(ls "$dir/reports")
  if ((code == 0)) || [[ -s $dir/stderr ]] || [[ $(wc -w <<<"$files") != 1 ]] ||
      ! grep -q "$headline" "$dir/reports/$files"; then
    echo "FAILED: $bug: exit code $code; report files: ${files:-none}; stderr:"
    cat "$dir/stderr"
    status=1
  else
    echo "ok: $bug: exit code $code, reported in $files"
  fi
}

if [[ $sanitizers == *address* ]]; then
  expect heap-buffer-overflow "ERROR: AddressSanitizer: heap-buffer-overflow"
  expect leak "ERROR: LeakSanitizer: detected memory leaks"
fi
if [[ $sanitizers == *undefined* ]]; then
  expect signed-overflow "runtime error: signed integer overflow"
fi
if [[ $sanitizers == *thread* ]]; then
  expect data-race "WARNING: ThreadSanitizer: data race"
fi
exit "$status"
