// In-memory labelled image datasets: Fashion-MNIST from IDX files and a
// deterministic synthetic set of any shape; per-channel normalisation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

struct image_dataset {
  tensor images;                // (N, C, H, W) f32
  std::vector<int32_t> labels;  // N values in [0, classes)
  int64_t classes = 0;

  int64_t size() const noexcept { return int64_t(labels.size()); }
  // One sample's shape (C, H, W).
  shape sample_shape() const;
};

// Reads `<dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]` (gzip or
// raw; the .gz name is tried first). Pixels become floats in [0, 1].
// errc::not_found / io_error / parse_error name the file and the problem.
// max_rows >= 0: only the first max_rows samples (only what they need of the
// files is read and decompressed).
expected<image_dataset> load_fashion_mnist(const std::string& dir, bool train, int64_t max_rows = -1);

// The first `rows` samples of d (all of them if it has fewer), copied.
image_dataset first_samples(const image_dataset& d, int64_t rows);

// `count` samples of shape `sample` (C, H, W) in `classes` classes: each class
// has a fixed random prototype image and sample i is its class's prototype
// plus Gaussian noise, so the task is learnable but not trivial. Sample i
// depends only on (seed, i): shards (and a test split) generate their part
// independently as samples [first, first + count).
image_dataset make_synthetic_images(const shape& sample, int64_t count, int64_t classes, uint64_t seed,
                                    float noise = 1.0f, int64_t first = 0);

struct normalization {
  std::vector<float> mean, stddev;  // per channel
};

// Per-channel mean and (population) standard deviation over all pixels.
normalization channel_stats(const image_dataset& data);
// x = (x - mean[c]) / stddev[c] in place.
void normalize(image_dataset& data, const normalization& stats);

}  // namespace hetflow::kernels
