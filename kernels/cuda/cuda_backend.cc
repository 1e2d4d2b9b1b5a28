#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <climits>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

static_assert(static_cast<int>(DType::kF32) == kDtF32, "DtCode must mirror DType");
static_assert(static_cast<int>(DType::kBF16) == kDtBF16, "DtCode must mirror DType");
static_assert(static_cast<int>(DType::kF16) == kDtF16, "DtCode must mirror DType");
static_assert(static_cast<int>(DType::kI32) == kDtI32, "DtCode must mirror DType");
static_assert(static_cast<int>(DType::kI64) == kDtI64, "DtCode must mirror DType");
static_assert(static_cast<int>(DType::kBool) == kDtBool, "DtCode must mirror DType");
static_assert(kCuMaxDims == kMaxDims, "CuTensor must hold every Tensor rank");

// All work runs on the legacy default stream (see cuda_device.h).
const cudaStream_t kStream = nullptr;

CuTensor Cu(const Tensor& t) {
  const StridedView v = t.strided_view();
  CuTensor c;
  c.data = v.data;
  c.dtype = static_cast<int>(v.dtype);
  c.ndim = v.ndim;
  for (int i = 0; i < v.ndim; ++i) {
    c.shape[i] = v.shape[i];
    c.strides[i] = v.strides[i];
  }
  return c;
}

absl::Status NeedDims(const Tensor& t, int min_dims, const char* op, const char* name) {
  if (t.dim() < min_dims) {
    return absl::InvalidArgumentError(absl::StrCat("cuda ", op, ": ", name, " needs at least ",
                                                   min_dims, " dims, got ",
                                                   ShapeToString(t.shape())));
  }
  return absl::OkStatus();
}

// Checks that every value of the index tensor `idx` lies in [0, limit), with the CPU backend's
// message. The values are copied to the host, which waits for queued work: the price of
// reporting a bad id or position as a Status before anything is written.
absl::Status CheckRange(const Tensor& idx, int64_t limit, const char* op, const char* what,
                        const char* name) {
  CCTUNE_ASSIGN_OR_RETURN(const std::vector<int64_t> values, idx.ToInt64Vector());
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0 || values[i] >= limit) {
      return absl::OutOfRangeError(absl::StrCat(op, ": ", what, " ", values[i], " at index ", i,
                                                " of ", name, " ", ShapeToString(idx.shape()),
                                                " is outside [0, ", limit, ")"));
    }
  }
  return absl::OkStatus();
}

class CudaBackend final : public OpBackend {
 public:
  DeviceType type() const override { return DeviceType::kCUDA; }

  absl::Status Linear(Tensor& out, const Tensor& x, const Tensor& w, const Tensor* bias) override {
    CCTUNE_RETURN_IF_ERROR(NeedDims(x, 1, "Linear", "x"));
    CCTUNE_RETURN_IF_ERROR(NeedDims(w, 2, "Linear", "w"));
    const int64_t k = x.size(-1), n = w.size(0);
    const Shape lead(x.shape().begin(), x.shape().end() - 1);
    const int64_t m = NumElements(lead);
    if (m == 0 || n == 0) return absl::OkStatus();
    CCTUNE_RETURN_IF_ERROR(UseDevice(out.device().index));
    // x [..., k] -> [m, k] (a view when the strides allow); w [n, k] read as wᵀ [k, n].
    CCTUNE_ASSIGN_OR_RETURN(Tensor x2, x.Reshape({m, k}));
    CCTUNE_ASSIGN_OR_RETURN(Tensor wt, w.Transpose(0, 1));
    // Linear multiplies in the weight's dtype: activations of another dtype are converted.
    auto out2 = out.View({m, n});
    if (out2.ok()) return Gemm(*out2, x2, wt, bias, w.dtype());
    CCTUNE_ASSIGN_OR_RETURN(Tensor tmp, Tensor::Empty({m, n}, out.dtype(), out.device()));
    CCTUNE_RETURN_IF_ERROR(Gemm(tmp, x2, wt, bias, w.dtype()));
    CCTUNE_ASSIGN_OR_RETURN(Tensor tmp_view, tmp.View(out.shape()));
    return out.CopyFrom(tmp_view);
  }

  absl::Status Matmul(Tensor& out, const Tensor& a, const Tensor& b) override {
    CCTUNE_RETURN_IF_ERROR(NeedDims(a, 2, "Matmul", "a"));
    CCTUNE_RETURN_IF_ERROR(NeedDims(b, 2, "Matmul", "b"));
    CCTUNE_RETURN_IF_ERROR(UseDevice(out.device().index));
    const DType operand = a.dtype() == b.dtype() ? a.dtype() : DType::kF32;
    return Gemm(out, a, b, nullptr, operand);
  }

