#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
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

CuTensor Cu(const Tensor& t) { return ToCu(t.strided_view()); }

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

// Decode-shaped Linear (a few rows of x against a row-major weight) through the GEMV kernel;
// false when the layout, dtypes or row count call for cuBLAS. Measured on an H200, 2026-12-04
// (cuda_ops_bench BM_LinearDecode / BM_CublasDecode, [rows, 4096] x [14336, 4096]^T, TB/s of
// weight read, after a warm-up call; device copy 4.22): f32 rows 1 / 2 / 3 / 4 / 6 / 8: kernel
// 3.47 / 3.13 / 2.75 / 2.87 / 2.21 / 1.65, cuBLAS 3.33 / 2.54 / 1.97 / 2.40 / 2.10 / 1.75; bf16
// rows 1: kernel 3.32, cuBLAS 3.35 (from 2 rows cuBLAS holds 3.35, the kernel falls to 2.9). The
// kernel takes bf16 / f16 m = 1 anyway: within 1% there, and the first call of each shape
// through cuBLAS loads its kernels (60-130 ms each, measured), a cost a decode step never pays
// here.
int64_t GemvMaxRows(DType dtype) { return dtype == DType::kF32 ? 6 : 1; }

absl::StatusOr<bool> TryGemv(Tensor& out2, const Tensor& x2, const Tensor& w,
                             const Tensor* bias) {
  const int64_t m = x2.size(0), k = x2.size(1), n = w.size(0);
  if (m > GemvMaxRows(w.dtype()) || x2.dtype() != w.dtype() || !IsFloating(w.dtype()) ||
      !IsFloating(out2.dtype())) {
    return false;
  }
  if ((k > 1 && (x2.stride(1) != 1 || w.stride(1) != 1)) || (n > 1 && out2.stride(1) != 1)) {
    return false;
  }
  if (bias != nullptr && (!IsFloating(bias->dtype()) || (n > 1 && bias->stride(0) != 1))) {
    return false;
  }
  const int64_t ldx = m > 1 ? x2.stride(0) : 0, ldo = m > 1 ? out2.stride(0) : 0;
  const int64_t ldw = n > 1 ? w.stride(0) : 0;
  CCTUNE_CUDA_RETURN_IF_ERROR(LaunchGemv(
      m, n, k, static_cast<int>(w.dtype()), x2.raw_data(), ldx, w.raw_data(), ldw,
      bias != nullptr ? bias->raw_data() : nullptr,
      bias != nullptr ? static_cast<int>(bias->dtype()) : kDtF32, out2.raw_data(),
      static_cast<int>(out2.dtype()), ldo, kStream));
  return true;
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
    if (out2.ok() && k > 0) {
      CCTUNE_ASSIGN_OR_RETURN(const bool done, TryGemv(*out2, x2, w, bias));
      if (done) return absl::OkStatus();
    }
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
    return RunAttention("Attention", out, nullptr, q, k, v, options);
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
  absl::Status CrossEntropyForward(Tensor& loss_sum, Tensor& num_valid, Tensor* row_loss,
                                   const Tensor& logits, const Tensor& targets,
                                   int64_t ignore_index) override {
    CCTUNE_RETURN_IF_ERROR(UseDevice(logits.device().index));
    CCTUNE_RETURN_IF_ERROR(
        CheckTargets("CrossEntropyForward", targets, logits.size(1), ignore_index));
    const int64_t n = logits.size(0);
    Tensor scratch;  // each row's loss, when the caller does not want them
    if (row_loss == nullptr && n > 0) {
      CCTUNE_ASSIGN_OR_RETURN(scratch, Tensor::Empty({n}, DType::kF32, logits.device()));
    }
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchCrossEntropyForward(
        Cu(loss_sum), Cu(num_valid), row_loss != nullptr ? Cu(*row_loss) : CuTensor(), Cu(logits),
        Cu(targets), ignore_index, scratch.defined() ? scratch.data<float>() : nullptr, kStream));
    return absl::OkStatus();
  }

  absl::Status CrossEntropyBackward(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                    float scale, int64_t ignore_index) override {
    CCTUNE_RETURN_IF_ERROR(UseDevice(logits.device().index));
    CCTUNE_RETURN_IF_ERROR(
        CheckTargets("CrossEntropyBackward", targets, logits.size(1), ignore_index));
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchCrossEntropyBackward(Cu(dlogits), Cu(logits), Cu(targets),
                                                           scale, ignore_index, kStream));
    return absl::OkStatus();
  }

  absl::Status LinearBackward(Tensor* dx, Tensor* dw, Tensor* dbias, const Tensor& dy,
                              const Tensor& x, const Tensor& w) override {
    CCTUNE_RETURN_IF_ERROR(NeedDims(x, 1, "LinearBackward", "x"));
    CCTUNE_RETURN_IF_ERROR(NeedDims(w, 2, "LinearBackward", "w"));
    const int64_t k = x.size(-1), n = w.size(0);
    const int64_t m = NumElements(Shape(x.shape().begin(), x.shape().end() - 1));
    if (m == 0 || n == 0) return absl::OkStatus();
    CCTUNE_RETURN_IF_ERROR(UseDevice(dy.device().index));
    if (dbias != nullptr) {  // dbias [n] += dy summed over its rows, in a fixed order
      CCTUNE_ASSIGN_OR_RETURN(Tensor db, dbias->Expand(dy.shape()));
      CCTUNE_CUDA_RETURN_IF_ERROR(LaunchSumReduce(Cu(db), Cu(dy), kStream));
    }
    if (k == 0) return absl::OkStatus();
    CCTUNE_ASSIGN_OR_RETURN(Tensor dy2, dy.Reshape({m, n}));
    // The GEMMs run in f32 (dy and the gradients are f32); a bf16/f16 operand is converted
    // to f32 in slices of at most kConvertFloats elements, which bounds the scratch (an f32
    // copy of a 128k-vocabulary output projection would be gigabytes).
    constexpr int64_t kConvertFloats = int64_t{1} << 25;
    if (dx != nullptr) {  // dx [m, k] += dy [m, n] · w [n, k], over slices of n
      Tensor dx2;
      auto dx_view = dx->View({m, k});
      const bool via_tmp = !dx_view.ok();
      if (via_tmp) {
        CCTUNE_ASSIGN_OR_RETURN(dx2, Tensor::Zeros({m, k}, DType::kF32, dx->device()));
      } else {
        dx2 = *std::move(dx_view);
      }
      const int64_t step =
          w.dtype() == DType::kF32 ? n : std::clamp<int64_t>(kConvertFloats / k, 1, n);
      for (int64_t n0 = 0; n0 < n; n0 += step) {
        const int64_t nb = std::min(step, n - n0);
        CCTUNE_ASSIGN_OR_RETURN(Tensor g, dy2.Narrow(1, n0, nb));
        CCTUNE_ASSIGN_OR_RETURN(Tensor ws, w.Narrow(0, n0, nb));
        CCTUNE_RETURN_IF_ERROR(GemmAccumulate(dx2, g, ws, DType::kF32));
      }
      if (via_tmp) {
        CCTUNE_ASSIGN_OR_RETURN(Tensor t, dx2.View(dx->shape()));
        CCTUNE_CUDA_RETURN_IF_ERROR(LaunchAccumulate(Cu(*dx), Cu(t), CuTensor(), kStream));
      }
    }
    if (dw != nullptr) {  // dw [n, k] += dyᵀ [n, m] · x [m, k], over slices of m
      CCTUNE_ASSIGN_OR_RETURN(Tensor x2, x.Reshape({m, k}));
      CCTUNE_ASSIGN_OR_RETURN(Tensor dyt, dy2.Transpose(0, 1));
      const int64_t step =
          x.dtype() == DType::kF32 ? m : std::clamp<int64_t>(kConvertFloats / k, 1, m);
      for (int64_t m0 = 0; m0 < m; m0 += step) {
        const int64_t mb = std::min(step, m - m0);
        CCTUNE_ASSIGN_OR_RETURN(Tensor g, dyt.Narrow(1, m0, mb));
        CCTUNE_ASSIGN_OR_RETURN(Tensor xs, x2.Narrow(0, m0, mb));
        CCTUNE_RETURN_IF_ERROR(GemmAccumulate(*dw, g, xs, DType::kF32));
      }
    }
    return absl::OkStatus();
  }

  absl::Status EmbeddingBackward(Tensor& dtable, const Tensor& dy, const Tensor& ids) override {
    const int64_t v = dtable.size(0), d = dtable.size(1), n = ids.numel();
    CCTUNE_RETURN_IF_ERROR(UseDevice(dtable.device().index));
    // The ids come to the host (for the range check anyway), where a stable sort groups the
    // indices by id: each group's rows of dy are then summed in index order by one thread per
    // column and added to its table row once, with no atomics (as the CPU backend does).
    CCTUNE_ASSIGN_OR_RETURN(const std::vector<int64_t> id, ids.ToInt64Vector());
    for (int64_t i = 0; i < n; ++i) {
      if (id[i] < 0 || id[i] >= v) {
        return absl::OutOfRangeError(absl::StrCat("EmbeddingBackward: id ", id[i], " at index ", i,
                                                  " of ids ", ShapeToString(ids.shape()),
                                                  " is outside [0, ", v, ")"));
      }
    }
    if (n == 0 || d == 0) return absl::OkStatus();
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return id[a] < id[b]; });
    // Packed as [order (n) | starts (groups + 1) | rows (groups)].
    std::vector<int64_t> starts, rows;
    for (int64_t i = 0; i < n; ++i) {
      if (i == 0 || id[order[i]] != id[order[i - 1]]) {
        starts.push_back(i);
        rows.push_back(id[order[i]]);
      }
    }
    const int64_t groups = static_cast<int64_t>(rows.size());
    starts.push_back(n);
    std::vector<int64_t> packed = std::move(order);
    packed.insert(packed.end(), starts.begin(), starts.end());
    packed.insert(packed.end(), rows.begin(), rows.end());
    CCTUNE_ASSIGN_OR_RETURN(Tensor host,
                            Tensor::FromVector(packed, {static_cast<int64_t>(packed.size())}));
    CCTUNE_ASSIGN_OR_RETURN(Tensor dev, host.To(dtable.device()));
    const int64_t* p = dev.data<int64_t>();
    CCTUNE_CUDA_RETURN_IF_ERROR(
        LaunchEmbeddingBackward(Cu(dtable), Cu(dy), p, p + n, p + n + groups + 1, groups, kStream));
    return absl::OkStatus();
  }

  absl::Status RmsNormBackward(Tensor& dx, Tensor* dweight, const Tensor& dy, const Tensor& x,
                               const Tensor& weight, float eps) override {
    CCTUNE_RETURN_IF_ERROR(NeedDims(x, 1, "RmsNormBackward", "x"));
    if (x.numel() == 0) return absl::OkStatus();
    CCTUNE_RETURN_IF_ERROR(UseDevice(dx.device().index));
    Tensor scratch;  // per-chunk partial sums of dweight
    if (dweight != nullptr) {
      const int64_t floats = RmsNormBackwardScratchFloats(Cu(x));
      CCTUNE_ASSIGN_OR_RETURN(
          scratch, Tensor::Empty({std::max<int64_t>(floats, 1)}, DType::kF32, dx.device()));
    }
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchRmsNormBackward(
        Cu(dx), dweight != nullptr ? Cu(*dweight) : CuTensor(), Cu(dy), Cu(x), Cu(weight), eps,
        scratch.defined() ? scratch.data<float>() : nullptr, kStream));
    return absl::OkStatus();
  }

  absl::Status RopeBackward(Tensor& dx, const Tensor& dy, const Tensor& cos, const Tensor& sin,
                            const Tensor& positions, ops::RopePairing pairing) override {
    if (dy.dim() != 4 || positions.dim() < 1 || positions.dim() > 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda RopeBackward: dy must be [b, s, n, h_d] and positions [b, s] or [s], got ",
          ShapeToString(dy.shape()), " and ", ShapeToString(positions.shape())));
    }
    CCTUNE_RETURN_IF_ERROR(UseDevice(dx.device().index));
    CCTUNE_RETURN_IF_ERROR(
        CheckRange(positions, cos.size(0), "RopeBackward", "position", "positions"));
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchRopeBackward(Cu(dx), Cu(dy), Cu(cos), Cu(sin), Cu(positions),
                                                   pairing == ops::RopePairing::kInterleaved,
                                                   kStream));
    return absl::OkStatus();
  }

  absl::Status SiluMulBackward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate,
                               const Tensor& up) override {
    CCTUNE_RETURN_IF_ERROR(UseDevice(dy.device().index));
    CCTUNE_CUDA_RETURN_IF_ERROR(
        LaunchSiluMulBackward(Cu(dgate), Cu(dup), Cu(dy), Cu(gate), Cu(up), kStream));
    return absl::OkStatus();
  }

  absl::Status SoftmaxBackward(Tensor& dx, const Tensor& dy, const Tensor& y) override {
    CCTUNE_RETURN_IF_ERROR(NeedDims(y, 1, "SoftmaxBackward", "y"));
    CCTUNE_RETURN_IF_ERROR(UseDevice(dx.device().index));
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchSoftmaxBackward(Cu(dx), Cu(dy), Cu(y), kStream));
    return absl::OkStatus();
  }

  absl::Status AddBackward(Tensor* da, Tensor* db, const Tensor& dy) override {
    CCTUNE_RETURN_IF_ERROR(UseDevice(dy.device().index));
    if (da != nullptr) {
      CCTUNE_CUDA_RETURN_IF_ERROR(LaunchAccumulate(Cu(*da), Cu(dy), CuTensor(), kStream));
    }
    if (db != nullptr) {  // summed over the broadcast dims, in a fixed order
      CCTUNE_ASSIGN_OR_RETURN(Tensor dbe, db->Expand(dy.shape()));
      CCTUNE_CUDA_RETURN_IF_ERROR(LaunchSumReduce(Cu(dbe), Cu(dy), kStream));
    }
    return absl::OkStatus();
  }

  absl::Status MulBackward(Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a,
                           const Tensor& b) override {
    CCTUNE_RETURN_IF_ERROR(UseDevice(dy.device().index));
    if (da != nullptr) {  // da += dy · b (b broadcast)
      CCTUNE_ASSIGN_OR_RETURN(Tensor bb, b.Expand(a.shape()));
      CCTUNE_CUDA_RETURN_IF_ERROR(LaunchAccumulate(Cu(*da), Cu(dy), Cu(bb), kStream));
    }
    if (db != nullptr) {  // db += (dy · a) summed over the broadcast dims
      CCTUNE_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(dy.shape(), DType::kF32, dy.device()));
      CCTUNE_CUDA_RETURN_IF_ERROR(LaunchBinary(BinaryOp::kMul, Cu(t), Cu(dy), Cu(a), kStream));
      CCTUNE_ASSIGN_OR_RETURN(Tensor dbe, db->Expand(dy.shape()));
      CCTUNE_CUDA_RETURN_IF_ERROR(LaunchSumReduce(Cu(dbe), Cu(t), kStream));
    }
    return absl::OkStatus();
  }

  // Every target of `targets` in [0, v) or equal to ignore_index, with the CPU backend's
  // message. Copies the targets to the host (waiting for queued work), so a bad one is a
  // Status before anything is written.
  static absl::Status CheckTargets(const char* op, const Tensor& targets, int64_t v,
                                   int64_t ignore_index) {
    CCTUNE_ASSIGN_OR_RETURN(const std::vector<int64_t> t, targets.ToInt64Vector());
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] != ignore_index && (t[i] < 0 || t[i] >= v)) {
        return absl::OutOfRangeError(
            absl::StrCat(op, ": target ", t[i], " of row ", i, " is outside [0, ", v,
                         ") and is not ignore_index (", ignore_index, ")"));
      }
    }
    return absl::OkStatus();
  }
  // (end of training ops section)

  // ---- Training: attention with log-sum-exp, and its backward ----
  // The forward kernel (also the inference path): out, and lse when it is not null.
  absl::Status RunAttention(const char* op, Tensor& out, Tensor* lse, const Tensor& q,
                            const Tensor& k, const Tensor& v,
                            const ops::AttentionOptions& options) {
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || out.dim() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda ", op, ": q, k, v and out must be 4-D, got q ",
                       ShapeToString(q.shape()), ", k ", ShapeToString(k.shape())));
    }
    const int64_t b = q.size(0), n_h = q.size(1), s_q = q.size(2), h_d = q.size(3);
    const int64_t n_kv = k.size(1), s_kv = k.size(2);
    if (n_kv == 0 || n_h % n_kv != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda ", op, ": n_h (", n_h, ") must be a multiple of n_kv (", n_kv, ")"));
    }
    if (h_d > 4096) {
      return absl::UnimplementedError(
          absl::StrCat("cuda ", op, ": head dim ", h_d, " > 4096 is not supported"));
    }
    if (b * n_h * s_q > INT_MAX) {
      return absl::UnimplementedError(absl::StrCat(
          "cuda ", op, ": b * n_h * s_q = ", b * n_h * s_q, " rows exceed the grid limit"));
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
    if (lse != nullptr) args.lse = Cu(*lse);
    args.scale = options.scale != 0.f ? options.scale : 1.f / std::sqrt(static_cast<float>(h_d));
    if (lse != nullptr && h_d <= kAttentionBackwardMaxHeadDim && b <= 65535 && n_h <= 65535) {
      // Training (s_q usually long): the tiled kernel reads each K/V tile once per query tile.
      CCTUNE_CUDA_RETURN_IF_ERROR(LaunchAttentionForwardLse(args, kStream));
      return absl::OkStatus();
    }
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

  absl::Status AttentionWithLse(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                                const Tensor& v, const ops::AttentionOptions& options) override {
    return RunAttention("AttentionWithLse", out, &lse, q, k, v, options);
  }

  absl::Status AttentionBackward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dy,
                                 const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor* out, const Tensor* lse,
                                 const ops::AttentionOptions& options) override {
    constexpr const char* kOp = "AttentionBackward";
    if (q.dim() != 4 || k.dim() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda ", kOp, ": q and k must be 4-D, got q ", ShapeToString(q.shape()),
                       ", k ", ShapeToString(k.shape())));
    }
    const int64_t b = q.size(0), n_h = q.size(1), s_q = q.size(2), h_d = q.size(3);
    const int64_t n_kv = k.size(1), s_kv = k.size(2);
    if (b * n_h * s_q == 0 || s_kv == 0 || h_d == 0) return absl::OkStatus();
    if (n_kv == 0 || n_h % n_kv != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cuda ", kOp, ": n_h (", n_h,
                                                     ") must be a multiple of n_kv (", n_kv, ")"));
    }
    if (h_d > kAttentionBackwardMaxHeadDim) {
      return absl::UnimplementedError(absl::StrCat("cuda ", kOp, ": head dim ", h_d, " > ",
                                                   kAttentionBackwardMaxHeadDim,
                                                   " is not supported"));
    }
    if (b * n_h * s_q > INT_MAX || b > 65535 || n_h > 65535) {
      return absl::UnimplementedError(absl::StrCat("cuda ", kOp, ": b ", b, ", n_h ", n_h,
                                                   ", s_q ", s_q, " exceed the grid limits"));
    }
    CCTUNE_RETURN_IF_ERROR(UseDevice(q.device().index));
    // Without a saved out or lse, one forward pass recomputes both (f32 out).
    Tensor out_tmp, lse_tmp;
    if (out == nullptr || lse == nullptr) {
      CCTUNE_ASSIGN_OR_RETURN(out_tmp, Tensor::Empty(q.shape(), DType::kF32, q.device()));
      CCTUNE_ASSIGN_OR_RETURN(lse_tmp, Tensor::Empty({b, n_h, s_q}, DType::kF32, q.device()));
      CCTUNE_RETURN_IF_ERROR(RunAttention(kOp, out_tmp, &lse_tmp, q, k, v, options));
      if (out == nullptr) out = &out_tmp;
      if (lse == nullptr) lse = &lse_tmp;
    }
    AttentionBackwardArgs args;
    args.dq = Cu(dq);
    args.dk = Cu(dk);
    args.dv = Cu(dv);
    args.dy = Cu(dy);
    args.q = Cu(q);
    args.k = Cu(k);
    args.v = Cu(v);
    args.out = Cu(*out);
    args.lse = Cu(*lse);
    Tensor mask;  // keeps an expanded view alive
    if (options.mask != nullptr) {
      CCTUNE_ASSIGN_OR_RETURN(mask, options.mask->Expand({b, s_q, s_kv}));
      args.mask = Cu(mask);
    }
    args.causal = options.causal;
    args.scale = options.scale != 0.f ? options.scale : 1.f / std::sqrt(static_cast<float>(h_d));
    const size_t ws_bytes = AttentionBackwardWorkspaceBytes(args);
    CCTUNE_ASSIGN_OR_RETURN(
        Tensor workspace,
        Tensor::Empty({static_cast<int64_t>(ws_bytes / sizeof(float))}, DType::kF32, q.device()));
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchAttentionBackward(args, workspace.raw_data(), kStream));
    return absl::OkStatus();
  }

  // (end of attention training section)

  // ---- Dropout (dropout_kernels.cu) ----
  absl::Status Dropout(Tensor& out, const Tensor& x, uint32_t drop_below, float scale,
                       uint64_t seed, uint64_t offset) override {
    CCTUNE_RETURN_IF_ERROR(UseDevice(out.device().index));
    CCTUNE_CUDA_RETURN_IF_ERROR(
        LaunchDropout(Cu(out), Cu(x), drop_below, scale, seed, offset, kStream));
    return absl::OkStatus();
  }
  // (end of dropout section)

  // ---- Training: optimizer updates (optim_kernels.cu) ----
  absl::Status AdamWUpdate(Tensor& param, Tensor* master, Tensor& exp_avg, Tensor& exp_avg_sq,
                           const Tensor& grad, const ops::AdamWScalars& s) override {
    const int64_t n = param.numel();
    if (n == 0) return absl::OkStatus();
    CCTUNE_RETURN_IF_ERROR(UseDevice(param.device().index));
    AdamWArgs a;
    a.decay = s.decay;
    a.step_size = s.step_size;
    a.bc2_sqrt = s.bc2_sqrt;
    a.w1 = s.w1;
    a.beta2 = s.beta2;
    a.w2 = s.w2;
    a.eps = s.eps;
    a.lerp_low = s.lerp_low;
    float* p = master != nullptr ? master->data<float>() : param.data<float>();
    uint16_t* out = master != nullptr ? static_cast<uint16_t*>(param.raw_data()) : nullptr;
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchAdamW(p, out, grad.data<float>(), exp_avg.data<float>(),
                                            exp_avg_sq.data<float>(), n, a, kStream));
    return absl::OkStatus();
  }

  absl::Status SgdUpdate(Tensor& param, Tensor* master, Tensor* momentum_buffer,
                         const Tensor& grad, const ops::SgdScalars& s) override {
    const int64_t n = param.numel();
    if (n == 0) return absl::OkStatus();
    CCTUNE_RETURN_IF_ERROR(UseDevice(param.device().index));
    SgdArgs a;
    a.lr = s.lr;
    a.wd = s.wd;
    a.mu = s.mu;
    a.keep = s.keep;
    a.decay = s.decay;
    a.momentum = s.momentum;
    a.first = s.first;
    a.nesterov = s.nesterov;
    float* p = master != nullptr ? master->data<float>() : param.data<float>();
    uint16_t* out = master != nullptr ? static_cast<uint16_t*>(param.raw_data()) : nullptr;
    float* buf = momentum_buffer != nullptr ? momentum_buffer->data<float>() : nullptr;
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchSgd(p, out, grad.data<float>(), buf, n, a, kStream));
    return absl::OkStatus();
  }

  // Partials and the result live in one device scratch; the 8-byte result is then copied to
  // the host (cudaMemcpy waits for the kernels).
  absl::Status SquaredNorm(double* sum, const Tensor& x) override {
    const int64_t n = x.numel();
    if (n == 0) return absl::OkStatus();
    CCTUNE_RETURN_IF_ERROR(UseDevice(x.device().index));
    const size_t partial_bytes = SquaredNormWorkspaceBytes(n);
    CCTUNE_ASSIGN_OR_RETURN(
        Tensor workspace,
        Tensor::Empty({static_cast<int64_t>(partial_bytes + sizeof(double))}, DType::kBool,
                      x.device()));
    char* base = static_cast<char*>(workspace.raw_data());
    double* result = reinterpret_cast<double*>(base + partial_bytes);  // 8-aligned
    CCTUNE_CUDA_RETURN_IF_ERROR(
        LaunchSquaredNorm(result, x.data<float>(), n, base, partial_bytes, kStream));
    double value = 0;
    CCTUNE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(&value, result, sizeof(double), cudaMemcpyDeviceToHost));
    *sum += value;
    return absl::OkStatus();
  }
  // (end of optimizer updates section)

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
