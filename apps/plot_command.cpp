#include "apps/plot_command.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace hetflow::apps {
namespace {

using json = nlohmann::json;

// --- report -> plot_data --------------------------------------------------------

// A number member, or `fallback` when absent or null; false for any other type.
bool number_or(const json& o, const char* key, double fallback, double& out) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) {
    out = fallback;
    return true;
  }
  if (!it->is_number()) return false;
  out = it->get<double>();
  return std::isfinite(out);
}

std::string string_member(const json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The object holding the trainer's metrics: the report itself (the train job
// lifts them to the top level), else the first actor result whose metrics
// have epochs (a report whose head did not lift them).
const json* metrics_of(const json& d) {
  if (d.contains("epochs")) return &d;
  auto actors = d.find("actors");
  if (actors == d.end() || !actors->is_array()) return nullptr;
  for (const auto& a : *actors) {
    if (!a.is_object()) continue;
    auto m = a.find("metrics");
    if (m != a.end() && m->is_object() && m->contains("epochs")) return &*m;
  }
  return nullptr;
}

// "NAME: " before every message ("" for an unnamed report).
std::string prefix(const std::string& name) { return name.empty() ? std::string() : name + ": "; }

status bad(const std::string& name, const std::string& what) {
  return make_error(errc::parse_error, prefix(name) + what);
}

// --- SVG helpers ----------------------------------------------------------------

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') out += ' ';
        else out += c;
    }
  }
  return out;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string coord(double v) { return fmt("%.2f", v); }

// An axis range with "nice" ticks (1, 2, 5 times a power of ten).
struct axis {
  double lo = 0, hi = 1, step = 0.2;
  int decimals = 1;
  double map(double v, double p0, double p1) const { return p0 + (v - lo) / (hi - lo) * (p1 - p0); }
  std::vector<double> ticks() const {
    std::vector<double> t;
    for (int i = 0;; ++i) {
      double v = lo + step * i;
      if (v > hi + step * 1e-6) break;
      t.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    }
    return t;
  }
  std::string label(double v) const { return fmt(("%." + std::to_string(decimals) + "f").c_str(), v); }
};

double nice_number(double x, bool round) {
  const double e = std::floor(std::log10(x));
  const double f = x / std::pow(10.0, e);
  double n;
  if (round) n = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  else n = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  return n * std::pow(10.0, e);
}

axis make_axis(double lo, double hi, double clamp_lo = -HUGE_VAL, double clamp_hi = HUGE_VAL) {
  if (!(hi > lo)) {
    const double pad = std::abs(lo) > 0 ? std::abs(lo) * 0.1 : 1.0;
    lo -= pad;
    hi += pad;
  }
  axis a;
  const double range = nice_number(hi - lo, false);
  a.step = nice_number(range / 4, true);
  a.lo = std::max(clamp_lo, std::floor(lo / a.step) * a.step);
  a.hi = std::min(clamp_hi, std::ceil(hi / a.step) * a.step);
  if (!(a.hi > a.lo)) a.hi = a.lo + a.step;
  a.decimals = a.step >= 1 ? 0 : int(std::ceil(-std::log10(a.step) - 1e-9));
  return a;
}

// Layout (user units; the SVG scales).
constexpr double width = 980, plot_x0 = 80, plot_x1 = 740, legend_x = 760;
constexpr double header_h = 86, panel_h = 210, panel_gap = 70;
constexpr double height = header_h + 3 * panel_h + 2 * panel_gap + 64;

struct series {
  std::string id;                 // data-series attribute (tests count its points)
  std::string label;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (seconds, value)
  bool markers = false;
  bool dashed = false;
};

