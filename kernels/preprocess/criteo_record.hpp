// criteo_record: the Criteo click-log text format and the packed output record.
//
// Input line (Criteo Kaggle / Terabyte):
//   label \t I1 .. I13 \t C1 .. C26 \n      40 tab-separated fields, any empty
// Output record (little-endian, packed, 160 bytes; any tool can read it):
//   { int32 label; float32 dense[13]; int32 sparse[26]; }
#pragma once

#include <cstddef>
#include <cstdint>

namespace hetflow::kernels::preprocess {

inline constexpr int dense_columns = 13;
inline constexpr int sparse_columns = 26;
inline constexpr int criteo_fields = 1 + dense_columns + sparse_columns;  // 40

struct criteo_record {
  int32_t label;
  float dense[dense_columns];
  int32_t sparse[sparse_columns];
};
static_assert(sizeof(criteo_record) == 160, "the output record is 160 packed bytes");
static_assert(alignof(criteo_record) == 4);

// The output files are little-endian; this build writes host order.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "big-endian hosts are not supported");

}  // namespace hetflow::kernels::preprocess
