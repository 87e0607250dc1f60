// apps/plot_command: run report -> plot_data -> SVG (structure, data, escaping,
// errors); and the history it draws from (kernels::train_history, and
// train_single filling train_report::history).
#define BOOST_TEST_MODULE apps_plot
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "apps/plot_command.hpp"
#include "kernels/trainer.hpp"

using namespace hetflow;
using namespace hetflow::apps;

namespace {

// A report as `hetflow run --report` writes it for a train job (metrics
// lifted to the top level), trimmed, with a history; 3 epochs, epoch 2 not
// evaluated (eval_each_epoch = false style nulls), click-data AUC on 1 and 3.
const char* report_with_history = R"({
  "cluster": "it-plot", "topology": "/tmp/x.toml", "wall_s": 3.5, "launcher_exit_code": 0,
  "job": "train", "status": "ok", "exit_code": 0, "message": "job finished", "run_s": 3.2,
  "model": "lenet5", "device": "cpu", "threads": 2, "parameters": 44426, "total_seconds": 3.1,
  "weights_checksum": "2449252d63fa3ada",
  "epochs": [
    {"epoch": 1, "loss": 1.2, "train_accuracy": 0.55, "test_accuracy": 0.71, "test_logloss": 0.6,
     "test_auc": 0.74, "samples_per_s": 1000, "train_seconds": 1.0, "lr": 0.05, "samples": 1000},
    {"epoch": 2, "loss": 0.8, "train_accuracy": 0.70, "test_accuracy": null, "test_logloss": null,
     "test_auc": null, "samples_per_s": 1100, "train_seconds": 0.9, "lr": 0.05, "samples": 1000},
    {"epoch": 3, "loss": 0.6, "train_accuracy": 0.78, "test_accuracy": 0.80, "test_logloss": 0.5,
     "test_auc": 0.81, "samples_per_s": 1200, "train_seconds": 0.8, "lr": 0.05, "samples": 1000}
  ],
  "history": [[0.5, 1, 5, 1.5, 900], [1.0, 1, 10, 0.9, 1100], [1.6, 2, 5, 0.85, 1050], [2.0, 2, 10, 0.75, 1150],
              [2.5, 3, 5, 0.65, 1180], [2.9, 3, 10, 0.55, 1220]],
  "actors": [], "nodes": []
})";

// Per-epoch points only (a report from before the history existed).
const char* report_without_history = R"({
  "cluster": "c", "job": "train", "status": "ok", "exit_code": 0, "message": "job finished",
  "model": "mlp", "device": "cpu", "parameters": 100,
  "epochs": [
    {"epoch": 1, "loss": 2.0, "train_accuracy": 0.3, "test_accuracy": 0.4, "test_logloss": null,
     "test_auc": null, "samples_per_s": 500, "train_seconds": 2.0, "lr": 0.1, "samples": 1000},
    {"epoch": 2, "loss": 1.0, "train_accuracy": 0.5, "test_accuracy": 0.6, "test_logloss": null,
     "test_auc": null, "samples_per_s": 600, "train_seconds": 2.0, "lr": 0.1, "samples": 1000}
  ]
})";

// Every tag of `svg` in order; checks well-formedness as far as a plot needs:
// balanced start/end tags, quoted attributes, '&' only as an entity.
struct xml_check {
  bool ok = true;
  std::string why;
  std::map<std::string, int> elements;  // start tags by name
};

xml_check check_xml(const std::string& svg) {
  xml_check r;
  std::vector<std::string> open;
  std::size_t i = 0;
  auto fail = [&](const std::string& w) {
    r.ok = false;
    r.why = w + " at byte " + std::to_string(i);
    return r;
  };
  while (i < svg.size()) {
    if (svg[i] == '&') {
      static const std::regex entity("^&(amp|lt|gt|quot|apos);");
      if (!std::regex_search(svg.begin() + std::ptrdiff_t(i), svg.end(), entity)) return fail("bare &");
      ++i;
      continue;
    }
    if (svg[i] == '>') return fail("bare >");
    if (svg[i] != '<') {
      ++i;
      continue;
    }
    std::size_t end = svg.find('>', i);
    if (end == std::string::npos) return fail("unterminated tag");
    std::string tag = svg.substr(i + 1, end - i - 1);
    if (tag.find('<') != std::string::npos) return fail("< inside a tag");
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return fail("unbalanced quotes in <" + tag + ">");
    i = end + 1;
    if (tag.starts_with("?")) continue;
    if (tag.starts_with("/")) {
      std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return fail("</" + name + "> closes " + (open.empty() ? "nothing" : open.back()));
      open.pop_back();
      continue;
    }
    std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    ++r.elements[name];
    if (!tag.ends_with("/")) open.push_back(name);
  }
  if (!open.empty()) return fail("<" + open.back() + "> never closed");
  return r;
}