void draw_panel(std::ostringstream& o, int index, const std::string& id, const std::string& title,
                const std::string& y_label, const axis& x, const axis& y, const std::vector<series>& all,
                const std::vector<double>& epoch_ends) {
  const double y0 = header_h + index * (panel_h + panel_gap);
  const double y1 = y0 + panel_h;
  auto px = [&](double v) { return x.map(v, plot_x0, plot_x1); };
  auto py = [&](double v) { return y.map(v, y1, y0); };
  o << "<g class=\"panel\" id=\"panel-" << id << "\">\n";
  o << "<text class=\"panel-title\" x=\"" << coord(plot_x0) << "\" y=\"" << coord(y0 - 10) << "\">"
    << xml_escape(title) << "</text>\n";
  o << "<rect class=\"frame\" x=\"" << coord(plot_x0) << "\" y=\"" << coord(y0) << "\" width=\""
    << coord(plot_x1 - plot_x0) << "\" height=\"" << coord(panel_h) << "\"/>\n";
  // Grid and tick labels.
  for (double v : y.ticks()) {
    o << "<line class=\"grid\" x1=\"" << coord(plot_x0) << "\" y1=\"" << coord(py(v)) << "\" x2=\"" << coord(plot_x1)
      << "\" y2=\"" << coord(py(v)) << "\"/>";
    o << "<text class=\"tick y\" x=\"" << coord(plot_x0 - 6) << "\" y=\"" << coord(py(v) + 4) << "\">" << y.label(v)
      << "</text>\n";
  }
  for (double v : x.ticks()) {
    o << "<line class=\"grid\" x1=\"" << coord(px(v)) << "\" y1=\"" << coord(y0) << "\" x2=\"" << coord(px(v))
      << "\" y2=\"" << coord(y1) << "\"/>";
    o << "<text class=\"tick x\" x=\"" << coord(px(v)) << "\" y=\"" << coord(y1 + 16) << "\">" << x.label(v)
      << "</text>\n";
  }
  // Epoch boundaries (not the last: the plot ends there).
  if (epoch_ends.size() <= 40)
    for (std::size_t i = 0; i + 1 < epoch_ends.size(); ++i)
      o << "<line class=\"epoch-end\" x1=\"" << coord(px(epoch_ends[i])) << "\" y1=\"" << coord(y0) << "\" x2=\""
        << coord(px(epoch_ends[i])) << "\" y2=\"" << coord(y1) << "\"/>\n";
  o << "<text class=\"axis-label\" transform=\"translate(" << coord(plot_x0 - 56) << " " << coord((y0 + y1) / 2)
    << ") rotate(-90)\">" << xml_escape(y_label) << "</text>\n";
  o << "<text class=\"axis-label\" x=\"" << coord((plot_x0 + plot_x1) / 2) << "\" y=\"" << coord(y1 + 36)
    << "\">seconds since training started</text>\n";
  // Series, clipped to the frame.
  o << "<g clip-path=\"url(#clip-" << id << ")\">\n";
  for (const auto& s : all) {
    if (s.points.empty()) continue;
    o << "<polyline class=\"series\" data-series=\"" << s.id << "\" stroke=\"" << s.color << "\""
      << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << " points=\"";
    for (std::size_t i = 0; i < s.points.size(); ++i)
      o << (i ? " " : "") << coord(px(s.points[i].first)) << "," << coord(py(s.points[i].second));
    o << "\"/>\n";
    if (s.markers)
      for (const auto& [t, v] : s.points)
        o << "<circle class=\"marker\" data-series=\"" << s.id << "\" cx=\"" << coord(px(t)) << "\" cy=\""
          << coord(py(v)) << "\" r=\"3.5\" fill=\"" << s.color << "\"><title>" << xml_escape(s.label) << ": "
          << fmt("%.6g", v) << " at " << fmt("%.1f", t) << " s</title></circle>\n";
  }
  o << "</g>\n";
  // Legend, right of the frame.
  double ly = y0 + 14;
  o << "<g class=\"legend\">\n";
  for (const auto& s : all) {
    if (s.points.empty()) continue;
    o << "<line x1=\"" << coord(legend_x) << "\" y1=\"" << coord(ly - 4) << "\" x2=\"" << coord(legend_x + 22)
      << "\" y2=\"" << coord(ly - 4) << "\" stroke=\"" << s.color << "\" stroke-width=\"2\""
      << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>";
    o << "<text class=\"legend-label\" x=\"" << coord(legend_x + 28) << "\" y=\"" << coord(ly) << "\">"
      << xml_escape(s.label) << "</text>\n";
    ly += 18;
  }
  o << "</g>\n</g>\n";
}

