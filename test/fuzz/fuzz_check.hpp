// Shared by the libFuzzer targets of test/fuzz/ and their replay test.
//
// A target's LLVMFuzzerTestOneInput feeds one input to a decoder and checks
// the decoder's contract: an error status with one of the documented codes,
// or a result whose every view and count is consistent. A broken contract is
// FUZZ_CHECK's abort(): libFuzzer saves the input as a crash, and the replay
// test (replay_test.cpp, normal builds) dies on it.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, what)                                                            \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: fuzz contract broken: %s (%s)\n", __FILE__, __LINE__, \
                   what, #cond);                                                          \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

// Declared here so that the replay test (no libFuzzer) can call the entry.
extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size);
