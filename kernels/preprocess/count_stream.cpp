#include "kernels/preprocess/count_stream.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <queue>

#include "kernels/preprocess/hex_key.hpp"

namespace hetflow::kernels::preprocess {
namespace {

constexpr std::size_t record_overhead = 2 + 8;
constexpr uint16_t hex_run_mark = 0xffff;        // a u16 length no string has
constexpr std::size_t hex_run_header = 2 + 4;    // mark | u32 n
constexpr std::size_t hex_run_entry = 4 + 8;     // u32 value | u64 count

class memory_stream_impl final : public count_stream {
public:
  explicit memory_stream_impl(count_entries e) : e_(std::move(e)) {}
  bool next(std::string_view& s, uint64_t& count) override {
    if (i_ >= e_.size()) {
      count_entries().swap(e_);  // release as soon as consumed
      return false;
    }
    s = e_[i_].first;
    count = e_[i_].second;
    ++i_;
    return true;
  }
  // Every stretch of hex entries, up to the next other string.
  std::size_t next_hex(uint32_t* values, uint64_t* counts, std::size_t max) override {
    std::size_t n = 0;
    for (; n < max && i_ < e_.size() && hex8_value(e_[i_].first, values[n]); ++n, ++i_) counts[n] = e_[i_].second;
    return n;
  }

private:
  count_entries e_;
  std::size_t i_ = 0;
};

class merged_stream_impl final : public count_stream {
public:
  explicit merged_stream_impl(std::vector<count_stream*> in) : in_(std::move(in)) {
    cur_.resize(in_.size());
    for (std::size_t i = 0; i < in_.size(); ++i) advance(i);
  }
  std::vector<std::unique_ptr<count_stream>> owned;