std::string with_thousands(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return v < 0 ? "-" + out : out;
}

}  // namespace

expected<plot_data> plot_data_from_report(std::string_view text, const std::string& name) {
  json d;
  try {
    d = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // At the library boundary: nlohmann reports malformed JSON by exception.
    return bad(name, std::string("not valid JSON (") + e.what() +
                         "); want the file `hetflow run FILE --report PATH` writes");
  }
  if (!d.is_object() || !d.contains("job") || !d["job"].is_string())
    return bad(name, "not a hetflow run report (no \"job\" member); want the file `hetflow run FILE "
                     "--report PATH` writes");
  plot_data p;
  p.job = d["job"].get<std::string>();
  p.cluster = string_member(d, "cluster");
  if (p.job != "train")
    return make_error(errc::unsupported, prefix(name) + "a '" + p.job + "' job; only train jobs have loss, accuracy and "
                                                "throughput to plot");
  const std::string st = string_member(d, "status");
  if (st != "ok") {
    std::string why = string_member(d, "message");
    return make_error(errc::unsupported, prefix(name) + "the train job " + (st.empty() ? "has no status" : "failed") +
                                             (why.empty() ? "" : " (" + why + ")") + "; nothing to plot");
  }
  const json* m = metrics_of(d);
  if (m == nullptr)
    return make_error(errc::unsupported, prefix(name) + "the train job's report has no \"epochs\"; nothing to plot");
  p.model = string_member(*m, "model");
  p.device = string_member(*m, "device");
  double v = 0;
  if (number_or(*m, "parameters", 0, v)) p.parameters = int64_t(v);
  if (number_or(*m, "total_seconds", 0, v)) p.total_seconds = v;

  const json& epochs = (*m)["epochs"];
  if (!epochs.is_array()) return bad(name, "\"epochs\" is not an array");
  if (epochs.empty())
    return make_error(errc::unsupported, prefix(name) + "the train job's report has no epochs; nothing to plot");
  double cumulative = 0;
  for (std::size_t i = 0; i < epochs.size(); ++i) {
    const json& e = epochs[i];
    const std::string where = "epochs[" + std::to_string(i) + "]";
    if (!e.is_object()) return bad(name, where + " is not an object");
    plot_epoch pe;
    double num = 0;
    if (!number_or(e, "epoch", double(i + 1), num)) return bad(name, where + ".epoch is not a number");
    pe.epoch = int(num);
    if (!e.contains("loss") || !number_or(e, "loss", 0, pe.loss)) return bad(name, where + ".loss is not a number");
    struct {
      const char* key;
      double* out;
    } fields[] = {{"train_accuracy", &pe.train_accuracy}, {"test_accuracy", &pe.test_accuracy},
                  {"test_auc", &pe.test_auc}};
    for (auto& f : fields)
      if (!number_or(e, f.key, -1, *f.out)) return bad(name, where + "." + f.key + " is neither a number nor null");
    if (!number_or(e, "samples_per_s", 0, pe.samples_per_s))
      return bad(name, where + ".samples_per_s is not a number");
    if (!number_or(e, "train_seconds", 0, pe.train_seconds) || pe.train_seconds < 0)
      return bad(name, where + ".train_seconds is not a number >= 0");
    cumulative += pe.train_seconds;
    pe.seconds = cumulative;  // replaced from the history below when there is one
    p.epochs.push_back(pe);
  }

  if (auto h = m->find("history"); h != m->end() && !h->is_null()) {
    if (!h->is_array()) return bad(name, "\"history\" is not an array");
    for (std::size_t i = 0; i < h->size(); ++i) {
      const json& row = (*h)[i];
      const std::string where = "history[" + std::to_string(i) + "]";
      if (!row.is_array() || row.size() != 5)
        return bad(name, where + " is not [seconds, epoch, step, loss, samples_per_s]");
      double x[5];
      for (int k = 0; k < 5; ++k) {
        if (!row[std::size_t(k)].is_number()) return bad(name, where + "[" + std::to_string(k) + "] is not a number");
        x[k] = row[std::size_t(k)].get<double>();
        if (!std::isfinite(x[k])) return bad(name, where + " holds a number that is not finite");
      }
      if (x[0] < 0 || (!p.history.empty() && x[0] < p.history.back().seconds))
        return bad(name, where + ": seconds must be >= 0 and never decrease");
      p.history.push_back(plot_history_point{x[0], int(x[1]), int64_t(x[2]), x[3], x[4]});
    }
    if (!p.history.empty()) {
      // Epoch e ends at its last history point; an epoch without one (merged
      // into a later point) at its share of the history's time by train_seconds.
      const double scale = cumulative > 0 ? p.history.back().seconds / cumulative : 0;
      double prev = 0;
      for (auto& e : p.epochs) {
        double t = -1;
        for (const auto& hp : p.history)
          if (hp.epoch == e.epoch) t = std::max(t, hp.seconds);
        if (t < 0) t = e.seconds * scale;
        e.seconds = std::max(prev, t);
        prev = e.seconds;
      }
    }
  }
  return p;
}

