// Test-only fp64 reference implementations of the layers, written as plainly as possible
// (loops over std::vector<double>), to check the modules against something independent of
// kernels/. Row-major buffers; shapes in the comments.
#ifndef CCTUNE_MODULES_REFERENCE_H_
#define CCTUNE_MODULES_REFERENCE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "kernels/op_types.h"

namespace cctune {
namespace reference {

using Vec = std::vector<double>;

// The tensor's values (any dtype, device, strides) as doubles; aborts on failure.
Vec ToVec(const Tensor& t);

// y [rows, n] = x [rows, k] · w[n, k]ᵀ + bias[n] (bias may be empty).
Vec Linear(const Vec& x, int64_t rows, int64_t k, const Vec& w, int64_t n, const Vec& bias = {});
// y [rows, d] = x / sqrt(mean(x²) + eps) * scale.
Vec RmsNorm(const Vec& x, int64_t rows, int64_t d, const Vec& scale, double eps);
// silu(gate) * up, elementwise.
Vec SiluMul(const Vec& gate, const Vec& up);
// theta_i = base^(-2i/h_d), then Llama 3.1 scaling when given (Meta's published formula).
Vec RopeInvFrequencies(int64_t head_dim, double base,
                       const std::optional<ops::RopeScaling>& scaling = std::nullopt);
// x [b, s, n, h_d] rotated; positions [b * s] (row-major [b, s]).
Vec Rope(const Vec& x, int64_t b, int64_t s, int64_t n, int64_t h_d,
         const std::vector<int64_t>& positions, const Vec& inv_freq, ops::RopePairing pairing);
// Grouped attention. q [b, s_q, n_h, h_d]; k, v [b, s_kv, n_kv, h_d]; mask [b, s_q, s_kv]
// (empty: causal if `causal`, else full); query i sits at position s_kv - s_q + i.
// Returns [b, s_q, n_h, h_d]; a row that may attend nothing gets zeros.
Vec Attention(const Vec& q, const Vec& k, const Vec& v, int64_t b, int64_t s_q, int64_t s_kv,
              int64_t n_h, int64_t n_kv, int64_t h_d, const std::vector<bool>& mask, bool causal);

// Mean cross-entropy of logits [rows, v] against labels [rows], over the labels that are not
// `ignore_index` (0 when there are none).
double CrossEntropy(const Vec& logits, int64_t rows, int64_t v, const std::vector<int64_t>& labels,
                    int64_t ignore_index);

// The data of a training check: b rows of s tokens with random ids and labels in [0, v) (the
// first and the last label ignored), positions [b, s] and the attention mask [b, s, s] (1: may
// attend): causal, or with `packed` block-causal over two documents per row (the second from
// s / 2, its positions restarting at 0).
struct TrainingBatch {
  std::vector<int64_t> tokens, labels, positions;
  std::vector<float> mask;
};
TrainingBatch RandomTrainingBatch(int64_t b, int64_t s, int64_t v, bool packed,
                                  int64_t ignore_index, Generator& gen);

// max |a - b| / max(max |b|, tiny): the "relative error" the tests bound.
double MaxRelError(const Vec& a, const Vec& b);

}  // namespace reference
}  // namespace cctune

#endif  // CCTUNE_MODULES_REFERENCE_H_
