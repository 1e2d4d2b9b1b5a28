#include "kernels/cpu/cpu_backend.h"

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_backward.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/op_profile.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/sampling.h"

namespace cctune {
namespace cpu {
namespace {

// ---- The step profile's FLOP and byte counts (kernels/cpu/op_profile.h) ----
double Bytes(const Tensor& t) {
  return static_cast<double>(t.numel()) * static_cast<double>(DTypeSize(t.dtype()));
}
double Bytes(const Tensor* t) { return t != nullptr ? Bytes(*t) : 0.0; }
template <typename... T>
double Bytes(const Tensor& a, const T&... rest) {
  return Bytes(a) + Bytes(rest...);
}
// 2·m·n·k of out[.., n] = x[.., k]·w[n, k]ᵀ.
double LinearFlops(const Tensor& x, const Tensor& w) {
  return 2.0 * static_cast<double>(x.numel()) * static_cast<double>(w.size(0));
}
// Products of QKᵀ and PV: 2 · 2 · b·n_h·s_q·s_kv·h_d, halved for a causal (square) mask.
double AttentionFlops(const Tensor& q, const Tensor& k, const ops::AttentionOptions& o) {
  const double f = 4.0 * static_cast<double>(q.numel()) * static_cast<double>(k.size(2));
  return o.causal ? f / 2 : f;
}
using C = OpCategory;

class CpuBackend final : public OpBackend {
 public:
  DeviceType type() const override { return DeviceType::kCPU; }

  absl::Status Linear(Tensor& out, const Tensor& x, const Tensor& w, const Tensor* bias) override {
    ScopedOpTimer t(C::kGemmForward, LinearFlops(x, w), Bytes(out, x, w));
    return cpu::Linear(out, x, w, bias);
  }
  absl::Status Matmul(Tensor& out, const Tensor& a, const Tensor& b) override {
    ScopedOpTimer t(C::kGemmForward, 2.0 * static_cast<double>(a.numel()) * b.size(-1),
                    Bytes(out, a, b));
    return cpu::Matmul(out, a, b);
  }
  absl::Status Embedding(Tensor& out, const Tensor& table, const Tensor& ids) override {
    ScopedOpTimer t(C::kElementwiseForward, 0, 2 * Bytes(out) + Bytes(ids));
    return cpu::Embedding(out, table, ids);
  }
  absl::Status RmsNorm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) override {
    ScopedOpTimer t(C::kElementwiseForward, 0, Bytes(out, x, weight));
    return cpu::RmsNorm(out, x, weight, eps);
  }
  absl::Status AddRmsNorm(Tensor& sum, Tensor& norm, const Tensor& a, const Tensor& b,
                          const Tensor& weight, float eps) override {
    ScopedOpTimer t(C::kElementwiseForward, 0, Bytes(sum, norm, a) + Bytes(b, weight));
    return cpu::AddRmsNorm(sum, norm, a, b, weight, eps);
  }
  absl::Status RopeCache(Tensor& cos, Tensor& sin, const Tensor& inv_freq) override {
    ScopedOpTimer t(C::kElementwiseForward, 0, Bytes(cos, sin, inv_freq));
    return cpu::RopeCache(cos, sin, inv_freq);
  }
  absl::Status Rope(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                    const Tensor& positions, ops::RopePairing pairing) override {
    ScopedOpTimer t(C::kElementwiseForward, 0, Bytes(out, x) + Bytes(positions));
    return cpu::Rope(out, x, cos, sin, positions, pairing);
  }
  absl::Status SiluMul(Tensor& out, const Tensor& gate, const Tensor& up) override {
    ScopedOpTimer t(C::kElementwiseForward, 0, Bytes(out, gate, up));
    return cpu::SiluMul(out, gate, up);
  }
  absl::Status Softmax(Tensor& out, const Tensor& x) override {
    ScopedOpTimer t(C::kElementwiseForward, 0, Bytes(out, x));
    return cpu::Softmax(out, x);
  }
  absl::Status Attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                         const ops::AttentionOptions& options) override {
    ScopedOpTimer t(C::kAttentionForward, AttentionFlops(q, k, options), Bytes(out, q, k, v));
    return cpu::Attention(out, q, k, v, options);
  }
  absl::Status Add(Tensor& out, const Tensor& a, const Tensor& b) override {
    ScopedOpTimer t(C::kElementwiseForward, 0, Bytes(out, a, b));
    return cpu::Add(out, a, b);
  }
  absl::Status Mul(Tensor& out, const Tensor& a, const Tensor& b) override {
    ScopedOpTimer t(C::kElementwiseForward, 0, Bytes(out, a, b));
    return cpu::Mul(out, a, b);
  }
  absl::Status Scale(Tensor& out, const Tensor& x, float alpha) override {
    ScopedOpTimer t(C::kElementwiseForward, 0, Bytes(out, x));
    return cpu::Scale(out, x, alpha);
  }
  absl::Status Argmax(Tensor& out, const Tensor& x) override { return cpu::Argmax(out, x); }
  absl::Status TopK(Tensor& values, Tensor& indices, const Tensor& x, int64_t k) override {
    return cpu::TopK(values, indices, x, k);
  }
  absl::Status Sample(Tensor& out, const Tensor& logits, const ops::SamplingParams& params,
                      Generator& gen) override {
    return cpu::Sample(out, logits, params, gen);
  }