  absl::Status Embedding(Tensor& out, const Tensor& table, const Tensor& ids) override {
    CCTUNE_RETURN_IF_ERROR(NeedDims(table, 2, "Embedding", "table"));
    CCTUNE_RETURN_IF_ERROR(NeedDims(out, 1, "Embedding", "out"));
    CCTUNE_RETURN_IF_ERROR(UseDevice(out.device().index));
    CCTUNE_RETURN_IF_ERROR(CheckRange(ids, table.size(0), "Embedding", "id", "ids"));
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchEmbedding(Cu(out), Cu(table), Cu(ids), kStream));
    return absl::OkStatus();
  }

  absl::Status RmsNorm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) override {
    CCTUNE_RETURN_IF_ERROR(NeedDims(x, 1, "RmsNorm", "x"));
    CCTUNE_RETURN_IF_ERROR(NeedDims(weight, 1, "RmsNorm", "weight"));
    CCTUNE_RETURN_IF_ERROR(UseDevice(out.device().index));
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchRmsNorm(Cu(out), Cu(x), Cu(weight), eps, kStream));
    return absl::OkStatus();
  }

  absl::Status RopeCache(Tensor& cos, Tensor& sin, const Tensor& inv_freq) override {
    CCTUNE_RETURN_IF_ERROR(NeedDims(cos, 2, "RopeCache", "cos"));
    CCTUNE_RETURN_IF_ERROR(UseDevice(cos.device().index));
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchRopeCache(Cu(cos), Cu(sin), Cu(inv_freq), kStream));
    return absl::OkStatus();
  }

  absl::Status Rope(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                    const Tensor& positions, ops::RopePairing pairing) override {
    if (x.dim() != 4 || positions.dim() < 1 || positions.dim() > 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda Rope: x must be [b, s, n, h_d] and positions [b, s] or [s], got ",
                       ShapeToString(x.shape()), " and ", ShapeToString(positions.shape())));
    }
    CCTUNE_RETURN_IF_ERROR(UseDevice(out.device().index));
    CCTUNE_RETURN_IF_ERROR(CheckRange(positions, cos.size(0), "Rope", "position", "positions"));
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchRope(Cu(out), Cu(x), Cu(cos), Cu(sin), Cu(positions),
                                           pairing == ops::RopePairing::kInterleaved, kStream));
    return absl::OkStatus();
  }

  absl::Status SiluMul(Tensor& out, const Tensor& gate, const Tensor& up) override {
    CCTUNE_RETURN_IF_ERROR(UseDevice(out.device().index));
    CCTUNE_CUDA_RETURN_IF_ERROR(
        LaunchBinary(BinaryOp::kSiluMul, Cu(out), Cu(gate), Cu(up), kStream));
    return absl::OkStatus();
  }

  absl::Status Softmax(Tensor& out, const Tensor& x) override {
    CCTUNE_RETURN_IF_ERROR(NeedDims(x, 1, "Softmax", "x"));
    CCTUNE_RETURN_IF_ERROR(UseDevice(out.device().index));
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchSoftmax(Cu(out), Cu(x), kStream));
    return absl::OkStatus();
  }

  absl::Status Attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                         const ops::AttentionOptions& options) override {
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || out.dim() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda Attention: q, k, v and out must be 4-D, got q ",
                       ShapeToString(q.shape()), ", k ", ShapeToString(k.shape())));
    }
    const int64_t b = q.size(0), n_h = q.size(1), s_q = q.size(2), h_d = q.size(3);
    const int64_t n_kv = k.size(1), s_kv = k.size(2);
    if (n_kv == 0 || n_h % n_kv != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda Attention: n_h (", n_h, ") must be a multiple of n_kv (", n_kv, ")"));
    }
    if (h_d > 4096) {
      return absl::UnimplementedError(
          absl::StrCat("cuda Attention: head dim ", h_d, " > 4096 is not supported"));
    }
    if (b * n_h * s_q > INT_MAX) {
      return absl::UnimplementedError(absl::StrCat(
          "cuda Attention: b * n_h * s_q = ", b * n_h * s_q, " rows exceed the grid limit"));
    }
    if (out.numel() == 0) return absl::OkStatus();
    const int index = out.device().index;
    CCTUNE_RETURN_IF_ERROR(UseDevice(index));
    AttentionArgs args;
    args.out = Cu(out);
    args.q = Cu(q);
    args.k = Cu(k);
    args.v = Cu(v);
    Tensor mask;  // keeps an expanded view alive
    if (options.mask != nullptr) {
      CCTUNE_ASSIGN_OR_RETURN(mask, options.mask->Expand({b, s_q, s_kv}));
      args.mask = Cu(mask);
    }
    args.causal = options.causal;
    args.scale = options.scale != 0.f ? options.scale : 1.f / std::sqrt(static_cast<float>(h_d));
    CCTUNE_ASSIGN_OR_RETURN(const int sms, MultiprocessorCount(index));
    const int splits = AttentionNumSplits(args, sms);
    Tensor workspace;
    const size_t ws_bytes = AttentionWorkspaceBytes(args, splits);
    if (ws_bytes > 0) {
      CCTUNE_ASSIGN_OR_RETURN(
          workspace, Tensor::Empty({static_cast<int64_t>(ws_bytes / sizeof(float))}, DType::kF32,
                                   out.device()));
    }
    CCTUNE_CUDA_RETURN_IF_ERROR(
        LaunchAttention(args, splits, ws_bytes > 0 ? workspace.raw_data() : nullptr, kStream));
    return absl::OkStatus();
  }

  absl::Status Add(Tensor& out, const Tensor& a, const Tensor& b) override {
    return Binary(BinaryOp::kAdd, out, a, b);
  }

  absl::Status Mul(Tensor& out, const Tensor& a, const Tensor& b) override {
    return Binary(BinaryOp::kMul, out, a, b);
  }

  absl::Status Scale(Tensor& out, const Tensor& x, float alpha) override {
    CCTUNE_RETURN_IF_ERROR(UseDevice(out.device().index));
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchScale(Cu(out), Cu(x), alpha, kStream));
    return absl::OkStatus();
  }

  absl::Status Argmax(Tensor& out, const Tensor& x) override {
    CCTUNE_RETURN_IF_ERROR(NeedDims(x, 1, "Argmax", "x"));
    CCTUNE_RETURN_IF_ERROR(UseDevice(out.device().index));
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchArgmax(Cu(out), Cu(x), kStream));
    return absl::OkStatus();
  }

  absl::Status TopK(Tensor& values, Tensor& indices, const Tensor& x, int64_t k) override {
    CCTUNE_RETURN_IF_ERROR(NeedDims(x, 1, "TopK", "x"));
    const int64_t v = x.size(-1);
    const int64_t rows = v == 0 ? 0 : x.numel() / v;
    if (rows == 0 || k == 0) return absl::OkStatus();
    if (rows * v > INT_MAX) {
      return absl::UnimplementedError(
          absl::StrCat("cuda TopK: ", rows, " rows of ", v, " elements exceed 2^31 - 1"));
    }
    CCTUNE_RETURN_IF_ERROR(UseDevice(x.device().index));
    size_t bytes = 0;
    CCTUNE_CUDA_RETURN_IF_ERROR(TopKWorkspaceBytes(rows, v, &bytes));
    CCTUNE_ASSIGN_OR_RETURN(Tensor workspace,
                            Tensor::Empty({static_cast<int64_t>(bytes)}, DType::kBool, x.device()));
    CCTUNE_CUDA_RETURN_IF_ERROR(
        LaunchTopK(Cu(values), Cu(indices), Cu(x), k, workspace.raw_data(), bytes, kStream));
    return absl::OkStatus();
  }

  absl::Status Sample(Tensor& out, const Tensor& logits, const ops::SamplingParams& params,
                      Generator& gen) override {
    // Greedy needs no random numbers: the device argmax (first max on ties) avoids copying
    // the logits.
    if (params.temperature == 0.f) return Argmax(out, logits);
    // Otherwise run the CPU sampler on a host copy, so the draws (one gen.Uniform() per row)
    // are exactly the CPU's.
    CCTUNE_ASSIGN_OR_RETURN(OpBackend * cpu, GetOpBackend(DeviceType::kCPU));
    CCTUNE_ASSIGN_OR_RETURN(Tensor host_logits, logits.To(Device::Cpu()));
    CCTUNE_ASSIGN_OR_RETURN(Tensor host_out, Tensor::Empty(out.shape(), out.dtype()));
    CCTUNE_RETURN_IF_ERROR(cpu->Sample(host_out, host_logits, params, gen));
    return out.CopyFrom(host_out);
  }

  // ---- Training: backward of the elementwise, row-wise, embedding, linear and loss ops ----
  // (end of training ops section)

  // ---- Training: attention with log-sum-exp, and its backward ----
  // (end of attention training section)

 private:
  absl::Status Binary(BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b) {
    CCTUNE_RETURN_IF_ERROR(UseDevice(out.device().index));
    CCTUNE_ASSIGN_OR_RETURN(Tensor b_full, b.Expand(a.shape()));  // trailing-aligned broadcast
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchBinary(op, Cu(out), Cu(a), Cu(b_full), kStream));
    return absl::OkStatus();
  }
};

CudaBackend* Instance() {
  static CudaBackend* backend = new CudaBackend();
  return backend;
}

// Registration only: no CUDA call happens before the first op.
const bool kRegistered = [] {
  RegisterOpBackend(Instance());
  return true;
}();

}  // namespace

OpBackend* CudaOpBackend() { return Instance(); }

}  // namespace cuda
}  // namespace cctune
