// libFuzzer target: the bytes of one PS checkpoint file -> read_checkpoint
// (actors/ps/ps_checkpoint.hpp; a wire message whose payload is a text
// header and a tensor name table). Issue 9: "a corrupt checkpoint file: a
// clear error". The file goes through the in-memory store (no disk).
//
// Contract: errc::parse_error / wire_corrupt / wire_too_large naming the
// file, or a checkpoint whose names, tensors and state count agree.
#include <cstddef>
#include <span>

#include "actors/ps/ps_checkpoint.hpp"
#include "test/fuzz/fuzz_check.hpp"

namespace ps = hetflow::ps;
using hetflow::errc;

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  ps::memory_checkpoint_store store;
  const auto bytes = std::as_bytes(std::span<const unsigned char>(data, size));
  FUZZ_CHECK(store.put(ps::checkpoint_name("ps0", 7), bytes).ok(), "the memory store takes anything");
  auto ck = ps::read_checkpoint(store, "ps0", 7);
  if (!ck) {
    const errc c = ck.error().code();
    FUZZ_CHECK(c == errc::parse_error || c == errc::wire_corrupt || c == errc::wire_too_large,
               "documented error codes only");
    FUZZ_CHECK(ck.error().message().find("ps0.ckpt-") != std::string::npos, "the error names the file");
    return 0;
  }
  FUZZ_CHECK(ck->names.size() == ck->tensors.size(), "one name per tensor");
  FUZZ_CHECK(ck->meta.state_tensors >= 0 && ck->meta.state_tensors <= int64_t(ck->tensors.size()),
             "state tensors are some of the tensors");
  return 0;
}