std::string render_training_svg(const plot_data& d) {
  const bool fine = !d.history.empty();
  double t_max = 0;
  for (const auto& e : d.epochs) t_max = std::max(t_max, e.seconds);
  for (const auto& h : d.history) t_max = std::max(t_max, h.seconds);
  const axis x = make_axis(0, t_max > 0 ? t_max : 1, 0);
  std::vector<double> epoch_ends;
  for (const auto& e : d.epochs) epoch_ends.push_back(e.seconds);

  // (a) loss
  series loss_hist{"loss-history", "loss (history)", "#1f77b4", {}, false, false};
  series loss_epoch{"loss-epoch", "epoch mean loss", "#ff7f0e", {}, true, fine};
  for (const auto& h : d.history) loss_hist.points.emplace_back(h.seconds, h.loss);
  for (const auto& e : d.epochs) loss_epoch.points.emplace_back(e.seconds, e.loss);
  // (b) accuracy
  series train_acc{"train-accuracy", "train accuracy", "#1f77b4", {}, true, false};
  series test_acc{"test-accuracy", "test accuracy", "#ff7f0e", {}, true, false};
  series test_auc{"test-auc", "test AUC", "#2ca02c", {}, true, true};
  for (const auto& e : d.epochs) {
    if (e.train_accuracy >= 0) train_acc.points.emplace_back(e.seconds, e.train_accuracy);
    if (e.test_accuracy >= 0) test_acc.points.emplace_back(e.seconds, e.test_accuracy);
    if (e.test_auc >= 0) test_auc.points.emplace_back(e.seconds, e.test_auc);
  }
  // (c) throughput
  series sps_hist{"throughput-history", "samples/s (history)", "#1f77b4", {}, false, false};
  series sps_epoch{"throughput-epoch", "epoch mean samples/s", "#ff7f0e", {}, true, fine};
  for (const auto& h : d.history) sps_hist.points.emplace_back(h.seconds, h.samples_per_s);
  for (const auto& e : d.epochs) sps_epoch.points.emplace_back(e.seconds, e.samples_per_s);

  auto range_of = [](std::initializer_list<const series*> ss, double& lo, double& hi) {
    lo = HUGE_VAL;
    hi = -HUGE_VAL;
    for (const series* s : ss)
      for (const auto& pt : s->points) {
        lo = std::min(lo, pt.second);
        hi = std::max(hi, pt.second);
      }
    if (lo > hi) lo = hi = 0;
  };
  double lo, hi;
  range_of({&loss_hist, &loss_epoch}, lo, hi);
  const axis y_loss = make_axis(lo, hi, 0);
  range_of({&train_acc, &test_acc, &test_auc}, lo, hi);
  const axis y_acc = make_axis(lo, hi, 0, 1);
  range_of({&sps_hist, &sps_epoch}, lo, hi);
  const axis y_sps = make_axis(0, hi, 0);

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << coord(width) << "\" height=\"" << coord(height)
    << "\" viewBox=\"0 0 " << coord(width) << " " << coord(height) << "\" font-family=\"sans-serif\">\n";
  const std::string cluster = d.cluster.empty() ? std::string("(unnamed)") : d.cluster;
  o << "<title>hetflow " << xml_escape(d.job) << " job of cluster " << xml_escape(cluster) << ": loss, accuracy and "
    << "throughput</title>\n";
  o << "<style>\n"
       "  .frame { fill: none; stroke: #444; stroke-width: 1; }\n"
       "  .grid { stroke: #e4e4e4; stroke-width: 1; }\n"
       "  .epoch-end { stroke: #999; stroke-width: 1; stroke-dasharray: 2 3; }\n"
       "  .series { fill: none; stroke-width: 1.8; stroke-linejoin: round; }\n"
       "  .tick { font-size: 11px; fill: #333; }\n"
       "  .tick.y { text-anchor: end; }\n"
       "  .tick.x { text-anchor: middle; }\n"
       "  .axis-label { font-size: 12px; fill: #333; text-anchor: middle; }\n"
       "  .panel-title { font-size: 14px; font-weight: bold; fill: #222; }\n"
       "  .legend-label { font-size: 12px; fill: #222; }\n"
       "  .header { font-size: 18px; font-weight: bold; fill: #111; }\n"
       "  .subheader { font-size: 12px; fill: #444; }\n"
       "</style>\n";
  o << "<defs>\n";
  const char* ids[] = {"loss", "accuracy", "throughput"};
  for (int i = 0; i < 3; ++i)
    o << "<clipPath id=\"clip-" << ids[i] << "\"><rect x=\"" << coord(plot_x0 - 4) << "\" y=\""
      << coord(header_h + i * (panel_h + panel_gap) - 4) << "\" width=\"" << coord(plot_x1 - plot_x0 + 8)
      << "\" height=\"" << coord(panel_h + 8) << "\"/></clipPath>\n";
  o << "</defs>\n";
  o << "<rect x=\"0\" y=\"0\" width=\"" << coord(width) << "\" height=\"" << coord(height) << "\" fill=\"white\"/>\n";

  // Header: what ran, and what the lines are made of.
  std::string what = d.model.empty() ? std::string("model ?") : "model " + d.model;
  if (!d.device.empty()) what += " on " + d.device;
  if (d.parameters > 0) what += ", " + with_thousands(d.parameters) + " parameters";
  what += ", " + std::to_string(d.epochs.size()) + (d.epochs.size() == 1 ? " epoch" : " epochs");
  if (d.total_seconds > 0) what += fmt(", %.1f s", d.total_seconds);
  const plot_epoch& last = d.epochs.back();
  if (last.test_accuracy >= 0) what += fmt(", final test accuracy %.4f", last.test_accuracy);
  if (last.test_auc >= 0) what += fmt(", test AUC %.4f", last.test_auc);
  std::string source = fine ? "loss and samples/s: " + std::to_string(d.history.size()) +
                                  " history points (means since the previous point); markers: per-epoch values"
                            : "per-epoch values only (the report has no history)";
  o << "<g class=\"header\" id=\"header\">\n";
  o << "<text class=\"header\" x=\"" << coord(plot_x0) << "\" y=\"30\">hetflow " << xml_escape(d.job)
    << " job, cluster " << xml_escape(cluster) << "</text>\n";
  o << "<text class=\"subheader\" x=\"" << coord(plot_x0) << "\" y=\"50\">" << xml_escape(what) << "</text>\n";
  o << "<text class=\"subheader\" x=\"" << coord(plot_x0) << "\" y=\"66\">" << xml_escape(source) << "</text>\n";
  o << "</g>\n";

  draw_panel(o, 0, "loss", "(a) training loss", "loss", x, y_loss, {loss_hist, loss_epoch}, epoch_ends);
  draw_panel(o, 1, "accuracy", "(b) accuracy per epoch", "accuracy", x, y_acc, {train_acc, test_acc, test_auc},
             epoch_ends);
  draw_panel(o, 2, "throughput", "(c) throughput", "samples/s", x, y_sps, {sps_hist, sps_epoch}, epoch_ends);
  o << "</svg>\n";
  return o.str();
}

