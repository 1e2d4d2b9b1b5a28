// The interface a device backend implements. kernels/ops.cc validates every call, then
// forwards it to the backend registered for the tensors' device type. The CPU backend is
// always linked; the CUDA backend registers itself when //kernels/cuda is linked in.
#ifndef CCTUNE_KERNELS_BACKEND_H_
#define CCTUNE_KERNELS_BACKEND_H_

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/device.h"
#include "core/random.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/op_types.h"

namespace cctune {

// Methods receive already-validated arguments (see ops.h for shapes and dtypes).
// The forward ops are pure virtual. The training ops (AttentionWithLse, cross-entropy and the
// backward ops) have defaults that return Unimplemented, so a backend can grow them one by one
// and every backend keeps building when one is added here.
class OpBackend {
 public:
  virtual ~OpBackend() = default;
  virtual DeviceType type() const = 0;

  virtual absl::Status Linear(Tensor& out, const Tensor& x, const Tensor& w,
                              const Tensor* bias) = 0;
  virtual absl::Status Matmul(Tensor& out, const Tensor& a, const Tensor& b) = 0;
  virtual absl::Status Embedding(Tensor& out, const Tensor& table, const Tensor& ids) = 0;
  virtual absl::Status RmsNorm(Tensor& out, const Tensor& x, const Tensor& weight,
                               float eps) = 0;
  // sum = a + b; norm = RmsNorm(sum). The default runs the two ops (a backend may fuse them).
  virtual absl::Status AddRmsNorm(Tensor& sum, Tensor& norm, const Tensor& a, const Tensor& b,
                                  const Tensor& weight, float eps) {
    CCTUNE_RETURN_IF_ERROR(Add(sum, a, b));
    return RmsNorm(norm, sum, weight, eps);
  }
  virtual absl::Status RopeCache(Tensor& cos, Tensor& sin, const Tensor& inv_freq) = 0;
  virtual absl::Status Rope(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                            const Tensor& positions, ops::RopePairing pairing) = 0;
  virtual absl::Status SiluMul(Tensor& out, const Tensor& gate, const Tensor& up) = 0;
  virtual absl::Status Softmax(Tensor& out, const Tensor& x) = 0;
  virtual absl::Status Attention(Tensor& out, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const ops::AttentionOptions& options) = 0;
  virtual absl::Status Add(Tensor& out, const Tensor& a, const Tensor& b) = 0;
  virtual absl::Status Mul(Tensor& out, const Tensor& a, const Tensor& b) = 0;
  virtual absl::Status Scale(Tensor& out, const Tensor& x, float alpha) = 0;
  virtual absl::Status Argmax(Tensor& out, const Tensor& x) = 0;
  virtual absl::Status TopK(Tensor& values, Tensor& indices, const Tensor& x, int64_t k) = 0;
  virtual absl::Status Sample(Tensor& out, const Tensor& logits,
                              const ops::SamplingParams& params, Generator& gen) = 0;

  // ---- Training ----
  virtual absl::Status AttentionWithLse(Tensor& out, Tensor& lse, const Tensor& q,
                                        const Tensor& k, const Tensor& v,
                                        const ops::AttentionOptions& options) {
    return NotImplemented("AttentionWithLse");
  }
  virtual absl::Status CrossEntropyForward(Tensor& loss_sum, Tensor& num_valid, Tensor* row_loss,
                                           const Tensor& logits, const Tensor& targets,
                                           int64_t ignore_index) {
    return NotImplemented("CrossEntropyForward");
  }
  virtual absl::Status CrossEntropyBackward(Tensor& dlogits, const Tensor& logits,
                                            const Tensor& targets, float scale,
                                            int64_t ignore_index) {
    return NotImplemented("CrossEntropyBackward");
  }
  virtual absl::Status LinearBackward(Tensor* dx, Tensor* dw, Tensor* dbias, const Tensor& dy,
                                      const Tensor& x, const Tensor& w) {
    return NotImplemented("LinearBackward");
  }
  virtual absl::Status EmbeddingBackward(Tensor& dtable, const Tensor& dy, const Tensor& ids) {
    return NotImplemented("EmbeddingBackward");
  }
  virtual absl::Status RmsNormBackward(Tensor& dx, Tensor* dweight, const Tensor& dy,
                                       const Tensor& x, const Tensor& weight, float eps) {
    return NotImplemented("RmsNormBackward");
  }
  virtual absl::Status RopeBackward(Tensor& dx, const Tensor& dy, const Tensor& cos,
                                    const Tensor& sin, const Tensor& positions,
                                    ops::RopePairing pairing) {
    return NotImplemented("RopeBackward");
  }
  virtual absl::Status SiluMulBackward(Tensor& dgate, Tensor& dup, const Tensor& dy,
                                       const Tensor& gate, const Tensor& up) {
    return NotImplemented("SiluMulBackward");
  }
  virtual absl::Status SoftmaxBackward(Tensor& dx, const Tensor& dy, const Tensor& y) {
    return NotImplemented("SoftmaxBackward");
  }
  virtual absl::Status AddBackward(Tensor* da, Tensor* db, const Tensor& dy) {
    return NotImplemented("AddBackward");
  }
  virtual absl::Status MulBackward(Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a,
                                   const Tensor& b) {
    return NotImplemented("MulBackward");
  }
  virtual absl::Status AttentionBackward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dy,
                                         const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor* out, const Tensor* lse,
                                         const ops::AttentionOptions& options) {
    return NotImplemented("AttentionBackward");
  }
  // ---- Optimizer updates (ops::AdamWUpdate, ops::SgdUpdate, ops::SquaredNorm) ----
  // Validated flat buffers: contiguous, equal element counts; master is given exactly when
  // param is bf16; momentum_buffer exactly when s.momentum.
  virtual absl::Status AdamWUpdate(Tensor& param, Tensor* master, Tensor& exp_avg,
                                   Tensor& exp_avg_sq, const Tensor& grad,
                                   const ops::AdamWScalars& s) {
    return NotImplemented("AdamWUpdate");
  }
  virtual absl::Status SgdUpdate(Tensor& param, Tensor* master, Tensor* momentum_buffer,
                                 const Tensor& grad, const ops::SgdScalars& s) {
    return NotImplemented("SgdUpdate");
  }
  virtual absl::Status SquaredNorm(double* sum, const Tensor& x) {
    return NotImplemented("SquaredNorm");
  }
  // ---- Dropout (ops::Dropout; ops.cc turns p into the integer threshold and the scale) ----
  // out[i] = (Philox word (seed, offset + i) >> 8) < drop_below ? 0 : x[i] · scale, with i the
  // row-major index over x's shape.
  virtual absl::Status Dropout(Tensor& out, const Tensor& x, uint32_t drop_below, float scale,
                               uint64_t seed, uint64_t offset) {
    return NotImplemented("Dropout");
  }

 protected:
  // "<op> is not implemented for <device type>".
  absl::Status NotImplemented(const char* op) const {
    const DeviceType t = type();
    const char* device = t == DeviceType::kCPU ? "cpu" : t == DeviceType::kCUDA ? "cuda" : "meta";
    return absl::UnimplementedError(absl::StrCat(op, " is not implemented for ", device));
  }
};

void RegisterOpBackend(OpBackend* backend);
absl::StatusOr<OpBackend*> GetOpBackend(DeviceType type);

}  // namespace cctune

#endif  // CCTUNE_KERNELS_BACKEND_H_
