# Registers every doctest case of one test binary as a ctest test (run after the binary is
# linked: cmake -P discover_cases.cmake with EXECUTABLE, OUTPUT and WORKING_DIRECTORY set).
#
# A case's TEST_SUITE name says how ctest treats it, as words separated by spaces:
#
#   TEST_SUITE("fast")              the tier (exactly one of test/cmake/tiers.cmake's)
#   TEST_SUITE("check ranks=4")     ranks=N: the case runs N processes at once (mpirun -np N),
#                                   so ctest -j counts it as N processors (PROCESSORS N) and
#                                   labels it mpi
#   TEST_SUITE("fast gpu")          any other word is one more label (gpu: needs a CUDA device)
#
# The binary lists its cases once, as XML (doctest --list-test-cases --reporters=xml), instead of
# once per case as doctest's own discovery does. A case without a tier stops the build with a
# line naming the case, so that no test can fall out of every tier.
cmake_minimum_required(VERSION 3.25)  # script mode: the policies of the project (IN_LIST)
include(${CMAKE_CURRENT_LIST_DIR}/tiers.cmake)

execute_process(
  COMMAND "${EXECUTABLE}" --list-test-cases --reporters=xml
  OUTPUT_VARIABLE listing
  ERROR_VARIABLE listing_error
  RESULT_VARIABLE listing_result
  WORKING_DIRECTORY "${WORKING_DIRECTORY}")
if(NOT listing_result EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --list-test-cases failed (${listing_result}): ${listing_error}")
endif()

# XML attribute text → the text doctest was given. Before the listing is cut into a CMake list,
# each ';' (the end of an entity such as &quot;) becomes the word SEMICOLON and each square
# bracket OPENBRACKET or CLOSEBRACKET: a list would split on the one, and join elements across
# an unbalanced other.
function(unescape_xml out text)
  string(REPLACE "SEMICOLON" ";" text "${text}")
  string(REPLACE "OPENBRACKET" "[" text "${text}")
  string(REPLACE "CLOSEBRACKET" "]" text "${text}")
  string(REPLACE "&quot;" "\"" text "${text}")
  string(REPLACE "&apos;" "'" text "${text}")
  string(REPLACE "&lt;" "<" text "${text}")
  string(REPLACE "&gt;" ">" text "${text}")
  string(REPLACE "&amp;" "&" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# A bracket argument that holds any text (test names hold quotes, apostrophes and brackets).
function(bracket out text)
  set(${out} "[==[${text}]==]" PARENT_SCOPE)
endfunction()

string(REPLACE ";" "SEMICOLON" listing "${listing}")
string(REPLACE "[" "OPENBRACKET" listing "${listing}")
string(REPLACE "]" "CLOSEBRACKET" listing "${listing}")
# One case a line. doctest escapes '<' and '"' in attributes but not '>', so a case ends at its
# line's end, not at the first '>'; and every <TestCase is matched, or the build stops.
string(REGEX MATCHALL "<TestCase [^\n]*/>" cases "${listing}")
string(REGEX MATCHALL "<TestCase " openings "${listing}")
list(LENGTH cases case_count)
list(LENGTH openings opening_count)
if(NOT case_count EQUAL opening_count)
  message(FATAL_ERROR "${EXECUTABLE}: ${opening_count} test cases listed but ${case_count} "
                      "read; the listing's format is not the one this script reads")
endif()
set(script "")
bracket(working_directory "${WORKING_DIRECTORY}")
bracket(executable "${EXECUTABLE}")
foreach(case IN LISTS cases)
  string(REGEX MATCH " name=\"([^\"]*)\"" _ "${case}")
  unescape_xml(name "${CMAKE_MATCH_1}")
  string(REGEX MATCH " testsuite=\"([^\"]*)\"" _ "${case}")
  unescape_xml(suite "${CMAKE_MATCH_1}")
  string(REGEX MATCH " filename=\"([^\"]*)\" line=\"([0-9]*)\"" _ "${case}")
  set(where "${CMAKE_MATCH_1}:${CMAKE_MATCH_2}")

  if(name MATCHES "[,;\\\\]")
    # doctest's --test-case= splits filters on ',' and ctest's lists split on ';'.
    message(FATAL_ERROR "${where}: the test case name '${name}' holds ',' ';' or '\\'; reword it")
  endif()

  titan_suite_properties("${suite}" "${where}: test case '${name}'" tier labels processors)
  titan_tier_properties("${tier}" tier_properties)

  bracket(quoted_name "${name}")
  bracket(filter "--test-case=${name}")
  string(APPEND script
         "add_test(${quoted_name} ${executable} ${filter})\n"
         "set_tests_properties(${quoted_name} PROPERTIES WORKING_DIRECTORY ${working_directory}"
         " LABELS \"${labels}\" PROCESSORS ${processors} SKIP_RETURN_CODE 77"
         " ENVIRONMENT \"${TITAN_TEST_ENVIRONMENT}\""
         " ${tier_properties})\n")
endforeach()

file(WRITE "${OUTPUT}" "${script}")