expected<plot_data> write_training_plot(std::string_view report_json, const std::string& name,
                                        const std::filesystem::path& out) {
  HF_ASSIGN_OR_RETURN(plot_data p, plot_data_from_report(report_json, name));
  const std::string svg = render_training_svg(p);
  auto tmp = out;
  tmp += ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << svg;
    if (!f) return make_error(errc::io_error, "cannot write " + tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return make_error(errc::io_error, "cannot write " + out.string() + ": " + ec.message());
  }
  return p;
}

std::string check_plot_path(const std::filesystem::path& out) {
  if (out.empty()) return "--plot needs a file name";
  std::string ext = out.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (ext == ".png")
    return "--plot writes SVG only (no image library in hetflow); name the file " +
           std::filesystem::path(out).replace_extension(".svg").string() +
           " (rsvg-convert or a browser turns it into a PNG)";
  std::error_code ec;
  const auto dir = out.has_parent_path() ? out.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(dir, ec)) return "the directory of " + out.string() + " does not exist";
  if (std::filesystem::is_directory(out, ec)) return out.string() + " is a directory; name a file";
  return {};
}

int plot_command(const std::vector<std::string>& args) {
  std::string report, out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--out") {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "hetflow plot: --out needs a value\nusage: hetflow plot REPORT.json --out PATH.svg\n");
        return 2;
      }
      out = args[++i];
    } else if (!args[i].empty() && args[i][0] == '-') {
      std::fprintf(stderr, "hetflow plot: unknown option '%s'\nusage: hetflow plot REPORT.json --out PATH.svg\n",
                   args[i].c_str());
      return 2;
    } else if (report.empty()) {
      report = args[i];
    } else {
      std::fprintf(stderr, "hetflow plot: unexpected argument '%s'\nusage: hetflow plot REPORT.json --out PATH.svg\n",
                   args[i].c_str());
      return 2;
    }
  }
  if (report.empty() || out.empty()) {
    std::fprintf(stderr, "hetflow plot: %s\nusage: hetflow plot REPORT.json --out PATH.svg\n",
                 report.empty() ? "missing REPORT (a `hetflow run --report` file)" : "missing --out PATH");
    return 2;
  }
  if (std::string why = check_plot_path(out); !why.empty()) {
    std::fprintf(stderr, "hetflow plot: %s\n", why.c_str());
    return 2;
  }
  std::ifstream in(report, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "hetflow plot: cannot read %s (%s)\n", report.c_str(),
                 std::filesystem::exists(report) ? "permission denied?" : "no such file");
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto p = write_training_plot(ss.str(), report, out);
  if (!p) {
    std::fprintf(stderr, "hetflow plot: %s\n", p.error().message().c_str());
    return 2;
  }
  std::printf("hetflow plot: wrote %s (%zu epochs, %s)\n", out.c_str(), p->epochs.size(),
              p->history.empty() ? "per-epoch points: the report has no history"
                                 : (std::to_string(p->history.size()) + " history points").c_str());
  return 0;
}

}  // namespace hetflow::apps