  // ---- Training ----
  absl::Status AttentionWithLse(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                                const Tensor& v, const ops::AttentionOptions& options) override {
    ScopedOpTimer t(C::kAttentionForward, AttentionFlops(q, k, options),
                    Bytes(out, lse, q, k, v));
    return cpu::AttentionWithLse(out, lse, q, k, v, options);
  }
  absl::Status CrossEntropyForward(Tensor& loss_sum, Tensor& num_valid, Tensor* row_loss,
                                   const Tensor& logits, const Tensor& targets,
                                   int64_t ignore_index) override {
    ScopedOpTimer t(C::kLoss, 0, Bytes(logits, targets));
    return cpu::CrossEntropyForward(loss_sum, num_valid, row_loss, logits, targets, ignore_index);
  }
  absl::Status CrossEntropyBackward(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                    float scale, int64_t ignore_index) override {
    ScopedOpTimer t(C::kLoss, 0, Bytes(dlogits, logits, targets));
    return cpu::CrossEntropyBackward(dlogits, logits, targets, scale, ignore_index);
  }
  absl::Status LinearBackward(Tensor* dx, Tensor* dw, Tensor* dbias, const Tensor& dy,
                              const Tensor& x, const Tensor& w) override {
    // Its dX and dW GEMMs time themselves (linear.cc); this is the rest (dy, bias).
    ScopedOpTimer t(C::kElementwiseBackward, 0, 0);
    return cpu::LinearBackward(dx, dw, dbias, dy, x, w);
  }
  absl::Status EmbeddingBackward(Tensor& dtable, const Tensor& dy, const Tensor& ids) override {
    ScopedOpTimer t(C::kElementwiseBackward, 0, 2 * Bytes(dy) + Bytes(ids));
    return cpu::EmbeddingBackward(dtable, dy, ids);
  }
  absl::Status RmsNormBackward(Tensor& dx, Tensor* dweight, const Tensor& dy, const Tensor& x,
                               const Tensor& weight, float eps) override {
    ScopedOpTimer t(C::kElementwiseBackward, 0, Bytes(dx, dy, x, weight) + Bytes(dweight));
    return cpu::RmsNormBackward(dx, dweight, dy, x, weight, eps);
  }
  absl::Status RopeBackward(Tensor& dx, const Tensor& dy, const Tensor& cos, const Tensor& sin,
                            const Tensor& positions, ops::RopePairing pairing) override {
    ScopedOpTimer t(C::kElementwiseBackward, 0, Bytes(dx, dy) + Bytes(positions));
    return cpu::RopeBackward(dx, dy, cos, sin, positions, pairing);
  }
  absl::Status SiluMulBackward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate,
                               const Tensor& up) override {
    ScopedOpTimer t(C::kElementwiseBackward, 0, Bytes(dgate, dup, dy, gate, up));
    return cpu::SiluMulBackward(dgate, dup, dy, gate, up);
  }
  absl::Status SoftmaxBackward(Tensor& dx, const Tensor& dy, const Tensor& y) override {
    ScopedOpTimer t(C::kElementwiseBackward, 0, Bytes(dx, dy, y));
    return cpu::SoftmaxBackward(dx, dy, y);
  }
  absl::Status AddBackward(Tensor* da, Tensor* db, const Tensor& dy) override {
    ScopedOpTimer t(C::kElementwiseBackward, 0, Bytes(dy) + 2 * (Bytes(da) + Bytes(db)));
    return cpu::AddBackward(da, db, dy);
  }
  absl::Status MulBackward(Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a,
                           const Tensor& b) override {
    ScopedOpTimer t(C::kElementwiseBackward, 0,
                    Bytes(dy, a, b) + 2 * (Bytes(da) + Bytes(db)));
    return cpu::MulBackward(da, db, dy, a, b);
  }
  absl::Status AttentionBackward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dy,
                                 const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor* out, const Tensor* lse,
                                 const ops::AttentionOptions& options) override {
    // QKᵀ recomputed, then dV = Pᵀ·dY, dP = dY·Vᵀ, dQ = dS·K, dK = dSᵀ·Q: 5 of forward's 2.
    ScopedOpTimer t(C::kAttentionBackward, 2.5 * AttentionFlops(q, k, options),
                    Bytes(dq, dk, dv, dy, q, k, v) + Bytes(out) + Bytes(lse));
    return cpu::AttentionBackward(dq, dk, dv, dy, q, k, v, out, lse, options);
  }

  // ---- Optimizer updates ----
  absl::Status AdamWUpdate(Tensor& param, Tensor* master, Tensor& exp_avg, Tensor& exp_avg_sq,
                           const Tensor& grad, const ops::AdamWScalars& s) override {
    // Reads param (or master), both moments and grad; writes them back (and param).
    ScopedOpTimer t(C::kOptimizer, 0,
                    2 * Bytes(param, exp_avg, exp_avg_sq) + Bytes(grad) + 2 * Bytes(master));
    return cpu::AdamWUpdate(param, master, exp_avg, exp_avg_sq, grad, s);
  }
  absl::Status SgdUpdate(Tensor& param, Tensor* master, Tensor* momentum_buffer,
                         const Tensor& grad, const ops::SgdScalars& s) override {
    ScopedOpTimer t(C::kOptimizer, 0,
                    2 * (Bytes(param) + Bytes(master) + Bytes(momentum_buffer)) + Bytes(grad));
    return cpu::SgdUpdate(param, master, momentum_buffer, grad, s);
  }
  absl::Status SquaredNorm(double* sum, const Tensor& x) override {
    ScopedOpTimer t(C::kOptimizer, 0, Bytes(x));
    return cpu::SquaredNorm(sum, x);
  }
  absl::Status Dropout(Tensor& out, const Tensor& x, uint32_t drop_below, float scale,
                       uint64_t seed, uint64_t offset) override {
    ScopedOpTimer t(C::kElementwiseForward, 0, Bytes(out, x));
    return cpu::Dropout(out, x, drop_below, scale, seed, offset);
  }
};

}  // namespace

OpBackend* CpuOpBackend() {
  static CpuBackend* backend = new CpuBackend();
  return backend;
}

}  // namespace cpu
}  // namespace cctune
