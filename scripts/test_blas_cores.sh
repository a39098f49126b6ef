#!/usr/bin/env bash
# The tests under each OpenBLAS core forced by hand: the fast tier (every op against its CPU
# twin) and the check tier's runs that track one rank on a mesh, once for each of Prescott (the
# generic kernels OpenBLAS falls back to), Haswell (AVX2) and SkylakeX (AVX-512). The results
# must not depend on which kernels OpenBLAS runs (core/blas_core.h picks one when it fell back).
#
#   scripts/test_blas_cores.sh [BUILD_DIR]     default build/; SkylakeX needs a CPU with AVX-512
set -uo pipefail
build=${1:-build}
[[ -f $build/CTestTestfile.cmake ]] || { echo "test_blas_cores.sh: $build is no build tree; run scripts/build.sh first" >&2; exit 2; }
meshes='tracks|track one rank|track the single|every FP8 recipe trains on mesh|resumes on \(1 2 2\)'
meshes+='|same val_loss on 1 rank|parallelize FSDP DDP|score as one rank|generates what one rank'
meshes+='|dp 2 trains on the global'
failed=0
for core in Prescott Haswell SkylakeX; do
  for tier in fast meshes; do
    start=$SECONDS
    if [[ $tier == fast ]]; then args=(-L fast)
    else args=(-L check -LE gpu -R "$meshes")
    fi
    summary=$(cd "$build" && OPENBLAS_CORETYPE=$core ctest "${args[@]}" -j 2 --output-on-failure 2>&1 |
              grep -E 'tests passed|tests failed|No tests were found')
    [[ $summary == 100%* ]] || failed=1
    printf '%-9s %-7s %4d s  %s\n' "$core" "$tier" $((SECONDS - start)) "${summary:-no summary}"
  done
done
exit $failed
