// GPU parity tests (in progress).
#include <doctest/doctest.h>