  bool next(std::string_view& s, uint64_t& count) override {
    if (heap_.empty()) return false;
    std::size_t i = heap_.top();
    heap_.pop();
    out_.assign(cur_[i].s);
    uint64_t total = cur_[i].count;
    advance(i);
    while (!heap_.empty() && cur_[heap_.top()].s == std::string_view(out_)) {
      std::size_t j = heap_.top();
      heap_.pop();
      total += cur_[j].count;
      advance(j);
    }
    s = out_;
    count = total;
    return true;
  }
  status error() const override {
    for (auto* in : in_)
      if (auto e = in->error(); !e.ok()) return e;
    return {};
  }

private:
  struct head {
    std::string s;  // a copy: the input's view dies on its next()
    uint64_t count = 0;
  };
  struct greater {
    const std::vector<head>* cur;
    bool operator()(std::size_t a, std::size_t b) const {
      int c = key_compare((*cur)[a].s, (*cur)[b].s);
      return c != 0 ? c > 0 : a > b;
    }
  };
  void advance(std::size_t i) {
    std::string_view s;
    uint64_t c;
    if (in_[i]->next(s, c)) {
      cur_[i].s.assign(s);
      cur_[i].count = c;
      heap_.push(i);
    }
  }
  std::vector<count_stream*> in_;
  std::vector<head> cur_;
  std::priority_queue<std::size_t, std::vector<std::size_t>, greater> heap_{greater{&cur_}};
  std::string out_;
};

class chunk_stream_impl final : public count_stream {
public:
  chunk_stream_impl(chunk_fetcher f, std::string who) : fetch_(std::move(f)), who_(std::move(who)) {}
  bool next(std::string_view& s, uint64_t& count) override {
    if (!load()) return false;
    if (at_run()) {
      uint32_t v;
      if (!take_hex(v, count)) return false;
      hex8_chars(v, hex_buf_);
      s = std::string_view(hex_buf_, 8);
      return true;
    }
    if (!err_.ok()) return false;
    uint16_t len;
    std::memcpy(&len, chunk_.data() + pos_, 2);
    if (chunk_.size() - pos_ < record_overhead + len) return corrupt();
    std::string_view v(chunk_.data() + pos_ + 2, len);
    std::memcpy(&count, chunk_.data() + pos_ + 2 + len, 8);
    pos_ += record_overhead + len;
    if (!after_last(v)) return corrupt();
    // The previous string stays a view into the chunk; it is copied only
    // when the chunk is about to be replaced (load()).
    last_s_ = v;
    last_ = last_kind::string;
    s = v;
    return true;
  }
  std::size_t next_hex(uint32_t* values, uint64_t* counts, std::size_t max) override {
    if (max == 0 || !load() || !at_run()) return 0;
    std::size_t n = 0;
    while (n < max && run_left_ > 0) {
      if (!take_hex(values[n], counts[n])) return 0;  // corrupt: next() ends the stream
      ++n;
    }
    return n;
  }
  status error() const override { return err_; }

private:
  enum class last_kind { none, string, hex };
  // A record at pos_ (or an entry of a run), fetching chunks as needed;
  // false at the end or on an error.
  bool load() {
    if (ended_ || !err_.ok()) return false;
    while (run_left_ == 0 && pos_ >= chunk_.size()) {
      auto c = fetch_();
      if (!c) {
        err_ = c.error();
        return false;
      }
      if (c->empty()) {
        ended_ = true;
        return false;
      }
      if (last_ == last_kind::string) last_s_ = kept_.assign(last_s_);
      chunk_ = std::move(*c);
      pos_ = 0;
    }
    return true;
  }
  // After load(): whether the next entry is in a hex run (its header read);
  // false also when the chunk is corrupt (err_ says so).
  bool at_run() {
    if (run_left_ > 0) return true;
    if (chunk_.size() - pos_ < 2) return corrupt();
    uint16_t len;
    std::memcpy(&len, chunk_.data() + pos_, 2);
    if (len != hex_run_mark) {
      if (chunk_.size() - pos_ < record_overhead) return corrupt();
      return false;
    }
    uint32_t n;
    if (chunk_.size() - pos_ < hex_run_header) return corrupt();
    std::memcpy(&n, chunk_.data() + pos_ + 2, 4);
    if (n == 0 || (chunk_.size() - pos_ - hex_run_header) / hex_run_entry < n) return corrupt();
    pos_ += hex_run_header;
    run_left_ = n;
    return true;
  }
  bool take_hex(uint32_t& v, uint64_t& count) {
    std::memcpy(&v, chunk_.data() + pos_, 4);
    std::memcpy(&count, chunk_.data() + pos_ + 4, 8);
    pos_ += hex_run_entry;
    --run_left_;
    if (last_ == last_kind::hex) {
      if (last_hex_ >= v) return corrupt();
    } else {
      char b[8];
      hex8_chars(v, b);
      if (!after_last(std::string_view(b, 8))) return corrupt();
    }
    last_hex_ = v;
    last_ = last_kind::hex;
    return true;
  }
  // Whether string v sorts after the last entry (strictly: each once).
  bool after_last(std::string_view v) const {
    if (last_ == last_kind::none) return true;
    if (last_ == last_kind::string) return key_compare(last_s_, v) < 0;
    char b[8];
    hex8_chars(last_hex_, b);
    return key_compare(std::string_view(b, 8), v) < 0;
  }
  bool corrupt() {
    if (err_.ok())
      err_ = make_error(errc::wire_corrupt,
                        "count chunk from " + who_ + " is corrupt (truncated record or strings out of order)");
    run_left_ = 0;
    return false;
  }
  chunk_fetcher fetch_;
  std::string who_;
  std::vector<char> chunk_;
  std::size_t pos_ = 0;
  uint32_t run_left_ = 0;  // entries of the current hex run still at pos_
  bool ended_ = false;
  last_kind last_ = last_kind::none;
  std::string_view last_s_;  // the last string: into chunk_, or into kept_
  uint32_t last_hex_ = 0;    // the last hex entry's value
  std::string kept_;
  char hex_buf_[8];
  status err_;
};

}  // namespace

count_entries sorted_entries(const string_key_map<uint64_t>& m) {
  // Small keys sort as (bswap(lo), bswap(hi)): bytes 0..14 big-endian, then
  // the length (hi's top byte lands lowest) - the same order as comparing the
  // strings, since shorter strings are zero-padded. No string is built until
  // the order is known.
  struct sortable {
    uint64_t a, b, count;
  };
  std::vector<sortable> small;
  small.reserve(m.size());
  for (const auto& sl : m.small_slots())
    if (sl.key.hi != small_key_empty_hi)
      small.push_back({__builtin_bswap64(sl.key.lo), __builtin_bswap64(sl.key.hi), sl.value});
  std::sort(small.begin(), small.end(),
            [](const sortable& x, const sortable& y) { return x.a != y.a ? x.a < y.a : x.b < y.b; });
  count_entries longs;
  for (auto& [k, v] : m.long_entries()) longs.emplace_back(k, v);
  std::sort(longs.begin(), longs.end(), [](const auto& x, const auto& y) { return x.first < y.first; });

  count_entries v;
  v.reserve(small.size() + longs.size());
  std::size_t j = 0;
  char buf[16];
  for (const auto& e : small) {
    small_key k{__builtin_bswap64(e.a), __builtin_bswap64(e.b)};
    std::string_view s(buf, small_key_bytes(k, buf));
    while (j < longs.size() && std::string_view(longs[j].first) < s) v.push_back(std::move(longs[j++]));
    v.emplace_back(std::string(s), e.count);
  }
  while (j < longs.size()) v.push_back(std::move(longs[j++]));
  return v;
}

std::unique_ptr<count_stream> memory_stream(count_entries entries) {
  return std::make_unique<memory_stream_impl>(std::move(entries));
}

std::unique_ptr<count_stream> merged_stream(std::vector<count_stream*> inputs) {
  return std::make_unique<merged_stream_impl>(std::move(inputs));
}

std::unique_ptr<count_stream> merged_stream(std::vector<std::unique_ptr<count_stream>> owned) {
  std::vector<count_stream*> raw;
  for (auto& p : owned) raw.push_back(p.get());
  auto m = std::make_unique<merged_stream_impl>(std::move(raw));
  m->owned = std::move(owned);
  return m;
}

expected<std::vector<char>> next_count_chunk(count_stream& in, std::size_t max_bytes) {
  // Records are written at `used` into room grown ahead (no resize per
  // record: a chunk holds ~60k of them), from 64 KiB, doubling: the room is
  // zero-filled, and most columns' chunks are small.
  std::vector<char> out(std::min<std::size_t>(max_bytes, 64 << 10) + 64);
  std::size_t used = 0;
  auto room = [&](std::size_t need) {
    if (need > out.size()) out.resize(std::max(need, 2 * out.size()));
  };
  constexpr std::size_t batch = 4096;
  uint32_t values[batch];
  uint64_t counts[batch];
  std::string_view s;
  uint64_t c;
  while (used + record_overhead + 16 <= max_bytes || used == 0) {
    // The stream's next hex entries, as many as fit, as one run (at least
    // one entry in an empty chunk), taken in batches straight into place.
    const std::size_t start = used;
    std::size_t fit = start + hex_run_header + hex_run_entry <= max_bytes
                          ? (max_bytes - start - hex_run_header) / hex_run_entry
                          : std::size_t{start == 0};
    fit = std::min<std::size_t>(fit, std::numeric_limits<uint32_t>::max());
    uint32_t n = 0;
    while (n < fit) {
      const std::size_t k = in.next_hex(values, counts, std::min(batch, fit - n));
      if (k == 0) break;
      room(start + hex_run_header + (std::size_t(n) + k) * hex_run_entry);
      char* p = out.data() + start + hex_run_header + std::size_t(n) * hex_run_entry;
      for (std::size_t j = 0; j < k; ++j, p += hex_run_entry) {
        std::memcpy(p, &values[j], 4);
        std::memcpy(p + 4, &counts[j], 8);
      }
      n += static_cast<uint32_t>(k);
    }
    if (n > 0) {
      const uint16_t mark = hex_run_mark;
      std::memcpy(out.data() + start, &mark, 2);
      std::memcpy(out.data() + start + 2, &n, 4);
      used = start + hex_run_header + std::size_t(n) * hex_run_entry;
      continue;
    }
    if (!in.next(s, c)) break;
    if (s.size() > max_chunk_string_bytes)
      return make_error(errc::invalid_argument,
                        "a string of " + std::to_string(s.size()) + " bytes is too long for a count chunk (at most " +
                            std::to_string(max_chunk_string_bytes) + ")");
    const std::size_t need = used + record_overhead + s.size();
    room(need);
    const uint16_t len = static_cast<uint16_t>(s.size());
    char* p = out.data() + used;
    std::memcpy(p, &len, 2);
    std::memcpy(p + 2, s.data(), s.size());
    std::memcpy(p + 2 + s.size(), &c, 8);
    used = need;
  }
  if (auto e = in.error(); !e.ok()) return e;
  out.resize(used);
  return out;
}

std::unique_ptr<count_stream> chunk_stream(chunk_fetcher fetch, std::string who) {
  return std::make_unique<chunk_stream_impl>(std::move(fetch), std::move(who));
}

}  // namespace hetflow::kernels::preprocess
