// libFuzzer target: profile JSON text -> parse_profile_db (the planner's
// profile files, which `hetflow plan/simulate` read from disk and nodes cache).
//
// Contract: a profile_db or an errc::parse_error / invalid_argument status;
// a parsed db serialises with to_json and parses back to the same shape, and
// the planner's accessors work on every unit range.
#include <cstddef>
#include <string>
#include <string_view>

#include "test/fuzz/fuzz_check.hpp"
#include "topology/profile_db.hpp"

namespace ht = hetflow::topology;
using hetflow::errc;

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto db = ht::parse_profile_db(text, "fuzz.json");
  if (!db) {
    const errc c = db.error().code();
    FUZZ_CHECK(c == errc::parse_error || c == errc::invalid_argument, "documented error codes only");
    FUZZ_CHECK(!db.error().message().empty(), "errors say something");
    return 0;
  }
  auto again = ht::parse_profile_db(ht::to_json(*db), "round-trip.json");
  FUZZ_CHECK(again.has_value(), "to_json output parses");
  FUZZ_CHECK(again->units.size() == db->units.size() && again->devices.size() == db->devices.size() &&
                 again->batch == db->batch,
             "round trip keeps the shape");
  const std::size_t n = db->units.size();
  if (n > 0) {
    (void)db->params_bytes(0, n - 1);
    (void)db->activation_bytes(0, n - 1);
    for (const auto& [kind, dev] : db->devices)
      if (db->has_kind(kind)) (void)db->compute_ms(kind, 0, n - 1);
  }
  if (db->batch > 0) (void)db->at_batch(db->batch * 2);
  return 0;
}