// The points of the polyline with data-series="id" ((x, y) pairs), or
// nullopt-like empty with found = false.
struct polyline {
  bool found = false;
  std::vector<std::pair<double, double>> pts;
};
polyline series_points(const std::string& svg, const std::string& id) {
  polyline p;
  std::size_t at = svg.find("<polyline class=\"series\" data-series=\"" + id + "\"");
  if (at == std::string::npos) return p;
  p.found = true;
  BOOST_REQUIRE_EQUAL(svg.find("<polyline class=\"series\" data-series=\"" + id + "\"", at + 1), std::string::npos);
  std::size_t b = svg.find("points=\"", at) + 8, e = svg.find('"', b);
  std::string s = svg.substr(b, e - b);
  static const std::regex pair_re("(-?[0-9.]+),(-?[0-9.]+)");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), pair_re); it != std::sregex_iterator(); ++it)
    p.pts.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  return p;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

plot_data parse_ok(const char* text) {
  auto p = plot_data_from_report(text, "fixture.json");
  BOOST_REQUIRE_MESSAGE(p.has_value(), p.error().to_string());
  return *p;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(plot_command)

BOOST_AUTO_TEST_CASE(parses_a_train_report_with_history) {
  plot_data d = parse_ok(report_with_history);
  BOOST_TEST(d.cluster == "it-plot");
  BOOST_TEST(d.model == "lenet5");
  BOOST_TEST(d.device == "cpu");
  BOOST_TEST(d.parameters == 44426);
  BOOST_REQUIRE_EQUAL(d.epochs.size(), 3u);
  BOOST_REQUIRE_EQUAL(d.history.size(), 6u);
  BOOST_TEST(d.epochs[1].test_accuracy == -1.0);  // null: not evaluated
  BOOST_TEST(d.epochs[2].test_auc == 0.81);
  // Epochs end at their last history point, not at the summed train_seconds.
  BOOST_TEST(d.epochs[0].seconds == 1.0);
  BOOST_TEST(d.epochs[1].seconds == 2.0);
  BOOST_TEST(d.epochs[2].seconds == 2.9);
  BOOST_TEST(d.history[3].step == 10);
  BOOST_TEST(d.history[3].loss == 0.75);
}

BOOST_AUTO_TEST_CASE(svg_has_three_panels_and_every_point) {
  plot_data d = parse_ok(report_with_history);
  std::string svg = render_training_svg(d);
  xml_check x = check_xml(svg);
  BOOST_REQUIRE_MESSAGE(x.ok, x.why);
  BOOST_TEST(svg.starts_with("<?xml"));
  BOOST_TEST(x.elements["svg"] == 1);
  BOOST_TEST(count(svg, "<g class=\"panel\"") == 3u);
  for (const char* id : {"panel-loss", "panel-accuracy", "panel-throughput"})
    BOOST_TEST(count(svg, std::string("id=\"") + id + "\"") == 1u, id);
  // One polyline point per data point.
  BOOST_TEST(series_points(svg, "loss-history").pts.size() == 6u);
  BOOST_TEST(series_points(svg, "loss-epoch").pts.size() == 3u);
  BOOST_TEST(series_points(svg, "train-accuracy").pts.size() == 3u);
  BOOST_TEST(series_points(svg, "test-accuracy").pts.size() == 2u);  // epoch 2 has null
  BOOST_TEST(series_points(svg, "test-auc").pts.size() == 2u);
  BOOST_TEST(series_points(svg, "throughput-history").pts.size() == 6u);
  BOOST_TEST(series_points(svg, "throughput-epoch").pts.size() == 3u);
  BOOST_TEST(count(svg, "<circle class=\"marker\" data-series=\"test-accuracy\"") == 2u);
  // Titles, axis labels, legend, header.
  for (const char* text : {"(a) training loss", "(b) accuracy per epoch", "(c) throughput",
                           "seconds since training started", ">samples/s<", ">accuracy<", ">loss<",
                           ">test accuracy<", ">train accuracy<", ">test AUC<", "cluster it-plot",
                           "model lenet5 on cpu, 44,426 parameters, 3 epochs", "6 history points"})
    BOOST_TEST(svg.find(text) != std::string::npos, text);
  BOOST_TEST(count(svg, "<g class=\"legend\">") == 3u);
  // Every point inside the drawing, and in time order along x.
  for (const char* id : {"loss-history", "loss-epoch", "train-accuracy", "test-accuracy", "throughput-history"}) {
    auto p = series_points(svg, id);
    for (std::size_t i = 0; i < p.pts.size(); ++i) {
      BOOST_TEST(p.pts[i].first >= 80.0);
      BOOST_TEST(p.pts[i].first <= 740.0);
      BOOST_TEST(p.pts[i].second >= 0.0);
      BOOST_TEST(p.pts[i].second <= 1000.0);
      if (i > 0) BOOST_TEST(p.pts[i].first > p.pts[i - 1].first, id);
    }
  }
  // The loss panel is above the accuracy panel, above the throughput panel;
  // a lower loss is drawn higher (smaller y).
  auto loss = series_points(svg, "loss-history").pts;
  auto acc = series_points(svg, "train-accuracy").pts;
  auto sps = series_points(svg, "throughput-history").pts;
  BOOST_TEST(loss.back().second > loss.front().second);
  BOOST_TEST(acc.front().second > acc.back().second);  // accuracy rises: y shrinks
  double loss_max_y = 0, acc_min_y = 1e9, acc_max_y = 0, sps_min_y = 1e9;
  for (auto& p : loss) loss_max_y = std::max(loss_max_y, p.second);
  for (auto& p : acc) acc_min_y = std::min(acc_min_y, p.second), acc_max_y = std::max(acc_max_y, p.second);
  for (auto& p : sps) sps_min_y = std::min(sps_min_y, p.second);
  BOOST_TEST(loss_max_y < acc_min_y);
  BOOST_TEST(acc_max_y < sps_min_y);
  // Tick labels are numbers; the x axis starts at 0.
  BOOST_TEST(svg.find("<text class=\"tick x\"") != std::string::npos);
  BOOST_TEST(std::regex_search(svg, std::regex("<text class=\"tick x\"[^>]*>0</text>")));
  BOOST_TEST(std::regex_search(svg, std::regex("<text class=\"tick y\"[^>]*>[0-9]+(\\.[0-9]+)?</text>")));
  // Deterministic.
  BOOST_TEST(render_training_svg(d) == svg);
}

BOOST_AUTO_TEST_CASE(without_history_uses_epoch_points) {
  plot_data d = parse_ok(report_without_history);
  BOOST_TEST(d.history.empty());
  BOOST_REQUIRE_EQUAL(d.epochs.size(), 2u);
  BOOST_TEST(d.epochs[0].seconds == 2.0);  // summed train_seconds
  BOOST_TEST(d.epochs[1].seconds == 4.0);
  std::string svg = render_training_svg(d);
  xml_check x = check_xml(svg);
  BOOST_REQUIRE_MESSAGE(x.ok, x.why);
  BOOST_TEST(!series_points(svg, "loss-history").found);
  BOOST_TEST(!series_points(svg, "throughput-history").found);
  BOOST_TEST(!series_points(svg, "test-auc").found);
  BOOST_TEST(svg.find(">test AUC<") == std::string::npos);  // no legend entry without data
  auto loss = series_points(svg, "loss-epoch").pts;
  BOOST_REQUIRE_EQUAL(loss.size(), 2u);
  BOOST_TEST(loss[1].first == 740.0);  // the last epoch ends at the x axis' end (4 s)
  BOOST_TEST(std::abs(loss[0].first - 410.0) < 0.01);  // 2 s of 4
  BOOST_TEST(svg.find("per-epoch values only") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(escapes_names) {
  plot_data d = parse_ok(report_without_history);
  d.cluster = "a<b & \"c\">";
  d.model = "m&<script>";
  std::string svg = render_training_svg(d);
  xml_check x = check_xml(svg);
  BOOST_REQUIRE_MESSAGE(x.ok, x.why);
  BOOST_TEST(svg.find("a&lt;b &amp; &quot;c&quot;&gt;") != std::string::npos);
  BOOST_TEST(svg.find("m&amp;&lt;script&gt;") != std::string::npos);
  BOOST_TEST(svg.find("<script>") == std::string::npos);
  BOOST_TEST(x.elements.count("b") == 0u);
}

BOOST_AUTO_TEST_CASE(a_single_epoch_and_flat_values_still_plot) {
  plot_data d;
  d.cluster = "one";
  d.epochs.push_back(plot_epoch{1, 0.0, 0.5, 0.5, 0.5, -1, 0.0, 0.0});  // zero time, flat values
  std::string svg = render_training_svg(d);
  xml_check x = check_xml(svg);
  BOOST_REQUIRE_MESSAGE(x.ok, x.why);
  BOOST_TEST(svg.find("nan") == std::string::npos);
  BOOST_TEST(svg.find("inf") == std::string::npos);
  BOOST_TEST(series_points(svg, "loss-epoch").pts.size() == 1u);
}

BOOST_AUTO_TEST_CASE(refuses_what_it_cannot_plot) {
  auto err = [](const std::string& text) {
    auto p = plot_data_from_report(text, "r.json");
    BOOST_REQUIRE(!p.has_value());
    return p.error();
  };
  status e = err("{\"job\": \"train\", ");
  BOOST_TEST((e.code() == errc::parse_error));
  BOOST_TEST(e.message().find("r.json: not valid JSON") == 0u, e.message());
  e = err("[1, 2]");
  BOOST_TEST((e.code() == errc::parse_error));
  BOOST_TEST(e.message().find("not a hetflow run report") != std::string::npos);
  e = err(R"({"job": "preprocess", "status": "ok", "records": 10})");
  BOOST_TEST((e.code() == errc::unsupported));
  BOOST_TEST(e.message().find("a 'preprocess' job; only train jobs") != std::string::npos, e.message());
  e = err(R"({"job": "train", "status": "failed", "exit_code": 1, "message": "loss became nan"})");
  BOOST_TEST((e.code() == errc::unsupported));
  BOOST_TEST(e.message().find("the train job failed (loss became nan)") != std::string::npos, e.message());
  e = err(R"({"job": "train", "status": "ok"})");
  BOOST_TEST((e.code() == errc::unsupported));
  BOOST_TEST(e.message().find("no \"epochs\"") != std::string::npos);
  e = err(R"({"job": "train", "status": "ok", "epochs": [{"epoch": 1, "loss": "x"}]})");
  BOOST_TEST((e.code() == errc::parse_error));
  BOOST_TEST(e.message().find("epochs[0].loss") != std::string::npos, e.message());
  e = err(R"({"job": "train", "status": "ok", "epochs": [{"epoch": 1, "loss": 1, "train_seconds": 1}],
              "history": [[0.1, 1, 1, 1.0, 5], [0.2, 1, 2, 1.0]]})");
  BOOST_TEST((e.code() == errc::parse_error));
  BOOST_TEST(e.message().find("history[1]") != std::string::npos, e.message());
  e = err(R"({"job": "train", "status": "ok", "epochs": [{"epoch": 1, "loss": 1, "train_seconds": 1}],
              "history": [[0.5, 1, 1, 1.0, 5], [0.2, 1, 2, 1.0, 5]]})");
  BOOST_TEST(e.message().find("never decrease") != std::string::npos, e.message());
  // Metrics not lifted to the top level: found in the trainer's actor result.
  auto p = plot_data_from_report(R"({"job": "train", "status": "ok", "actors": [{"name": "trainer",
      "metrics": {"model": "mlp", "epochs": [{"epoch": 1, "loss": 1, "train_seconds": 1}]}}]})", "r.json");
  BOOST_REQUIRE_MESSAGE(p.has_value(), p.error().to_string());
  BOOST_TEST(p->model == "mlp");
  // No name: no prefix (the launcher's one-line message).
  auto q = plot_data_from_report(R"({"job": "skeleton", "status": "ok"})", "");
  BOOST_TEST(q.error().message().find("a 'skeleton' job") == 0u, q.error().message());
}

