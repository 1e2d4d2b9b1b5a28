// The interface a device backend implements. kernels/ops.cc validates every call, then
// forwards it to the backend registered for the tensors' device type. The CPU backend is
// always linked; the CUDA backend registers itself when //kernels/cuda is linked in.
#ifndef CCTUNE_KERNELS_BACKEND_H_
#define CCTUNE_KERNELS_BACKEND_H_

#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/op_types.h"

namespace cctune {

// Methods receive already-validated arguments (see ops.h for shapes and dtypes).
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
};

void RegisterOpBackend(OpBackend* backend);
absl::StatusOr<OpBackend*> GetOpBackend(DeviceType type);

}  // namespace cctune

#endif  // CCTUNE_KERNELS_BACKEND_H_
