// Image pre-processing for training input (Fashion-MNIST, the synthetic image
// sets of kernels/dataset.hpp): random crop with zero padding, random
// horizontal flip, per-channel normalisation. Plain C++ on (C, H, W) float
// images, row-major; oneTBB across the samples of a batch. No CAF, no tensors:
// the stream shard actor (actors/builtin/stream_shard.cpp) writes the output
// straight into a wire message.
//
// Determinism: what happens to a sample depends only on (seed, epoch, sample
// index) -- never on which shard, thread or batch handles it -- so any split
// of an epoch across shards produces the same images:
//
//   draw = draw_augmentation(options, seed, epoch, sample)
//   out  = normalise(flip?(crop(pad(in, p), dy, dx)))
//
// Crop: the image is padded with p zeros on every side (zeros of the raw
// input, i.e. black, as torchvision's RandomCrop(padding=p) does), then an
// H x W window with top-left corner (dy, dx), 0 <= dy, dx <= 2p, is cut back
// out; (p, p) is the identity. Normalisation comes last, so padded pixels
// normalise like any black pixel.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hetflow::kernels::preprocess {

struct image_shape {
  int64_t channels = 1, height = 28, width = 28;
  int64_t numel() const noexcept { return channels * height * width; }
};

// Per channel: x' = (x - mean[c]) * (1 / stddev[c]) -- the same arithmetic as
// kernels::normalize, so an un-augmented stream is bit-identical to the
// in-memory path.
struct channel_normalization {
  std::vector<float> mean, stddev;  // one per channel; empty = identity
};

struct augment_options {
  int crop_padding = 0;  // p: 0 = no random crop
  bool flip = false;     // random horizontal flip with probability 1/2
  bool enabled() const noexcept { return crop_padding > 0 || flip; }
};

// What the augmentation does to one sample.
struct augment_draw {
  int dy = 0, dx = 0;  // crop window corner in the padded image, [0, 2p]
  bool flip = false;
};

// The draw for `sample` of `epoch` (0-based) under `seed`; dy = dx = p and no
// flip when the options disable them.
augment_draw draw_augmentation(const augment_options& opt, uint64_t seed, int epoch, int64_t sample);

// dst = the H x W window at (dy, dx) of src padded by `padding` zeros.
// src and dst must not overlap. dy, dx in [0, 2 * padding].
void crop_with_padding(const float* src, float* dst, const image_shape& s, int padding, int dy, int dx);
// Mirrors every row in place.
void flip_horizontal(float* img, const image_shape& s);
// In place; `norm` empty = nothing to do. norm.mean/stddev must have
// s.channels entries.
void normalize_image(float* img, const image_shape& s, const channel_normalization& norm);

// One sample: crop/flip by `draw` (with opt.crop_padding), then normalise.
// src and dst must not overlap.
void transform_image(const float* src, float* dst, const image_shape& s, const augment_options& opt,
                     const augment_draw& draw, const channel_normalization& norm);

// A batch: dst[j] = transform_image(images[ids[j]]) with the draw of
// (seed, epoch, ids[j]), for every j, in parallel (oneTBB). `images` holds the
// whole dataset, N x s.numel() floats; every id must be < N (checked by the
// caller). dst holds ids.size() x s.numel() floats.
void transform_batch(std::span<const float> images, const image_shape& s, std::span<const int64_t> ids,
                     std::span<float> dst, const augment_options& opt, const channel_normalization& norm,
                     uint64_t seed, int epoch);
// The same from 8-bit pixels (a dataset whose every value is float(b) *
// scale for a byte b, kept at a quarter of the memory): each sample's bytes
// become float(b) * scale first, so the result is the float path's, bit for
// bit.
void transform_batch(std::span<const uint8_t> images, float scale, const image_shape& s,
                     std::span<const int64_t> ids, std::span<float> dst, const augment_options& opt,
                     const channel_normalization& norm, uint64_t seed, int epoch);

// The scale with which 8-bit pixels hold `values` exactly (every value is
// float(b) * scale, b in [0, 255]): 1 (raw bytes) or 1 / 255 (bytes scaled
// to [0, 1], as the Fashion-MNIST loader does); 0 when neither.
float byte_scale(std::span<const float> values);
// The bytes b of `values` under `scale` (byte_scale's).
std::vector<uint8_t> to_bytes(std::span<const float> values, float scale);

}  // namespace hetflow::kernels::preprocess
