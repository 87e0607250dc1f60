// hex_key: Criteo's categorical values - 8 lowercase hex digits - as 32-bit
// integers, and the open-addressing table that counts them in pass 1.
//
// Only exactly 8 bytes of [0-9a-f] take this form; every other string
// ("", "ABCDEF12", "1234567", "12345678x", ...) stays a string
// (string_key_map). The mapping is a bijection between those strings and
// uint32, and it keeps their order: '0' < '9' < 'a' < 'f' in ASCII, so the
// byte order of the strings is the numeric order of the values (the first
// byte is the most significant digit). Upper-case digits are other strings:
// "ABCDEF12" and "abcdef12" are distinct, as they are byte for byte.
#pragma once

#include <sys/mman.h>
#if defined(__SSE4_1__)
#include <smmintrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <new>
#include <string_view>
#include <utility>

namespace hetflow::kernels::preprocess {

// The value of 8 lowercase hex digits held in w (byte 0 = the string's first
// byte, little-endian load); false if any byte is not [0-9a-f].
inline bool hex8_value(uint64_t w, uint32_t& value) noexcept {
  // Each byte's would-be digit: its low 4 bits, + 9 when bit 6 is set ('a' =
  // 0x61 -> 1 + 9); at most 24, so no byte carries into the next below.
  const uint64_t n = (w & 0x0f0f0f0f0f0f0f0full) + ((w >> 6) & 0x0101010101010101ull) * 9;
  // Valid iff every digit is at most 15 and every byte is its digit's own
  // character: '0' + d, or 'a' + d - 10 = '0' + d + 39 when d > 9.
  const uint64_t over9 = ((n + 0x7676767676767676ull) >> 7) & 0x0101010101010101ull;
  const uint64_t over15 = (n + 0x7070707070707070ull) & 0x8080808080808080ull;
  if (over15 | ((n + 0x3030303030303030ull + over9 * 39) ^ w)) return false;
  uint64_t x = __builtin_bswap64(n);  // first digit in the top byte
  x = (x | (x >> 4)) & 0x00ff00ff00ff00ffull;
  x = (x | (x >> 8)) & 0x0000ffff0000ffffull;
  value = static_cast<uint32_t>(x | (x >> 16));
  return true;
}

inline bool hex8_value(std::string_view s, uint32_t& value) noexcept {
  if (s.size() != 8) return false;
  uint64_t w;
  std::memcpy(&w, s.data(), 8);
  return hex8_value(w, value);
}

// hex8_value for two words at once: ok0/ok1 say which were 8 lowercase hex
// digits, v0/v1 their values (unspecified when not). SSE4.1 where the build
// targets it (HETFLOW_KERNELS_ARCH, x86-64-v2 by default), else one at a time.
inline void hex8_value2(uint64_t w0, uint64_t w1, uint32_t& v0, bool& ok0, uint32_t& v1, bool& ok1) noexcept {
#if defined(__SSE4_1__)
  const __m128i w = _mm_set_epi64x(static_cast<long long>(w1), static_cast<long long>(w0));
  // Digits as in hex8_value: low 4 bits, + 9 where bit 6 is set (at most 24).
  const __m128i letter = _mm_cmpeq_epi8(_mm_and_si128(w, _mm_set1_epi8(0x40)), _mm_set1_epi8(0x40));
  const __m128i n = _mm_add_epi8(_mm_and_si128(w, _mm_set1_epi8(0x0f)), _mm_and_si128(letter, _mm_set1_epi8(9)));
  const __m128i over9 = _mm_cmpgt_epi8(n, _mm_set1_epi8(9));
  const __m128i own = _mm_add_epi8(_mm_add_epi8(n, _mm_set1_epi8(0x30)), _mm_and_si128(over9, _mm_set1_epi8(39)));
  const __m128i good = _mm_andnot_si128(_mm_cmpgt_epi8(n, _mm_set1_epi8(15)), _mm_cmpeq_epi8(own, w));
  const unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(good));
  ok0 = (mask & 0xff) == 0xff;
  ok1 = (mask >> 8) == 0xff;
  // Pack: byte pairs (first digit high) -> 16 bits, then 16-bit pairs -> 32.
  __m128i x = _mm_maddubs_epi16(n, _mm_set1_epi16(0x0110));  // d0 * 16 + d1 (bytes 16, 1)
  x = _mm_madd_epi16(x, _mm_set1_epi32(0x00010100));       // (d0d1) * 256 + (d2d3)
  x = _mm_packus_epi32(x, x);                                 // 16-bit: half0 lo, half0 hi, half1 lo, half1 hi
  x = _mm_shufflelo_epi16(x, _MM_SHUFFLE(2, 3, 0, 1));        // first four digits in the high 16 bits
  const uint64_t both = static_cast<uint64_t>(_mm_cvtsi128_si64(x));
  v0 = static_cast<uint32_t>(both);
  v1 = static_cast<uint32_t>(both >> 32);
#else
  ok0 = hex8_value(w0, v0);
  ok1 = hex8_value(w1, v1);
#endif
}