BOOST_AUTO_TEST_CASE(plot_paths) {
  BOOST_TEST(check_plot_path("/tmp/x.svg").empty());
  BOOST_TEST(check_plot_path("/tmp/x.PNG").find("SVG only") != std::string::npos);
  BOOST_TEST(check_plot_path("/no/such/dir/x.svg").find("does not exist") != std::string::npos);
  BOOST_TEST(check_plot_path("/tmp").find("is a directory") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(train_history)

BOOST_AUTO_TEST_CASE(bounded_and_exact_means) {
  kernels::train_history h(8);
  const int ticks = 1000;
  double loss_total = 0;
  for (int i = 0; i < ticks; ++i) {
    // Tick i: 2 steps of loss i each (sum 2i), 20 rows in 0.01 s.
    h.tick(0.01 * (i + 1), 1 + i / 100, (i % 100 + 1) * 2, 2.0 * i, 2, 20, 0.01);
    loss_total += 2.0 * i;
    BOOST_REQUIRE_LT(h.points().size(), 8u);
  }
  h.finish();
  const auto& p = h.points();
  BOOST_REQUIRE(!p.empty());
  BOOST_TEST(p.size() >= 4u);
  BOOST_TEST(p.size() < 8u);
  // The stride is a power of two and each kept point covers it (the last may cover fewer).
  BOOST_TEST((h.stride() & (h.stride() - 1)) == 0);
  BOOST_TEST(h.stride() >= ticks / 8);
  int64_t steps = 0, samples = 0;
  double weighted = 0, prev_t = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    steps += p[i].window_steps;
    samples += p[i].window_samples;
    weighted += p[i].loss * double(p[i].window_steps);
    BOOST_TEST(p[i].seconds > prev_t);
    prev_t = p[i].seconds;
    BOOST_TEST(std::abs(p[i].samples_per_s - 2000.0) < 1e-6);  // 20 rows / 0.01 s everywhere
    if (i + 1 < p.size()) BOOST_TEST(p[i].window_steps == 2 * h.stride());
  }
  BOOST_TEST(steps == 2 * ticks);
  BOOST_TEST(samples == 20 * ticks);
  BOOST_TEST(std::abs(weighted - loss_total) < 1e-6 * loss_total);
  // The history ends at the last tick.
  BOOST_TEST(std::abs(p.back().seconds - 0.01 * ticks) < 1e-9);
  BOOST_TEST(p.back().epoch == 10);
  BOOST_TEST(p.back().step == 200);

  // Deterministic: the same ticks give the same points.
  kernels::train_history g(8);
  for (int i = 0; i < ticks; ++i) g.tick(0.01 * (i + 1), 1 + i / 100, (i % 100 + 1) * 2, 2.0 * i, 2, 20, 0.01);
  g.finish();
  BOOST_REQUIRE_EQUAL(g.points().size(), p.size());
  for (std::size_t i = 0; i < p.size(); ++i) BOOST_TEST(g.points()[i].step == p[i].step);
}

BOOST_AUTO_TEST_CASE(short_runs_keep_every_tick) {
  kernels::train_history h;  // 2048
  for (int i = 0; i < 100; ++i) h.tick(i + 1.0, 1, i + 1, 1.0, 1, 4, 0.5);
  h.finish();
  BOOST_TEST(h.points().size() == 100u);
  BOOST_TEST(h.stride() == 1);
  BOOST_TEST(h.points()[7].loss == 1.0);
  BOOST_TEST(h.points()[7].samples_per_s == 8.0);
}

BOOST_AUTO_TEST_CASE(train_single_records_history) {
  kernels::train_config c;
  c.model = "mlp";
  c.width = 0.25;
  c.data.kind = kernels::dataset_kind::synthetic;
  c.data.sample = kernels::shape{1, 8, 8};
  c.data.train_size = 640;
  c.data.test_size = 64;
  c.data.classes = 4;
  c.epochs = 2;
  c.batch_size = 32;  // 20 steps per epoch
  c.threads = 1;
  c.progress_every = 6;  // ticks at steps 6, 12, 18 and 20 of each epoch
  auto r = kernels::train_single(c);  // no progress callback: history anyway
  BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
  const auto& h = r->history;
  BOOST_REQUIRE_EQUAL(h.size(), 8u);
  const int64_t want_steps[] = {6, 12, 18, 20, 6, 12, 18, 20};
  int64_t steps = 0;
  for (std::size_t i = 0; i < h.size(); ++i) {
    BOOST_TEST(h[i].step == want_steps[i]);
    BOOST_TEST(h[i].epoch == (i < 4 ? 1 : 2));
    BOOST_TEST(h[i].loss > 0.0);
    BOOST_TEST(h[i].samples_per_s > 0.0);
    if (i > 0) BOOST_TEST(h[i].seconds >= h[i - 1].seconds);
    steps += h[i].window_steps;
  }
  BOOST_TEST(steps == 40);
  // The epoch's mean loss is the step-weighted mean of its points.
  double sum = 0;
  for (std::size_t i = 0; i < 4; ++i) sum += h[i].loss * double(h[i].window_steps);
  BOOST_TEST(std::abs(sum / 20.0 - r->epochs[0].loss) < 1e-9);
}

BOOST_AUTO_TEST_SUITE_END()
