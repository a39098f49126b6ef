# The test tiers (docs/testing.md), shared by the doctest discovery (discover_cases.cmake) and
# the tests test/CMakeLists.txt registers by hand. Every test carries exactly one tier label:
#
#   fast    unit, gradient and small multi-rank checks (at most 4 ranks, a few steps): the
#           edit loop, scripts/test.sh --fast, one to two minutes on 2 cores
#   check   end-to-end runs of the binaries and the mesh tests: one case per code path
#   system  the product against real systems (Slurm, podman, chaos of whole jobs): test/system/
#   matrix  the rest of the large matrices, each of whose paths a check case already covers:
#           scripts/test.sh --full
#
# A tier's properties: how long one of its tests may take before ctest kills it (generous,
# since the sanitized tree runs the same tests 2-5 times slower), and whether it must run
# alone (the system tests start daemons and whole jobs of their own).
set(TITAN_TIERS fast check system matrix)

# Every test process (and every rank it starts) runs its GEMMs on one thread, so that a test
# uses as many cores as it declares processes (PROCESSORS: 1, or N for ranks=N) and ctest -j N
# keeps N cores busy without oversubscribing them: OpenBLAS's worker threads spin while they
# wait, and two tests' pools on the same cores slowed both several times over.
set(TITAN_TEST_ENVIRONMENT OPENBLAS_NUM_THREADS=1)

function(titan_tier_properties tier out)
  if(tier STREQUAL "fast")
    set(properties TIMEOUT 300)
  elseif(tier STREQUAL "check")
    set(properties TIMEOUT 1200)
  elseif(tier STREQUAL "matrix")
    set(properties TIMEOUT 2400)
  elseif(tier STREQUAL "system")
    set(properties TIMEOUT 2400 RUN_SERIAL ON)
  else()
    message(FATAL_ERROR "unknown test tier '${tier}'; the tiers are ${TITAN_TIERS}")
  endif()
  set(${out} ${properties} PARENT_SCOPE)
endfunction()

# Reads a TEST_SUITE name ("check ranks=4 gpu"): its tier, its labels (the tier, every other
# word, and mpi when it runs several ranks) as a ';' list, and the processes it runs at once.
# `what` names the test in the error when the words are wrong.
function(titan_suite_properties suite what tier_out labels_out processors_out)
  string(REGEX REPLACE "[ \t]+" ";" words "${suite}")
  set(tier "")
  set(labels "")
  set(processors 1)
  foreach(word IN LISTS words)
    if(word STREQUAL "")
      continue()
    elseif(word IN_LIST TITAN_TIERS)
      if(NOT tier STREQUAL "")
        message(FATAL_ERROR "${what}: two tiers, '${tier}' and '${word}', in TEST_SUITE(\"${suite}\"); keep one")
      endif()
      set(tier "${word}")
    elseif(word MATCHES "^ranks=([0-9]+)$")
      set(processors ${CMAKE_MATCH_1})
    elseif(word MATCHES "^[a-z][a-z0-9_]*$")
      list(APPEND labels "${word}")
    else()
      message(FATAL_ERROR "${what}: '${word}' in TEST_SUITE(\"${suite}\") is neither a tier (${TITAN_TIERS}), ranks=N nor a label word")
    endif()
  endforeach()
  if(tier STREQUAL "")
    message(FATAL_ERROR "${what}: TEST_SUITE(\"${suite}\") names no tier; start it with one of ${TITAN_TIERS} (docs/testing.md)")
  endif()
  if(processors GREATER 1 AND NOT "mpi" IN_LIST labels)
    list(APPEND labels mpi)
  endif()
  list(PREPEND labels "${tier}")
  set(${tier_out} "${tier}" PARENT_SCOPE)
  set(${labels_out} "${labels}" PARENT_SCOPE)
  set(${processors_out} ${processors} PARENT_SCOPE)
endfunction()