// The 8 lowercase hex digits of v (out: 8 bytes of room).
inline void hex8_chars(uint32_t v, char* out) noexcept {
  // Spread the nibbles to bytes, first digit in byte 0.
  uint64_t n = v;
  n = (n | (n << 16)) & 0x0000ffff0000ffffull;
  n = (n | (n << 8)) & 0x00ff00ff00ff00ffull;
  n = (n | (n << 4)) & 0x0f0f0f0f0f0f0f0full;
  n = __builtin_bswap64(n);
  // Nibble d -> '0' + d, or 'a' + d - 10 = '0' + d + 39 when d > 9.
  const uint64_t over9 = ((n + 0x7676767676767676ull) >> 7) & 0x0101010101010101ull;
  n += 0x3030303030303030ull + over9 * 39;
  std::memcpy(out, &n, 8);
}

// Counts hex values: value -> (local id, count), open addressing with
// linear probing, 12-byte slots {key, local id + 1, count} (a cache line
// holds 5 1/3; a lookup and its count update touch one line, or two for the
// 3 slots in 16 that cross a line, which the caller prefetches both), at
// most 70% full. Not thread-safe: one owner at a time. (16-byte slots, with
// a spare word, until 2026-12-06: the tables of a 1M-row job took 52 MiB
// instead of 42, and pass 1 on one thread was 0.64-0.80 s against
// 0.60-0.74 s, 4 of 5 rounds of bench/preprocess/ab.sh faster; 2 nodes,
// each node's count 0.33-0.47 against 0.32-0.44 s, 8 of 11 faster; every
// page of a table is a fresh 2 MiB page the VM's host backs again.)
class hex_table {
public:
  struct slot {
    uint32_t key;
    uint32_t local_plus1;  // 0: empty
    uint32_t count;
  };

  // Counts one more sight of key and returns its local id; when absent,
  // inserts it with local id `fresh` (count 1) and sets inserted.
  uint32_t count(uint32_t key, uint32_t fresh, bool& inserted) {
    if (size_ >= limit_) grow();
    std::size_t i = index(key);
    for (;;) {
      slot& sl = slots_[i];
      if (sl.local_plus1 == 0) {
        sl = slot{key, fresh + 1, 1};
        ++size_;
        inserted = true;
        return fresh;
      }
      if (sl.key == key) {
        ++sl.count;
        inserted = false;
        return sl.local_plus1 - 1;
      }
      i = (i + 1) & mask_;
    }
  }
  // count() over a run of row keys, in place: keys below 2^32 are hex values,
  // counted here; any other key k becomes other(k, next_local) (which hands
  // out next_local++ when it inserts). Each key is replaced by its local id.
  // Fresh local ids come from next_local, in order of first sight. The slot
  // array, mask and shift live in registers between grows; slots are
  // prefetched `ahead` keys in advance (for every key: a wasted prefetch for a
  // non-hex one costs less than the branch that would skip it).
  template <std::size_t ahead, class Other>
  void count_run(uint64_t* __restrict keys, std::size_t n, uint32_t& next_local, Other&& other) {
    if (size_ >= limit_) grow();
    slot* s = &slots_[0];
    std::size_t mask = mask_, shift = shift_;
    std::size_t room = limit_ - size_;
    uint32_t next = next_local;
    auto step = [&](std::size_t k) __attribute__((always_inline)) {
      const uint64_t key = keys[k];
      if (__builtin_expect(key >= (uint64_t{1} << 32), 0)) {
        keys[k] = other(key, next);
        return;
      }
      const uint32_t kk = static_cast<uint32_t>(key);
      std::size_t i = hash_index(kk, shift);
      for (;;) {
        slot& sl = s[i];
        if (sl.local_plus1 == 0) {
          sl = slot{kk, next + 1, 1};
          keys[k] = next++;
          if (--room == 0) {
            size_ = limit_;
            grow();
            s = &slots_[0];
            mask = mask_;
            shift = shift_;
            room = limit_ - size_;
          }
          return;
        }
        if (sl.key == kk) {
          ++sl.count;
          keys[k] = sl.local_plus1 - 1;
          return;
        }
        i = (i + 1) & mask;
      }
    };
    std::size_t k = 0;
    for (; k + ahead < n; ++k) {
      prefetch_slot(&s[hash_index(static_cast<uint32_t>(keys[k + ahead]), shift)]);
      step(k);
    }
    for (; k < n; ++k) step(k);
    size_ = limit_ - room;
    next_local = next;
  }

