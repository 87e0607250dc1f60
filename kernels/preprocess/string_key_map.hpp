// string_key_map: an open-addressing hash map from categorical strings to a
// value (a count in pass 1, an id in pass 2).
//
// Criteo categoricals are 8 hex characters; strings of at most 15 bytes are
// packed into a 16-byte small_key (no allocation, one compare), longer ones
// go to a std::unordered_map on the side. Not thread-safe: one owner at a
// time (pass 1 gives each column to one task).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hetflow::kernels::preprocess {

// Bytes 0..7 in lo, bytes 8..14 in the low 7 bytes of hi, the length in hi's
// top byte. Length byte 0xff marks an empty slot (no string has it).
struct small_key {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const small_key&, const small_key&) = default;
};

inline constexpr std::size_t small_key_max = 15;
inline constexpr uint64_t small_key_empty_hi = ~uint64_t{0};

// Packs s (s.size() <= 15).
inline small_key make_small_key(std::string_view s) noexcept {
  small_key k;
  if (s.size() == 8) {  // Criteo's hex ids: the common case
    std::memcpy(&k.lo, s.data(), 8);
    k.hi = uint64_t{8} << 56;
    return k;
  }
  unsigned char buf[16] = {};
  std::memcpy(buf, s.data(), s.size());
  std::memcpy(&k.lo, buf, 8);
  std::memcpy(&k.hi, buf + 8, 8);
  k.hi |= static_cast<uint64_t>(s.size()) << 56;
  return k;
}

// Writes the key's bytes to out (16 bytes of room); returns the length.
inline std::size_t small_key_bytes(const small_key& k, char* out) noexcept {
  std::size_t n = static_cast<std::size_t>(k.hi >> 56);
  uint64_t hi = k.hi & 0x00ffffffffffffffull;
  std::memcpy(out, &k.lo, 8);
  std::memcpy(out + 8, &hi, 8);
  return n;
}

inline uint64_t hash_small_key(const small_key& k) noexcept {
  uint64_t h = (k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

template <class V>
class string_key_map {
public:
  struct slot {
    small_key key{0, small_key_empty_hi};
    V value{};
  };

  // The value for s, inserted as V{} when absent.
  V& operator[](std::string_view s) {
    if (s.size() <= small_key_max) return slot_for(make_small_key(s));
    return long_[std::string(s)];
  }
  V& operator[](const small_key& k) { return slot_for(k); }

  const V* find(std::string_view s) const {
    if (s.size() > small_key_max) {
      auto it = long_.find(std::string(s));
      return it == long_.end() ? nullptr : &it->second;
    }
    return find(make_small_key(s));
  }
  const V* find(const small_key& k) const {
    if (slots_.empty()) return nullptr;
    std::size_t i = hash_small_key(k) & mask_;
    for (;;) {
      const slot& sl = slots_[i];
      if (sl.key == k) return &sl.value;
      if (sl.key.hi == small_key_empty_hi) return nullptr;
      i = (i + 1) & mask_;
    }
  }

  // Starts loading k's first slot into the cache (lookups of a row's 26
  // columns, or a column's next keys, then overlap their cache misses).
  void prefetch(const small_key& k) const noexcept {
    if (!slots_.empty()) __builtin_prefetch(&slots_[hash_small_key(k) & mask_]);
  }

  // Entries of the small table, for sorting without building strings.
  const std::vector<slot>& small_slots() const noexcept { return slots_; }
  const std::unordered_map<std::string, V>& long_entries() const noexcept { return long_; }

  std::size_t size() const noexcept { return small_size_ + long_.size(); }
  // Bytes held (slots, long strings and their nodes); what the memory cap counts.
  std::size_t memory_bytes() const noexcept {
    std::size_t b = slots_.size() * sizeof(slot);
    b += long_.size() * (sizeof(std::string) + sizeof(V) + 48) + long_bytes_;
    return b;
  }
  void clear_and_release() {
    std::vector<slot>().swap(slots_);
    std::unordered_map<std::string, V>().swap(long_);
    small_size_ = 0;
    mask_ = 0;
    long_bytes_ = 0;
  }

  // Visits every entry as (string_view, const V&); order unspecified.
  template <class F>
  void for_each(F&& f) const {
    char buf[16];
    for (const slot& sl : slots_)
      if (sl.key.hi != small_key_empty_hi) {
        std::size_t n = small_key_bytes(sl.key, buf);
        f(std::string_view(buf, n), sl.value);
      }
    for (auto& [k, v] : long_) f(std::string_view(k), v);
  }

  // For long strings inserted through operator[] with a string_view (pass 1
  // counts bytes for the memory cap).
  void note_long_bytes(std::size_t n) noexcept { long_bytes_ += n; }

private:
  V& slot_for(const small_key& k) {
    if ((small_size_ + 1) * 2 > slots_.size()) grow();
    std::size_t i = hash_small_key(k) & mask_;
    for (;;) {
      slot& sl = slots_[i];
      if (sl.key == k) return sl.value;
      if (sl.key.hi == small_key_empty_hi) {
        sl.key = k;
        ++small_size_;
        return sl.value;
      }
      i = (i + 1) & mask_;
    }
  }
  void grow() {
    std::size_t cap = slots_.empty() ? 64 : slots_.size() * 2;
    std::vector<slot> old;
    old.swap(slots_);
    slots_.assign(cap, slot{});
    mask_ = cap - 1;
    for (slot& sl : old) {
      if (sl.key.hi == small_key_empty_hi) continue;
      std::size_t i = hash_small_key(sl.key) & mask_;
      while (slots_[i].key.hi != small_key_empty_hi) i = (i + 1) & mask_;
      slots_[i] = sl;
    }
  }

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  std::size_t small_size_ = 0;
  std::unordered_map<std::string, V> long_;
  std::size_t long_bytes_ = 0;
};

}  // namespace hetflow::kernels::preprocess
