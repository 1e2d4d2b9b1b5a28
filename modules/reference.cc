#include "modules/reference.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace cctune {
namespace reference {

Vec ToVec(const Tensor& t) { return ValueOrDie(t.ToDoubleVector()); }

Vec Linear(const Vec& x, int64_t rows, int64_t k, const Vec& w, int64_t n, const Vec& bias) {
  Vec y(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias.empty() ? 0.0 : bias[j];
      for (int64_t i = 0; i < k; ++i) acc += x[r * k + i] * w[j * k + i];
      y[r * n + j] = acc;
    }
  }
  return y;
}

Vec RmsNorm(const Vec& x, int64_t rows, int64_t d, const Vec& scale, double eps) {
  Vec y(rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += x[r * d + i] * x[r * d + i];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t i = 0; i < d; ++i) y[r * d + i] = x[r * d + i] * inv * scale[i];
  }
  return y;
}

Vec SiluMul(const Vec& gate, const Vec& up) {
  Vec y(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) y[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return y;
}

Vec RopeInvFrequencies(int64_t head_dim, double base,
                       const std::optional<ops::RopeScaling>& scaling) {
  const double pi = 3.14159265358979323846;
  Vec f(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    f[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / head_dim);
    if (!scaling.has_value()) continue;
    const ops::RopeScaling& s = *scaling;
    const double old_len = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = old_len / s.low_freq_factor;
    const double high_wavelen = old_len / s.high_freq_factor;
    const double wavelen = 2 * pi / f[i];
    if (wavelen < high_wavelen) continue;  // high frequencies unchanged
    if (wavelen > low_wavelen) {
      f[i] /= s.factor;  // low frequencies scaled down
    } else {
      const double smooth =
          (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f[i] = (1 - smooth) * f[i] / s.factor + smooth * f[i];
    }
  }
  return f;
}

Vec Rope(const Vec& x, int64_t b, int64_t s, int64_t n, int64_t h_d,
         const std::vector<int64_t>& positions, const Vec& inv_freq, ops::RopePairing pairing) {
  Vec y(x.size());
  const int64_t half = h_d / 2;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t si = 0; si < s; ++si) {
      const double p = static_cast<double>(positions[bi * s + si]);
      for (int64_t h = 0; h < n; ++h) {
        const int64_t base = ((bi * s + si) * n + h) * h_d;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i0 = pairing == ops::RopePairing::kInterleaved ? 2 * i : i;
          const int64_t i1 = pairing == ops::RopePairing::kInterleaved ? 2 * i + 1 : i + half;
          const double c = std::cos(p * inv_freq[i]), sn = std::sin(p * inv_freq[i]);
          const double x0 = x[base + i0], x1 = x[base + i1];
          y[base + i0] = x0 * c - x1 * sn;
          y[base + i1] = x1 * c + x0 * sn;
        }
      }
    }
  }
  return y;
}

Vec Attention(const Vec& q, const Vec& k, const Vec& v, int64_t b, int64_t s_q, int64_t s_kv,
              int64_t n_h, int64_t n_kv, int64_t h_d, const std::vector<bool>& mask, bool causal) {
  Vec out(b * s_q * n_h * h_d, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(h_d));
  const int64_t group = n_h / n_kv;
  std::vector<double> scores(s_kv);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < n_h; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = 0; i < s_q; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < s_kv; ++j) {
          bool allowed = true;
          if (!mask.empty()) {
            allowed = mask[(bi * s_q + i) * s_kv + j];
          } else if (causal) {
            allowed = j <= s_kv - s_q + i;
          }
          if (!allowed) {
            scores[j] = -INFINITY;
            continue;
          }
          double dot = 0.0;
          for (int64_t d = 0; d < h_d; ++d) {
            dot += q[((bi * s_q + i) * n_h + h) * h_d + d] *
                   k[((bi * s_kv + j) * n_kv + kh) * h_d + d];
          }
          scores[j] = dot * scale;
          mx = std::max(mx, scores[j]);
        }
        if (mx == -INFINITY) continue;  // nothing to attend: zeros
        double sum = 0.0;
        for (int64_t j = 0; j < s_kv; ++j) {
          scores[j] = scores[j] == -INFINITY ? 0.0 : std::exp(scores[j] - mx);
          sum += scores[j];
        }
        for (int64_t j = 0; j < s_kv; ++j) {
          const double p = scores[j] / sum;
          if (p == 0.0) continue;
          for (int64_t d = 0; d < h_d; ++d) {
            out[((bi * s_q + i) * n_h + h) * h_d + d] +=
                p * v[((bi * s_kv + j) * n_kv + kh) * h_d + d];
          }
        }
      }
    }
  }
  return out;
}

double CrossEntropy(const Vec& logits, int64_t rows, int64_t v, const std::vector<int64_t>& labels,
                    int64_t ignore_index) {
  double total = 0;
  int64_t count = 0;
  for (int64_t t = 0; t < rows; ++t) {
    if (labels[t] == ignore_index) continue;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, logits[t * v + j]);
    for (int64_t j = 0; j < v; ++j) sum += std::exp(logits[t * v + j] - mx);
    total += mx + std::log(sum) - logits[t * v + labels[t]];
    ++count;
  }
  return count > 0 ? total / count : 0.0;
}

TrainingBatch RandomTrainingBatch(int64_t b, int64_t s, int64_t v, bool packed,
                                  int64_t ignore_index, Generator& gen) {
  TrainingBatch t;
  const int64_t n = b * s;
  for (int64_t i = 0; i < n; ++i) {
    t.tokens.push_back(static_cast<int64_t>(gen.UniformInt(v)));
    t.labels.push_back(static_cast<int64_t>(gen.UniformInt(v)));
  }
  t.labels[0] = ignore_index;  // a masked prompt token
  t.labels[n - 1] = ignore_index;
  const int64_t split = packed ? s / 2 : 0;
  t.mask.assign(b * s * s, 0.f);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t i = 0; i < s; ++i) {
      const int64_t start = (packed && i >= split) ? split : 0;
      t.positions.push_back(i - start);
      for (int64_t j = start; j <= i; ++j) t.mask[(bi * s + i) * s + j] = 1.f;
    }
  }
  return t;
}

double MaxRelError(const Vec& a, const Vec& b) {
  CCTUNE_CHECK(a.size() == b.size(), "MaxRelError: sizes ", a.size(), " and ", b.size());
  double diff = 0.0, mag = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    diff = std::max(diff, std::abs(a[i] - b[i]));
    mag = std::max(mag, std::abs(b[i]));
  }
  return diff / std::max(mag, 1e-30);
}

}  // namespace reference
}  // namespace cctune