  // The local_plus1 of an entry add_run() inserted: counted by another
  // shard, with no local id here.
  static constexpr uint32_t foreign = ~uint32_t{0};
  // Adds pairs[2k + 1] sights of pairs[2k] (value, count pairs), each value
  // inserted as `foreign` when absent, and puts its slot index in slot_of[k]. A count past
  // 2^32 - 1 stops it: false. Slot indices stay valid until the table grows;
  // if it grew during the run (regrown), only find() gives them.
  bool add_run(const uint32_t* pairs, std::size_t n, uint32_t* slot_of, bool& regrown) {
    constexpr std::size_t ahead = 16;
    std::size_t k = 0;
    while (k < n) {
      if (size_ >= limit_) {
        grow();
        regrown = true;
      }
      // A stretch that cannot outgrow the table: no size check per key.
      const std::size_t stop = k + std::min(n - k, limit_ - size_);
      slot* s = &slots_[0];
      const std::size_t mask = mask_, shift = shift_;
      for (; k < stop; ++k) {
        if (k + ahead < n) prefetch_slot(&s[hash_index(pairs[2 * (k + ahead)], shift)]);
        const uint32_t key = pairs[2 * k], count = pairs[2 * k + 1];
        std::size_t i = hash_index(key, shift);
        for (;;) {
          slot& sl = s[i];
          if (sl.local_plus1 == 0) {
            sl = slot{key, foreign, count};
            ++size_;
            break;
          }
          if (sl.key == key) {
            if (sl.count > ~uint32_t{0} - count) return false;
            sl.count += count;
            break;
          }
          i = (i + 1) & mask;
        }
        slot_of[k] = static_cast<uint32_t>(i);
      }
    }
    return true;
  }
  // The slot index of each value of n (value, count) pairs, all present.
  void find_run(const uint32_t* pairs, std::size_t n, uint32_t* slot_of) const {
    find_each(pairs, n, [&](std::size_t k, const slot* sl) { slot_of[k] = static_cast<uint32_t>(sl - &slots_[0]); });
  }
  // The slot holding key, or nullptr.
  const slot* find(uint32_t key) const noexcept {
    if (slots_.empty()) return nullptr;
    for (std::size_t i = index(key);; i = (i + 1) & mask_) {
      const slot& sl = slots_[i];
      if (sl.local_plus1 == 0) return nullptr;
      if (sl.key == key) return &sl;
    }
  }
  // find() for the values of n (value, count) pairs, in order: f(k, the slot
  // of pairs[2k] or nullptr); slots prefetched 16 values ahead.
  template <class F>
  void find_each(const uint32_t* pairs, std::size_t n, F&& f) const {
    constexpr std::size_t ahead = 16;
    if (slots_.empty()) {
      for (std::size_t k = 0; k < n; ++k) f(k, static_cast<const slot*>(nullptr));
      return;
    }
    for (std::size_t k = 0; k < n; ++k) {
      if (k + ahead < n) prefetch_slot(&slots_[index(pairs[2 * (k + ahead)])]);
      f(k, find(pairs[2 * k]));
    }
  }
  // Room for n entries without growing (one rehash now, if any).
  void reserve(std::size_t n) {
    std::size_t cap = slots_.empty() ? 1024 : slots_.size();
    while (cap / 10 * 7 < n) cap *= 2;
    if (cap != slots_.size()) grow_to(cap);
  }
  slot* slot_data() noexcept { return slots_.empty() ? nullptr : &slots_[0]; }
  std::size_t capacity() const noexcept { return slots_.size(); }
  std::size_t size() const noexcept { return size_; }
  std::size_t memory_bytes() const noexcept { return slots_.memory_bytes(); }
  // Visits every (key, local id, count); order unspecified.
  template <class F>
  void for_each(F&& f) const {
    for (const slot& sl : slots_)
      if (sl.local_plus1) f(sl.key, sl.local_plus1 - 1, sl.count);
  }
  void clear_and_release() {
    slots_.release();
    size_ = limit_ = mask_ = 0;
    shift_ = 64;
  }

private:
  // Both lines of a slot that crosses one (3 slots in 16); the second
  // prefetch is a hit for the others.
  static void prefetch_slot(const slot* sl) noexcept {
    const char* at = reinterpret_cast<const char*>(sl);
    __builtin_prefetch(at, 1);
    __builtin_prefetch(at + sizeof(slot) - 1, 1);
  }
  static std::size_t hash_index(uint32_t key, std::size_t shift) noexcept {
    // Fibonacci hashing: the top bits of key * 2^64/phi.
    return static_cast<std::size_t>((static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> shift);
  }
  std::size_t index(uint32_t key) const noexcept { return hash_index(key, shift_); }
  void grow() { grow_to(slots_.empty() ? 1024 : slots_.size() * 2); }
  void grow_to(std::size_t cap) {
    slot_array old(cap);
    std::swap(old, slots_);
    mask_ = cap - 1;
    shift_ = 64 - static_cast<std::size_t>(__builtin_ctzll(cap));
    limit_ = cap / 10 * 7;
    for (const slot& sl : old) {
      if (!sl.local_plus1) continue;
      std::size_t i = index(sl.key);
      while (slots_[i].local_plus1) i = (i + 1) & mask_;
      slots_[i] = sl;
    }
  }

  // Zeroed slots. From 256 KiB on, fresh anonymous pages (already zero: no
  // memset of tables that are about to be filled at random), 2 MiB aligned
  // and on transparent huge pages where the kernel gives them (madvise
  // mode): the lookups are random, and with 4 KiB pages nearly every one of
  // a big column's also misses the TLB. The pages are faulted in writable
  // up front (MADV_POPULATE_WRITE, one call): the first touch of a slot is a
  // load, which would map the shared zero page, and the store after it
  // would then copy it into a 4 KiB page (the huge page lost) and flush the
  // other threads' TLBs - two faults and an IPI per 4 KiB (with the small
  // tables' below, ~5% of the CPU time of a 2-thread 1M-row vocab run in a
  // perf profile on the 2-core VM). Every page is written anyway (the slots
  // are hashed over the whole array), so populating costs no extra zeroing.
  // A kernel without it (before 5.14) faults them as before.
  class slot_array {
  public:
    slot_array() = default;
    explicit slot_array(std::size_t n) : n_(n) {
      const std::size_t bytes = n * sizeof(slot);
      if (bytes >= huge_from) {
        // Whole 2 MiB pages: a table of 256 KiB - 2 MiB takes one (on 4 KiB
        // pages its 64-256 first touches cost ~7 us each on the PVM guest,
        // see huge_memory.hpp; a growing column passes through all of them).
        const std::size_t whole = (bytes + huge_page - 1) / huge_page * huge_page;
        map_bytes_ = whole + huge_page;
        void* m = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) throw std::bad_alloc();
        map_ = m;
        const auto at = (reinterpret_cast<uintptr_t>(m) + huge_page - 1) & ~(uintptr_t{huge_page} - 1);
        p_ = reinterpret_cast<slot*>(at);
        ::madvise(p_, whole, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
        (void)::madvise(p_, bytes, MADV_POPULATE_WRITE);  // best effort (see above)
#endif
      } else {
        // Zeroed by a store, not calloc: calloc leaves a fresh mapping
        // untouched, and the first load of a slot would map the zero page
        // (the copy-on-write and TLB flush described above). aligned_alloc,
        // not malloc: GCC folds malloc + memset(0) back into calloc. Slots
        // on cache-line boundaries, as in the big arrays (bytes is a
        // multiple of 64: at least 1024 slots of 12 bytes).
        p_ = static_cast<slot*>(std::aligned_alloc(64, bytes));
        if (!p_) throw std::bad_alloc();
        std::memset(static_cast<void*>(p_), 0, bytes);
      }
    }
    slot_array(slot_array&& o) noexcept
        : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), map_(std::exchange(o.map_, nullptr)),
          map_bytes_(std::exchange(o.map_bytes_, 0)) {}
    slot_array& operator=(slot_array&& o) noexcept {
      std::swap(p_, o.p_);
      std::swap(n_, o.n_);
      std::swap(map_, o.map_);
      std::swap(map_bytes_, o.map_bytes_);
      return *this;
    }
    ~slot_array() {
      if (map_) ::munmap(map_, map_bytes_);
      else std::free(p_);
    }
    void release() noexcept { *this = slot_array(); }
    bool empty() const noexcept { return n_ == 0; }
    std::size_t size() const noexcept { return n_; }
    // What it holds in memory: whole 2 MiB pages where it has its own mapping.
    std::size_t memory_bytes() const noexcept { return map_ ? map_bytes_ - huge_page : n_ * sizeof(slot); }
    slot& operator[](std::size_t i) noexcept { return p_[i]; }
    const slot& operator[](std::size_t i) const noexcept { return p_[i]; }
    const slot* begin() const noexcept { return p_; }
    const slot* end() const noexcept { return p_ + n_; }

  private:
    static constexpr std::size_t huge_page = std::size_t{2} << 20;
    static constexpr std::size_t huge_from = std::size_t{256} << 10;
    slot* p_ = nullptr;
    std::size_t n_ = 0;
    void* map_ = nullptr;  // the mapping p_ lies in (big arrays)
    std::size_t map_bytes_ = 0;
  };

  slot_array slots_;
  std::size_t size_ = 0, limit_ = 0, mask_ = 0;
  std::size_t shift_ = 64;  // size_t, not a 32-bit type: slot stores (uint32_t) must not alias it
};

}  // namespace hetflow::kernels::preprocess
