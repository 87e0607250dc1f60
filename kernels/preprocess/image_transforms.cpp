#include "kernels/preprocess/image_transforms.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/random.hpp"

namespace hetflow::kernels::preprocess {

augment_draw draw_augmentation(const augment_options& opt, uint64_t seed, int epoch, int64_t sample) {
  augment_draw d;
  d.dy = d.dx = opt.crop_padding;
  if (!opt.enabled()) return d;
  // Counter-based: a fresh generator per (seed, epoch, sample), so the draw
  // never depends on what else was drawn before it.
  uint64_t key = splitmix64(splitmix64(seed ^ 0xa0c3e7a11ull) ^ uint64_t(uint32_t(epoch)));
  rng r(splitmix64(key ^ uint64_t(sample)));
  if (opt.crop_padding > 0) {
    const uint64_t span = uint64_t(2 * opt.crop_padding + 1);
    d.dy = int(r.below(span));
    d.dx = int(r.below(span));
  }
  if (opt.flip) d.flip = (r.next() >> 63) != 0;
  return d;
}

void crop_with_padding(const float* src, float* dst, const image_shape& s, int padding, int dy, int dx) {
  const int64_t h = s.height, w = s.width;
  // Output pixel (y, x) reads input (y + dy - p, x + dx - p).
  const int64_t oy = dy - padding, ox = dx - padding;
  // Columns of the output that fall inside the input.
  const int64_t x0 = std::clamp<int64_t>(-ox, 0, w), x1 = std::clamp<int64_t>(w - ox, 0, w);
  for (int64_t c = 0; c < s.channels; ++c) {
    const float* in = src + c * h * w;
    float* out = dst + c * h * w;
    for (int64_t y = 0; y < h; ++y) {
      float* row = out + y * w;
      const int64_t iy = y + oy;
      if (iy < 0 || iy >= h || x0 >= x1) {
        std::fill(row, row + w, 0.0f);
        continue;
      }
      std::fill(row, row + x0, 0.0f);
      std::memcpy(row + x0, in + iy * w + x0 + ox, sizeof(float) * std::size_t(x1 - x0));
      std::fill(row + x1, row + w, 0.0f);
    }
  }
}

void flip_horizontal(float* img, const image_shape& s) {
  for (int64_t r = 0; r < s.channels * s.height; ++r) std::reverse(img + r * s.width, img + (r + 1) * s.width);
}

void normalize_image(float* img, const image_shape& s, const channel_normalization& norm) {
  if (norm.mean.empty()) return;
  const int64_t hw = s.height * s.width;
  for (int64_t c = 0; c < s.channels; ++c) {
    const float m = norm.mean[std::size_t(c)];
    const float inv = 1.0f / norm.stddev[std::size_t(c)];
    float* p = img + c * hw;
    for (int64_t j = 0; j < hw; ++j) p[j] = (p[j] - m) * inv;
  }
}

void transform_image(const float* src, float* dst, const image_shape& s, const augment_options& opt,
                     const augment_draw& draw, const channel_normalization& norm) {
  if (opt.crop_padding > 0)
    crop_with_padding(src, dst, s, opt.crop_padding, draw.dy, draw.dx);
  else
    std::memcpy(dst, src, sizeof(float) * std::size_t(s.numel()));
  if (draw.flip) flip_horizontal(dst, s);
  normalize_image(dst, s, norm);
}

void transform_batch(std::span<const float> images, const image_shape& s, std::span<const int64_t> ids,
                     std::span<float> dst, const augment_options& opt, const channel_normalization& norm,
                     uint64_t seed, int epoch) {
  const int64_t per = s.numel();
  const int64_t n = int64_t(ids.size());
  // Small images: a few dozen per task so the scheduling does not dominate.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(per, 1));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t j = r.begin(); j < r.end(); ++j) {
      const int64_t id = ids[std::size_t(j)];
      transform_image(images.data() + id * per, dst.data() + j * per, s, opt,
                      draw_augmentation(opt, seed, epoch, id), norm);
    }
  });
}

void transform_batch(std::span<const uint8_t> images, float scale, const image_shape& s,
                     std::span<const int64_t> ids, std::span<float> dst, const augment_options& opt,
                     const channel_normalization& norm, uint64_t seed, int epoch) {
  const int64_t per = s.numel();
  const int64_t n = int64_t(ids.size());
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(per, 1));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain), [&](const tbb::blocked_range<int64_t>& r) {
    std::vector<float> src(static_cast<std::size_t>(per));
    for (int64_t j = r.begin(); j < r.end(); ++j) {
      const int64_t id = ids[std::size_t(j)];
      const uint8_t* in = images.data() + id * per;
      for (int64_t k = 0; k < per; ++k) src[std::size_t(k)] = float(in[k]) * scale;
      transform_image(src.data(), dst.data() + j * per, s, opt, draw_augmentation(opt, seed, epoch, id), norm);
    }
  });
}

namespace {
bool fits(std::span<const float> values, float scale) {
  for (float v : values) {
    if (!(v >= 0.0f && v <= 256.0f * scale)) return false;  // also NaN; lround below stays in range
    const long b = std::lround(v / scale);
    if (b < 0 || b > 255 || float(uint8_t(b)) * scale != v) return false;
  }
  return true;
}
}  // namespace

float byte_scale(std::span<const float> values) {
  if (fits(values, 1.0f)) return 1.0f;
  if (fits(values, 1.0f / 255.0f)) return 1.0f / 255.0f;
  return 0.0f;
}

std::vector<uint8_t> to_bytes(std::span<const float> values, float scale) {
  std::vector<uint8_t> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = uint8_t(std::lround(values[i] / scale));
  return out;
}

}  // namespace hetflow::kernels::preprocess
