#include "kernels/preprocess/count_stream.hpp"

#include <algorithm>
#include <cstring>
#include <queue>

namespace hetflow::kernels::preprocess {
namespace {

constexpr std::size_t record_overhead = 2 + 8;

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
    if (ended_ || !err_.ok()) return false;
    while (pos_ >= chunk_.size()) {
      auto c = fetch_();
      if (!c) {
        err_ = c.error();
        return false;
      }
      if (c->empty()) {
        ended_ = true;
        return false;
      }
      if (have_last_) last_ = kept_.assign(last_);
      chunk_ = std::move(*c);
      pos_ = 0;
    }
    uint16_t len;
    if (chunk_.size() - pos_ < record_overhead) return corrupt();
    std::memcpy(&len, chunk_.data() + pos_, 2);
    if (chunk_.size() - pos_ < record_overhead + len) return corrupt();
    std::string_view v(chunk_.data() + pos_ + 2, len);
    std::memcpy(&count, chunk_.data() + pos_ + 2 + len, 8);
    pos_ += record_overhead + len;
    if (have_last_ && key_compare(last_, v) >= 0) return corrupt();
    // The previous string stays a view into the chunk; it is copied only
    // when the chunk is about to be replaced (above).
    last_ = v;
    have_last_ = true;
    s = v;
    return true;
  }
  status error() const override { return err_; }

private:
  bool corrupt() {
    err_ = make_error(errc::wire_corrupt,
                      "count chunk from " + who_ + " is corrupt (truncated record or strings out of order)");
    return false;
  }
  chunk_fetcher fetch_;
  std::string who_;
  std::vector<char> chunk_;
  std::size_t pos_ = 0;
  bool ended_ = false;
  bool have_last_ = false;
  std::string_view last_;  // into chunk_, or into kept_
  std::string kept_;
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
  // record: a chunk holds ~60k of them).
  std::vector<char> out(std::min<std::size_t>(max_bytes, 1 << 20) + 64);
  std::size_t used = 0;
  std::string_view s;
  uint64_t c;
  while (used + record_overhead + 16 <= max_bytes || used == 0) {
    if (!in.next(s, c)) break;
    const std::size_t need = used + record_overhead + s.size();
    if (need > out.size()) out.resize(std::max(need, 2 * out.size()));
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
