// ps_shard_core: the shard's update order, checkpoints (a consistent cut),
// restore + continue == uninterrupted, and the wire protocol's round trip.
#define BOOST_TEST_MODULE ps_shard_core
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <random>
#include <set>

#include "actors/ps/ps_checkpoint.hpp"
#include "actors/ps/ps_protocol.hpp"
#include "actors/ps/ps_shard_core.hpp"

using namespace hetflow;
using namespace hetflow::ps;
namespace fs = std::filesystem;

namespace {

std::vector<kernels::parameter> make_params(uint64_t seed) {
  std::mt19937_64 r(seed);
  std::normal_distribution<float> n;
  std::vector<kernels::parameter> v;
  for (auto s : {kernels::shape{4, 3}, kernels::shape{3}, kernels::shape{2, 2, 2}}) {
    kernels::parameter p;
    p.name = "p" + std::to_string(v.size());
    p.value = kernels::tensor::empty(s);
    for (auto& x : p.value.f32_span()) x = n(r);
    v.push_back(std::move(p));
  }
  return v;
}

// Worker w's gradient for its update tagged t: deterministic values.
std::vector<kernels::tensor> grads(const std::vector<kernels::parameter>& like, int w, int64_t t) {
  std::mt19937_64 r(uint64_t(w) * 1000003u + uint64_t(t));
  std::normal_distribution<float> n;
  std::vector<kernels::tensor> g;
  for (auto& p : like) {
    auto x = kernels::tensor::empty(p.value.shape());
    for (auto& e : x.f32_span()) e = n(r);
    g.push_back(std::move(x));
  }
  return g;
}

std::vector<float> flat(const shard_core& c) {
  std::vector<float> out;
  for (auto& p : c.params()) out.insert(out.end(), p.value.f32(), p.value.f32() + p.value.numel());
  return out;
}

shard_config cfg(consistency_model m, int workers, kernels::optimizer_kind k = kernels::optimizer_kind::sgd) {
  shard_config c;
  c.workers = workers;
  c.model = m;
  c.optimizer.kind = k;
  c.optimizer.lr = 0.1;
  c.optimizer.momentum = 0.9;
  c.optimizer.weight_decay = 0.01;
  return c;
}

struct push_ev {
  int w;
  int64_t t;
};

std::unique_ptr<shard_core> run(const shard_config& c, const std::vector<push_ev>& order,
                                const std::vector<int64_t>& totals) {
  auto core = shard_core::make(c, make_params(7));
  BOOST_REQUIRE(core);
  std::vector<pull_ticket> ready;
  std::vector<int64_t> sent(totals.size(), 0);
  for (auto& e : order) {
    BOOST_REQUIRE((*core)->push(e.w, e.t, 0.1, grads((*core)->params(), e.w, e.t), ready).ok());
    if (++sent[std::size_t(e.w)] == totals[std::size_t(e.w)])
      BOOST_REQUIRE((*core)->done(e.w, totals[std::size_t(e.w)], ready).ok());
  }
  return std::move(*core);
}

std::vector<push_ev> shuffled_legal(int W, int64_t T, uint64_t seed) {
  // Any interleaving that keeps each worker's own pushes in order.
  std::mt19937_64 r(seed);
  std::vector<int64_t> next(std::size_t(W), 0);
  std::vector<push_ev> out;
  while (int64_t(out.size()) < W * T) {
    int w = int(r() % uint64_t(W));
    if (next[std::size_t(w)] < T) out.push_back({w, next[std::size_t(w)]++});
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_worker_equals_plain_optimizer) {
  auto c = cfg(consistency_model::bsp(), 1);
  std::vector<push_ev> order;
  for (int t = 0; t < 6; ++t) order.push_back({0, t});
  auto core = run(c, order, {6});
  // Reference: the optimizer on its own, the same gradients and lr.
  auto ref = make_params(7);
  std::vector<kernels::parameter*> ptrs;
  for (auto& p : ref) ptrs.push_back(&p);
  auto opt = kernels::make_optimizer(c.optimizer);
  BOOST_REQUIRE(opt);
  for (int t = 0; t < 6; ++t) {
    auto g = grads(ref, 0, t);
    for (std::size_t i = 0; i < ref.size(); ++i) ref[i].grad = std::move(g[i]);
    BOOST_REQUIRE((*opt)->step(ptrs, 0.1).ok());
  }
  std::vector<float> want;
  for (auto& p : ref) want.insert(want.end(), p.value.f32(), p.value.f32() + p.value.numel());
  BOOST_TEST(flat(*core) == want);
  BOOST_TEST(core->updates_applied() == 6);
}

BOOST_AUTO_TEST_CASE(bsp_result_does_not_depend_on_arrival_order) {
  auto c = cfg(consistency_model::bsp(), 3);
  auto a = run(c, shuffled_legal(3, 5, 1), {5, 5, 5});
  for (uint64_t seed = 2; seed < 8; ++seed) {
    auto b = run(c, shuffled_legal(3, 5, seed), {5, 5, 5});
    BOOST_TEST(flat(*a) == flat(*b));
  }
  // ... but ASP applies on arrival, so orders differ (the check can fail).
  auto ca = cfg(consistency_model::asp(), 3);
  auto x = run(ca, shuffled_legal(3, 5, 1), {5, 5, 5});
  auto y = run(ca, shuffled_legal(3, 5, 2), {5, 5, 5});
  BOOST_TEST(flat(*x) != flat(*y));
}

BOOST_AUTO_TEST_CASE(pulls_wait_for_the_bound) {
  auto core = shard_core::make(cfg(consistency_model::ssp(1), 2), make_params(1));
  BOOST_REQUIRE(core);
  auto& s = **core;
  std::vector<pull_ticket> ready;
  BOOST_TEST(s.pull({0, 1, 1}));   // c - s = 0 <= g = 0
  BOOST_TEST(!s.pull({0, 2, 2}));  // needs g >= 1
  BOOST_REQUIRE(s.push(0, 0, 0.1, grads(s.params(), 0, 0), ready).ok());
  BOOST_REQUIRE(s.push(0, 1, 0.1, grads(s.params(), 0, 1), ready).ok());
  BOOST_TEST(ready.empty());
  BOOST_TEST(s.clocks().slowest() == 1);
  BOOST_REQUIRE(s.push(1, 0, 0.1, grads(s.params(), 1, 0), ready).ok());
  BOOST_REQUIRE(ready.size() == 1u);
  BOOST_TEST(ready[0].id == 2u);
  // A wrong push is refused, naming the parameter.
  auto bad = grads(s.params(), 1, 1);
  bad[1] = kernels::tensor::zeros({5});
  auto st = s.push(1, 1, 0.1, std::move(bad), ready);
  BOOST_TEST(!st.ok());
  BOOST_TEST(st.message().find("p1") != std::string::npos);
}

// SSP with checkpoints every 2 clocks, a fast worker far ahead: the
// checkpoint at label 2 holds exactly tags < 2 of both workers, and
// restoring any checkpoint then pushing the rest gives the uninterrupted
// result bit for bit (weights and momentum).
// A contract test: run against the directory store and the in-memory fake.
BOOST_AUTO_TEST_CASE(checkpoints_are_a_consistent_cut_and_resume_exactly) {
  for (bool on_disk : {true, false})
  for (auto kind : {kernels::optimizer_kind::sgd, kernels::optimizer_kind::adam}) {
    BOOST_TEST_CONTEXT((on_disk ? "directory store" : "memory store") << ", optimizer " << int(kind)) {
    const auto dir = fs::temp_directory_path() / ("hf_ps_ckpt_" + std::to_string(::getpid()) + "_" +
                                                  std::to_string(int(kind)));
    fs::remove_all(dir);
    auto c = cfg(consistency_model::ssp(3), 2, kind);
    c.checkpoint_every = 2;
    c.store = on_disk ? make_directory_store(dir.string()) : std::make_shared<memory_checkpoint_store>();
    auto& store = *c.store;
    // Worker 0 pushes 0..4 before worker 1 pushes anything.
    std::vector<push_ev> order{{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {1, 0}, {1, 1},
                               {1, 2}, {0, 5}, {1, 3}, {1, 4}, {1, 5}};
    auto full = run(c, order, {6, 6});
    BOOST_TEST(full->checkpoints_written() >= 3);  // 2, 4, 6 (final)
    auto labels = list_checkpoints(store, c.name);
    BOOST_REQUIRE(labels.size() == 3u);
    BOOST_TEST(labels.back() == 6);
    // Label 2: exactly tags {0, 1} of each worker, in (tag, worker) order.
    auto ck = read_checkpoint(store, c.name, 2);
    BOOST_REQUIRE(ck);
    BOOST_TEST((ck->meta.clocks == std::vector<int64_t>{2, 2}));
    // (ssp applies on arrival, in each worker's tag order: w0's 0 and 1, then w1's)
    auto cut = run(cfg(consistency_model::asp(), 2, kind), {{0, 0}, {0, 1}, {1, 0}, {1, 1}}, {2, 2});
    std::vector<float> at2;
    for (std::size_t i = 0; i < cut->params().size(); ++i)
      at2.insert(at2.end(), ck->tensors[i].f32(), ck->tensors[i].f32() + ck->tensors[i].numel());
    BOOST_TEST(at2 == flat(*cut));
    // Resume from label 4 and push the rest.
    auto again = shard_core::make(c, make_params(99));  // other initial values: the checkpoint must override
    BOOST_REQUIRE(again);
    BOOST_REQUIRE((*again)->restore(4).ok());
    BOOST_TEST(((*again)->applied_clocks() == std::vector<int64_t>{4, 4}));
    std::vector<pull_ticket> ready;
    // The uninterrupted run applied w0's 4 and 5 (held for checkpoint 4),
    // then w1's 4 and 5: the same arrival order here.
    for (auto e : std::vector<push_ev>{{0, 4}, {0, 5}, {1, 4}, {1, 5}})
      BOOST_REQUIRE((*again)->push(e.w, e.t, 0.1, grads((*again)->params(), e.w, e.t), ready).ok());
    BOOST_REQUIRE((*again)->done(0, 6, ready).ok());
    BOOST_REQUIRE((*again)->done(1, 6, ready).ok());
    BOOST_TEST(flat(**again) == flat(*full));
    // A checkpoint of another job shape is refused with a reason.
    auto other = cfg(consistency_model::bsp(), 3, kind);
    other.store = c.store;
    auto wrong = shard_core::make(other, make_params(7));
    auto st = (*wrong)->restore(4);
    BOOST_TEST(!st.ok());
    BOOST_TEST(st.message().find("workers") != std::string::npos);
    fs::remove_all(dir);
    }
  }
}

// `hetflow shell`'s checkpoint: a requested label is a cut like the periodic
// ones (pushes at or past it held until the global clock reaches it), with
// or without checkpoint_every; a label the shard has passed is refused.
BOOST_AUTO_TEST_CASE(requested_checkpoints_are_consistent_cuts) {
  for (int64_t every : {0, 4}) {
    BOOST_TEST_CONTEXT("checkpoint_every " << every) {
      auto mem = std::make_shared<memory_checkpoint_store>();
      auto c = cfg(consistency_model::asp(), 2);
      c.checkpoint_every = every;
      c.store = mem;
      auto core = shard_core::make(c, make_params(7));
      BOOST_REQUIRE(core);
      std::vector<pull_ticket> ready;
      auto push = [&](int w, int64_t t) {
        BOOST_REQUIRE((*core)->push(w, t, 0.1, grads((*core)->params(), w, t), ready).ok());
      };
      push(0, 0);
      push(0, 1);
      push(0, 2);  // worker 0's update 2 is applied (asp): no cut at 2 any more
      auto refused = (*core)->request_checkpoint(2, ready);
      BOOST_TEST(!refused.ok());
      BOOST_TEST(refused.message().find("worker 0's update 2 is applied already") != std::string::npos);
      BOOST_REQUIRE((*core)->request_checkpoint(3, ready).ok());
      BOOST_TEST(((*core)->requested_checkpoints() == std::set<int64_t>{3}));
      push(0, 3);  // held: tag 3 >= the requested label
      push(0, 4);
      BOOST_TEST(((*core)->applied_clocks() == std::vector<int64_t>{3, 0}));
      for (int64_t t = 0; t < 3; ++t) push(1, t);  // the global clock reaches 3: checkpoint 3, then the held ones
      auto labels = list_checkpoints(*mem, c.name);
      BOOST_REQUIRE(!labels.empty());
      BOOST_TEST(labels.front() == 3);
      auto ck = read_checkpoint(*mem, c.name, 3);
      BOOST_REQUIRE(ck);
      BOOST_TEST((ck->meta.clocks == std::vector<int64_t>{3, 3}));
      BOOST_TEST((*core)->requested_checkpoints().empty());
      // Its weights: exactly tags 0..2 of both workers.
      auto cut = run(cfg(consistency_model::asp(), 2), {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}}, {3, 3});
      std::vector<float> at3;
      for (std::size_t i = 0; i < cut->params().size(); ++i)
        at3.insert(at3.end(), ck->tensors[i].f32(), ck->tensors[i].f32() + ck->tensors[i].numel());
      BOOST_TEST(at3 == flat(*cut));
      BOOST_TEST(!(*core)->request_checkpoint(3, ready).ok());  // not after the last checkpoint
    }
  }
  // No store: refused, saying so.
  auto none = shard_core::make(cfg(consistency_model::bsp(), 1), make_params(7));
  std::vector<pull_ticket> ready;
  auto st = (*none)->request_checkpoint(5, ready);
  BOOST_TEST(!st.ok());
  BOOST_TEST(st.message().find("no checkpoint_dir") != std::string::npos);
}

// A checkpoint write that fails (a crash or a full disk) leaves the previous
// checkpoints as they were, and the shard reports the error.
BOOST_AUTO_TEST_CASE(failed_checkpoint_write_keeps_the_old_ones) {
  auto mem = std::make_shared<memory_checkpoint_store>();
  auto c = cfg(consistency_model::bsp(), 1);
  c.checkpoint_every = 2;
  c.store = mem;
  auto core = shard_core::make(c, make_params(7));
  BOOST_REQUIRE(core);
  std::vector<pull_ticket> ready;
  for (int t = 0; t < 2; ++t) BOOST_REQUIRE((*core)->push(0, t, 0.1, grads((*core)->params(), 0, t), ready).ok());
  BOOST_TEST((list_checkpoints(*mem, c.name) == std::vector<int64_t>{2}));
  BOOST_REQUIRE((*core)->push(0, 2, 0.1, grads((*core)->params(), 0, 2), ready).ok());
  mem->fail_puts = 1;
  auto st = (*core)->push(0, 3, 0.1, grads((*core)->params(), 0, 3), ready);
  BOOST_TEST(!st.ok());
  BOOST_TEST(st.message().find("memory:ps0.ckpt-000000000004") != std::string::npos);
  BOOST_TEST((list_checkpoints(*mem, c.name) == std::vector<int64_t>{2}));
  auto again = shard_core::make(c, make_params(1));
  BOOST_REQUIRE((*again)->restore(2).ok());
  BOOST_TEST(((*again)->applied_clocks() == std::vector<int64_t>{2}));
}

BOOST_AUTO_TEST_CASE(protocol_round_trip) {
  ps_info info;
  info.worker = 3;
  info.shard = 1;
  info.clock = 42;
  info.lr = 0.25;
  auto p = make_params(3);
  std::vector<const kernels::tensor*> ts{&p[0].value, &p[2].value};
  auto buf = make_tensors(kind_push, "psworker3", "ps1", info, ts);
  schemas::read_limits lim;
  auto m = read_ps_message(buf, lim, "test");
  BOOST_REQUIRE(m);
  BOOST_TEST(m->kind == kind_push);
  BOOST_TEST(m->info.clock == 42);
  BOOST_TEST(m->info.lr == 0.25);
  BOOST_TEST(m->sender == "psworker3");
  auto t = tensor_of(*m, 1);
  BOOST_REQUIRE(t);
  BOOST_TEST((t->shape() == p[2].value.shape()));
  BOOST_TEST(std::equal(t->f32(), t->f32() + t->numel(), p[2].value.f32()));
  std::vector<int64_t> list{4, 8, 12};
  auto c = read_ps_message(make_control(kind_checkpoints, "ps0", "psworker0", info, list), lim, "test");
  BOOST_REQUIRE(c);
  BOOST_TEST(c->list == list);
  auto e = read_ps_message(make_control(kind_error, "ps0", "psworker0", info, {}, "slow worker"), lim, "test");
  BOOST_REQUIRE(e);
  BOOST_TEST(e->text == "slow worker");
  // A short payload is refused.
  schemas::envelope_header h{kind_pull, 0, "x", "y"};
  auto raw = schemas::encode_tensor(h, schemas::tensor_meta{dtype::f32, {1}}, std::as_bytes(std::span<const float>(p[1].value.f32(), 1)));
  BOOST_REQUIRE(raw);
  auto bad = read_ps_message(std::make_shared<const wire_buffer>(std::move(*raw)), lim, "peer");
  BOOST_TEST(!bad);
}

BOOST_AUTO_TEST_CASE(checkpoint_files_torn_and_corrupt) {
  const auto dir = fs::temp_directory_path() / ("hf_ps_files_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto params = make_params(5);
  checkpoint_meta meta;
  meta.shard_name = "ps0";
  meta.label = 7;
  meta.clocks = {7, 7};
  std::vector<named_tensor> ts;
  for (auto& p : params) ts.push_back({p.name, &p.value});
  auto store = make_directory_store(dir.string());
  BOOST_REQUIRE(write_checkpoint(*store, meta, ts).ok());
  // A write that crashed before its rename leaves only a temporary: ignored
  // by the listing, removed by the next write.
  { std::FILE* f = std::fopen((checkpoint_path(dir.string(), "ps0", 14) + ".tmp").c_str(), "wb"); std::fputs("torn", f); std::fclose(f); }
  BOOST_TEST((list_checkpoints(*store, "ps0") == std::vector<int64_t>{7}));
  BOOST_TEST(list_checkpoints(*store, "ps1").empty());
  meta.label = 21;
  BOOST_REQUIRE(write_checkpoint(*store, meta, ts).ok());
  BOOST_TEST(!fs::exists(checkpoint_path(dir.string(), "ps0", 14) + ".tmp"));
  BOOST_TEST((list_checkpoints(*store, "ps0") == std::vector<int64_t>{7, 21}));
  // Only the newest `keep` stay.
  for (int64_t l : {28, 35, 42}) {
    meta.label = l;
    BOOST_REQUIRE(write_checkpoint(*store, meta, ts, 3).ok());
  }
  BOOST_TEST((list_checkpoints(*store, "ps0") == std::vector<int64_t>{28, 35, 42}));
  auto ok = read_checkpoint(*store, "ps0", 42);
  BOOST_REQUIRE(ok);
  BOOST_TEST(ok->names[1] == params[1].name);
  BOOST_TEST(std::equal(ok->tensors[2].f32(), ok->tensors[2].f32() + ok->tensors[2].numel(), params[2].value.f32()));
  // A damaged file is an error naming it, not a crash.
  const auto path = checkpoint_path(dir.string(), "ps0", 35);
  fs::resize_file(path, fs::file_size(path) / 2);
  auto bad = read_checkpoint_file(path);
  BOOST_TEST(!bad);
  BOOST_TEST(bad.error().message().find(path) != std::string::npos);
  // One flipped bit in any tensor's bytes (the structure still decodes) is
  // found by the data checksum.
  const auto path42 = checkpoint_path(dir.string(), "ps0", 42);
  std::vector<char> bytes(fs::file_size(path42));
  { std::FILE* f = std::fopen(path42.c_str(), "rb"); BOOST_REQUIRE(std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size()); std::fclose(f); }
  const float* data = params[0].value.f32();
  auto at = std::search(bytes.begin(), bytes.end(), reinterpret_cast<const char*>(data),
                        reinterpret_cast<const char*>(data) + params[0].value.byte_size());
  BOOST_REQUIRE(at != bytes.end());
  *(at + 5) ^= 0x10;
  { std::FILE* f = std::fopen(path42.c_str(), "wb"); std::fwrite(bytes.data(), 1, bytes.size(), f); std::fclose(f); }
  auto flipped = read_checkpoint_file(path42);
  BOOST_REQUIRE(!flipped);
  BOOST_TEST(flipped.error().message().find(path42 + ": corrupt") != std::string::npos);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(resume_picks_the_newest_label_every_shard_has) {
  BOOST_TEST(newest_common_label({{7, 14, 21}, {7, 14}}) == 14);
  BOOST_TEST(newest_common_label({{7, 14, 21}, {14, 21, 28}, {21, 28}}) == 21);
  BOOST_TEST(newest_common_label({{7}, {14}}) == -1);
  BOOST_TEST(newest_common_label({{}, {14}}) == -1);
  BOOST_TEST(newest_common_label({}) == -1);
}

// --- sparse pieces (embedding table rows) ------------------------------------

BOOST_AUTO_TEST_CASE(row_lists_round_trip_and_are_checked) {
  std::vector<row_request> req(3);
  req[0].rows = {0, 2, 5};
  req[1].all = true;
  const auto list = encode_rows(req);
  const std::vector<int64_t> piece_rows{6, 4, 3};
  auto back = decode_rows(list, piece_rows, true, "test");
  BOOST_REQUIRE(back);
  BOOST_TEST((*back)[0].rows == req[0].rows);
  BOOST_TEST((*back)[1].all);
  BOOST_TEST((*back)[2].rows.empty());
  BOOST_TEST(!decode_rows(list, piece_rows, false, "test"));  // "all" only in pulls
  auto bad = [&](std::vector<int64_t> l) { return !decode_rows(l, piece_rows, true, "test"); };
  BOOST_TEST(bad({3, 0, 2, 6, -1, 0}));     // row 6 outside piece 0
  BOOST_TEST(bad({2, 2, 2, -1, 0}));        // repeated row
  BOOST_TEST(bad({2, 3, 1, -1, 0}));        // not ascending
  BOOST_TEST(bad({3, 0, 2, 5, -1}));        // a piece missing
  BOOST_TEST(bad({3, 0, 2, 5, -1, 0, 9}));  // trailing values
  BOOST_TEST(bad({7}));                     // count above the piece's rows
  BOOST_TEST(bad({-2, -1, 0}));
}

BOOST_AUTO_TEST_CASE(sparse_push_message_round_trip) {
  kernels::tensor dense = kernels::tensor::zeros({2, 2});
  kernels::tensor rows = kernels::tensor::zeros({3, 4});
  kernels::tensor none = kernels::tensor::empty({0, 4});
  rows.f32()[5] = 2.5f;
  std::vector<row_request> r(2);
  r[0].rows = {1, 4, 9};
  const auto list = encode_rows(r);
  ps_info info;
  info.flags = flag_rows;
  info.clock = 7;
  const kernels::tensor* ts[] = {&dense, &rows, &none};
  auto buf = make_tensors(kind_push, "psworker0", "ps0", info, ts, list);
  auto m = read_ps_message(buf, schemas::read_limits{}, "test");
  BOOST_REQUIRE(m);
  BOOST_TEST(m->tensors == 3u);
  BOOST_TEST(m->list == list);
  auto t1 = tensor_of(*m, 1);
  BOOST_REQUIRE(t1);
  BOOST_TEST(t1->f32()[5] == 2.5f);
  BOOST_TEST(!tensor_of(*m, 3));  // the list is not an f32 tensor
  // A pull with a list, and one that claims a list but has none.
  auto pull = make_control(kind_pull, "psworker0", "ps0", info, list);
  auto pm = read_ps_message(pull, schemas::read_limits{}, "test");
  BOOST_REQUIRE(pm);
  BOOST_TEST(pm->list == list);
  BOOST_TEST(!read_ps_message(make_control(kind_pull, "psworker0", "ps0", info), schemas::read_limits{}, "test"));
}

namespace {

// A shard holding one dense tensor and two table pieces; the same tensors as
// a "single device" parameter list whose tables are whole.
struct sparse_setup {
  std::vector<kernels::parameter> shard_params, local;
};

sparse_setup make_sparse_setup() {
  std::mt19937_64 r(11);
  std::normal_distribution<float> n;
  sparse_setup s;
  auto add = [&](const std::string& name, kernels::shape sh, bool sparse) {
    kernels::parameter p;
    p.name = name;
    p.sparse = sparse;
    p.value = kernels::tensor::empty(sh);
    for (auto& x : p.value.f32_span()) x = n(r);
    kernels::parameter q;
    q.name = name;
    q.sparse = sparse;
    q.value = kernels::tensor::empty(sh);
    std::copy(p.value.f32(), p.value.f32() + p.value.numel(), q.value.f32());
    s.shard_params.push_back(std::move(p));
    s.local.push_back(std::move(q));
  };
  add("w", {3, 2}, false);
  add("emb0", {20, 4}, true);
  add("emb1", {9, 4}, true);
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sparse_pushes_equal_the_local_lazy_optimizer) {
  for (auto kind : {kernels::optimizer_kind::sgd, kernels::optimizer_kind::adam}) {
    auto s = make_sparse_setup();
    auto c = cfg(consistency_model::bsp(), 1, kind);
    auto core = shard_core::make(c, std::move(s.shard_params));
    BOOST_REQUIRE(core);
    BOOST_TEST((*core)->dense_count() == 1u);
    BOOST_TEST((*core)->sparse_count() == 2u);
    auto opt = kernels::make_optimizer(c.optimizer);
    BOOST_REQUIRE(opt);
    std::vector<kernels::parameter*> ptrs;
    for (auto& p : s.local) ptrs.push_back(&p);
    std::mt19937_64 r(5);
    std::normal_distribution<float> n;
    std::vector<pull_ticket> ready;
    for (int64_t t = 0; t < 12; ++t) {
      std::vector<kernels::tensor> dense;
      dense.push_back(kernels::tensor::empty({3, 2}));
      for (auto& x : dense[0].f32_span()) x = n(r);
      std::vector<kernels::sparse_rows> sp(2);
      for (std::size_t j = 0; j < 2; ++j) {
        const int64_t rows = j == 0 ? 20 : 9;
        for (int64_t row = 0; row < rows; ++row)
          if ((r() % 3) == 0) sp[j].rows.push_back(row);  // ascending, some steps none
        sp[j].values = kernels::tensor::empty({int64_t(sp[j].rows.size()), 4});
        for (auto& x : sp[j].values.f32_span()) x = n(r);
      }
      // The local list: the same gradients.
      s.local[0].grad = kernels::tensor::empty({3, 2});
      std::copy(dense[0].f32(), dense[0].f32() + 6, s.local[0].grad.f32());
      for (std::size_t j = 0; j < 2; ++j) {
        s.local[1 + j].sparse_grad.rows = sp[j].rows;
        s.local[1 + j].sparse_grad.values = kernels::tensor::empty(sp[j].values.shape());
        if (sp[j].values.numel() > 0)
          std::copy(sp[j].values.f32(), sp[j].values.f32() + sp[j].values.numel(),
                    s.local[1 + j].sparse_grad.values.f32());
      }
      BOOST_REQUIRE((*opt)->step(ptrs, 0.1).ok());
      BOOST_REQUIRE((*core)->push(0, t, 0.1, std::move(dense), std::move(sp), ready).ok());
    }
    for (std::size_t i = 0; i < 3; ++i) {
      const auto& a = (*core)->params()[i].value;
      const auto& b = s.local[i].value;
      BOOST_TEST(std::equal(a.f32(), a.f32() + a.numel(), b.f32()));  // bit for bit
    }
  }
}

BOOST_AUTO_TEST_CASE(sparse_push_checks_rows) {
  auto s = make_sparse_setup();
  auto core = shard_core::make(cfg(consistency_model::asp(), 1), std::move(s.shard_params));
  BOOST_REQUIRE(core);
  std::vector<pull_ticket> ready;
  auto attempt = [&](std::vector<int64_t> rows0, int64_t value_rows) {
    std::vector<kernels::tensor> dense;
    dense.push_back(kernels::tensor::zeros({3, 2}));
    std::vector<kernels::sparse_rows> sp(2);
    sp[0].rows = std::move(rows0);
    sp[0].values = kernels::tensor::zeros({value_rows, 4});
    sp[1].values = kernels::tensor::empty({0, 4});
    return (*core)->push(0, 0, 0.1, std::move(dense), std::move(sp), ready);
  };
  BOOST_TEST(!attempt({3, 20}, 2).ok());  // row 20 of a 20-row piece
  BOOST_TEST(!attempt({4, 4}, 2).ok());   // repeated
  BOOST_TEST(!attempt({5, 2}, 2).ok());   // descending
  BOOST_TEST(!attempt({1, 2}, 3).ok());   // values for 3 rows
  std::vector<kernels::tensor> dense;
  dense.push_back(kernels::tensor::zeros({3, 2}));
  BOOST_TEST(!(*core)->push(0, 0, 0.1, std::move(dense), ready).ok());  // no sparse part
  BOOST_TEST(attempt({1, 2}, 2).ok());
}
