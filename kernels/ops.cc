#include "kernels/ops.h"

#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/backend.h"

// Every op validates its arguments here, once (defined tensors, one device, ranks, shapes,
// dtypes, scalar ranges), then forwards to the backend of the tensors' device type. Index
// ranges that live in tensor data (Embedding ids, Rope positions) are checked by the backends,
// which read that data anyway. On the meta device an op only validates (there is no data).

namespace cctune {
namespace ops {
namespace {

using absl::StrCat;

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// A named argument; `t` null means an optional argument that was not given.
struct Arg {
  const char* name;
  const Tensor* t;
};

// Every given tensor is defined and all are on one device, which is returned.
absl::StatusOr<Device> CheckArgs(const char* op, std::initializer_list<Arg> args) {
  const Arg* first = nullptr;
  for (const Arg& a : args) {
    if (a.t == nullptr) continue;
    if (!a.t->defined()) return Invalid(StrCat(op, ": ", a.name, " is an undefined tensor"));
    if (first == nullptr) {
      first = &a;
    } else if (a.t->device() != first->t->device()) {
      return Invalid(StrCat(op, ": ", a.name, " is on ", a.t->device().ToString(), " but ",
                            first->name, " is on ", first->t->device().ToString(),
                            " (all tensors of an op must be on one device)"));
    }
  }
  CCTUNE_CHECK(first != nullptr, "no tensor arguments to ", op);
  return first->t->device();
}

std::string Desc(const Tensor& t) {
  return StrCat(ShapeToString(t.shape()), " ", DTypeName(t.dtype()));
}

absl::Status CheckFloat(const char* op, const char* name, const Tensor& t) {
  if (IsFloating(t.dtype())) return absl::OkStatus();
  return Invalid(
      StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()), "; expected f32, bf16 or f16"));
}

absl::Status CheckDType(const char* op, const char* name, const Tensor& t, DType want) {
  if (t.dtype() == want) return absl::OkStatus();
  return Invalid(
      StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()), "; expected ", DTypeName(want)));
}

absl::Status CheckIndex(const char* op, const char* name, const Tensor& t) {
  if (t.dtype() == DType::kI32 || t.dtype() == DType::kI64) return absl::OkStatus();
  return Invalid(
      StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()), "; expected i32 or i64"));
}

// `layout` names the dims, e.g. "[b, n_h, s_q, h_d]".
absl::Status CheckRank(const char* op, const char* name, const Tensor& t, int rank,
                       const char* layout) {
  if (t.dim() == rank) return absl::OkStatus();
  return Invalid(StrCat(op, ": ", name, " has shape ", ShapeToString(t.shape()), " (", t.dim(),
                        "-d); expected ", rank, "-d ", layout));
}

absl::Status CheckShape(const char* op, const char* name, const Tensor& t, const Shape& want) {
  if (t.shape() == want) return absl::OkStatus();
  return Invalid(StrCat(op, ": ", name, " has shape ", ShapeToString(t.shape()), "; expected ",
                        ShapeToString(want)));
}

// Outputs must not be broadcast views: several elements would share one address.
absl::Status CheckWritable(const char* op, const char* name, const Tensor& t) {
  for (int d = 0; d < t.dim(); ++d) {
    if (t.shape()[d] > 1 && t.strides()[d] == 0) {
      return Invalid(StrCat(op, ": ", name, " ", ShapeToString(t.shape()), " has stride 0 in dim ",
                            d, " (a broadcast view cannot be written)"));
    }
  }
  return absl::OkStatus();
}

// A gradient tensor: f32 with the given shape, writable.
absl::Status CheckGrad(const char* op, const char* name, const Tensor& t, const Shape& want) {
  CCTUNE_RETURN_IF_ERROR(CheckDType(op, name, t, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckShape(op, name, t, want));
  return CheckWritable(op, name, t);
}

// Validation is done; run on the device's backend (nothing to run on meta tensors).
template <typename Fn>
absl::Status Dispatch(const Device& device, Fn fn) {
  if (device.is_meta()) return absl::OkStatus();
  CCTUNE_ASSIGN_OR_RETURN(OpBackend * backend, GetOpBackend(device.type));
  return fn(backend);
}

Shape WithLast(Shape s, int64_t last) {
  s.back() = last;
  return s;
}

// Checks that b broadcasts to a's shape (trailing-aligned, each dim equal or 1).
absl::Status CheckBroadcast(const char* op, const Tensor& a, const Tensor& b,
                            const char* a_name = "a", const char* b_name = "b") {
  bool ok = b.dim() <= a.dim();
  for (int i = 1; ok && i <= b.dim(); ++i) {
    const int64_t bs = b.shape()[b.dim() - i], as = a.shape()[a.dim() - i];
    ok = bs == as || bs == 1;
  }
  if (ok) return absl::OkStatus();
  return Invalid(StrCat(op, ": ", b_name, " ", ShapeToString(b.shape()), " does not broadcast to ",
                        a_name, " ", ShapeToString(a.shape())));
}

absl::Status CheckBinary(const char* op, Tensor& out, const Tensor& a, const Tensor& b,
                         Device* device) {
  CCTUNE_ASSIGN_OR_RETURN(*device, CheckArgs(op, {{"out", &out}, {"a", &a}, {"b", &b}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(op, "out", out));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(op, "a", a));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(op, "b", b));
  CCTUNE_RETURN_IF_ERROR(CheckBroadcast(op, a, b));
  CCTUNE_RETURN_IF_ERROR(CheckShape(op, "out", out, a.shape()));
  return CheckWritable(op, "out", out);
}

}  // namespace

// ---- Linear algebra ----

absl::Status Linear(Tensor& out, const Tensor& x, const Tensor& w, const Tensor* bias) {
  constexpr const char* kOp = "Linear";
  CCTUNE_ASSIGN_OR_RETURN(Device device,
                          CheckArgs(kOp, {{"out", &out}, {"x", &x}, {"w", &w}, {"bias", bias}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "x", x));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "w", w));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "out", out));
  if (x.dim() < 1) return Invalid(StrCat(kOp, ": x is 0-d; expected [..., k]"));
  CCTUNE_RETURN_IF_ERROR(CheckRank(kOp, "w", w, 2, "[n, k]"));
  if (x.size(-1) != w.size(1)) {
    return Invalid(StrCat(kOp, ": x ", ShapeToString(x.shape()), " last dim ", x.size(-1), " != w ",
                          ShapeToString(w.shape()), " dim 1"));
  }
  const int64_t n = w.size(0);
  if (bias != nullptr) {
    CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "bias", *bias));
    CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "bias", *bias, {n}));
  }
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, WithLast(x.shape(), n)));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  return Dispatch(device, [&](OpBackend* be) { return be->Linear(out, x, w, bias); });
}

absl::Status Matmul(Tensor& out, const Tensor& a, const Tensor& b) {
  constexpr const char* kOp = "Matmul";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"out", &out}, {"a", &a}, {"b", &b}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "a", a));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "b", b));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "out", out));
  if (a.dim() < 2 || b.dim() != a.dim()) {
    return Invalid(StrCat(kOp, ": a ", ShapeToString(a.shape()), " and b ",
                          ShapeToString(b.shape()),
                          " must have the same rank >= 2 (use Expand to broadcast)"));
  }
  for (int d = 0; d < a.dim() - 2; ++d) {
    if (a.size(d) != b.size(d)) {
      return Invalid(StrCat(kOp, ": batch dim ", d, " differs: a ", ShapeToString(a.shape()),
                            " vs b ", ShapeToString(b.shape()), " (use Expand to broadcast)"));
    }
  }
  if (a.size(-1) != b.size(-2)) {
    return Invalid(StrCat(kOp, ": a ", ShapeToString(a.shape()), " last dim ", a.size(-1), " != b ",
                          ShapeToString(b.shape()), " dim ", b.dim() - 2));
  }
  Shape want = a.shape();
  want.back() = b.size(-1);
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, want));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  return Dispatch(device, [&](OpBackend* be) { return be->Matmul(out, a, b); });
}

// ---- Layers ----

absl::Status Embedding(Tensor& out, const Tensor& table, const Tensor& ids) {
  constexpr const char* kOp = "Embedding";
  CCTUNE_ASSIGN_OR_RETURN(Device device,
                          CheckArgs(kOp, {{"out", &out}, {"table", &table}, {"ids", &ids}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "table", table));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "out", out));
  CCTUNE_RETURN_IF_ERROR(CheckIndex(kOp, "ids", ids));
  CCTUNE_RETURN_IF_ERROR(CheckRank(kOp, "table", table, 2, "[v, d]"));
  Shape want = ids.shape();
  want.push_back(table.size(1));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, want));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  return Dispatch(device, [&](OpBackend* be) { return be->Embedding(out, table, ids); });
}

absl::Status RmsNorm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  constexpr const char* kOp = "RmsNorm";
  CCTUNE_ASSIGN_OR_RETURN(Device device,
                          CheckArgs(kOp, {{"out", &out}, {"x", &x}, {"weight", &weight}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "x", x));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "weight", weight));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "out", out));
  if (x.dim() < 1) return Invalid(StrCat(kOp, ": x is 0-d; expected [..., d]"));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "weight", weight, {x.size(-1)}));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, x.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  if (!(eps >= 0.f) || !std::isfinite(eps)) {
    return Invalid(StrCat(kOp, ": eps (", eps, ") must be finite and >= 0"));
  }
  return Dispatch(device, [&](OpBackend* be) { return be->RmsNorm(out, x, weight, eps); });
}

absl::Status AddRmsNorm(Tensor& sum, Tensor& norm, const Tensor& a, const Tensor& b,
                        const Tensor& weight, float eps) {
  constexpr const char* kOp = "AddRmsNorm";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"sum", &sum},
                                                         {"norm", &norm},
                                                         {"a", &a},
                                                         {"b", &b},
                                                         {"weight", &weight}}));
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"a", &a},
                                {"b", &b}, {"sum", &sum}, {"norm", &norm}, {"weight", &weight}}) {
    CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, name, *t));
  }
  if (a.dim() < 1) return Invalid(StrCat(kOp, ": a is 0-d; expected [..., d]"));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "b", b, a.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "sum", sum, a.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "norm", norm, a.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "weight", weight, {a.size(-1)}));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "sum", sum));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "norm", norm));
  if (!(eps >= 0.f) || !std::isfinite(eps)) {
    return Invalid(StrCat(kOp, ": eps (", eps, ") must be finite and >= 0"));
  }
  return Dispatch(device,
                  [&](OpBackend* be) { return be->AddRmsNorm(sum, norm, a, b, weight, eps); });
}

absl::StatusOr<Tensor> RopeInvFrequencies(int64_t head_dim, double base,
                                          const RopeScaling* scaling) {
  constexpr const char* kOp = "RopeInvFrequencies";
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return Invalid(StrCat(kOp, ": head_dim (", head_dim, ") must be even and positive"));
  }
  if (!(base > 0) || !std::isfinite(base)) {
    return Invalid(StrCat(kOp, ": base (", base, ") must be finite and > 0"));
  }
  if (scaling != nullptr) {
    const RopeScaling& s = *scaling;
    if (!(s.factor > 0) || !(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor) ||
        s.original_max_position_embeddings <= 0) {
      return Invalid(StrCat(kOp, ": scaling needs factor > 0 (", s.factor,
                            "), 0 < low_freq_factor (", s.low_freq_factor, ") < high_freq_factor (",
                            s.high_freq_factor, ") and original_max_position_embeddings > 0 (",
                            s.original_max_position_embeddings, ")"));
    }
  }
  const int64_t half = head_dim / 2;
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({half}, DType::kF32));
  float* theta = t.data<float>();
  // torchtune: 1.0 / (base ** (arange(0, dim, 2)[:dim//2].float() / dim)), all in f32:
  // the exponent is an f32 division, pow(base, e) an f32 pow, and 1.0 / p a reciprocal.
  const float base_f = static_cast<float>(base);
  for (int64_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    theta[i] = 1.0f / std::pow(base_f, e);
  }
  if (scaling == nullptr) return t;
  // torchtune's Llama3ScaledRoPE.apply_scaling, with its PyTorch f32 semantics: python scalars
  // become f32 operands, `c / t` is reciprocal(t) * c, and `1 - t` is f32.
  const RopeScaling& s = *scaling;
  const double old_len = static_cast<double>(s.original_max_position_embeddings);
  const float low_wavelen = static_cast<float>(old_len / s.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_len / s.high_freq_factor);
  const float two_pi = static_cast<float>(2 * M_PI);
  const float factor = static_cast<float>(s.factor);
  const float low_ff = static_cast<float>(s.low_freq_factor);
  const float ff_span = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  const float old_len_f = static_cast<float>(old_len);
  for (int64_t i = 0; i < half; ++i) {
    const float freq = theta[i];
    const float wavelen = (1.0f / freq) * two_pi;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      theta[i] = freq / factor;
    } else {
      const float smooth = ((1.0f / wavelen) * old_len_f - low_ff) / ff_span;
      theta[i] = (1.0f - smooth) * freq / factor + smooth * freq;
    }
  }
  return t;
}

absl::Status RopeCache(Tensor& cos, Tensor& sin, const Tensor& inv_freq) {
  constexpr const char* kOp = "RopeCache";
  CCTUNE_ASSIGN_OR_RETURN(Device device,
                          CheckArgs(kOp, {{"cos", &cos}, {"sin", &sin}, {"inv_freq", &inv_freq}}));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "cos", cos, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "sin", sin, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "inv_freq", inv_freq, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckRank(kOp, "inv_freq", inv_freq, 1, "[h_d/2]"));
  CCTUNE_RETURN_IF_ERROR(CheckRank(kOp, "cos", cos, 2, "[max_seq_len, h_d/2]"));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "cos", cos, {cos.size(0), inv_freq.size(0)}));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "sin", sin, cos.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "cos", cos));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "sin", sin));
  return Dispatch(device, [&](OpBackend* be) { return be->RopeCache(cos, sin, inv_freq); });
}

namespace {
// Shared by Rope and RopeBackward: x [b, s, n, h_d] with h_d even, f32 cos/sin tables
// [max_seq_len, h_d/2], positions [b, s] or [s].
absl::Status CheckRopeArgs(const char* op, const char* x_name, const Tensor& x,
                           const Tensor& cos, const Tensor& sin, const Tensor& positions) {
  CCTUNE_RETURN_IF_ERROR(CheckDType(op, "cos", cos, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckDType(op, "sin", sin, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckIndex(op, "positions", positions));
  CCTUNE_RETURN_IF_ERROR(CheckRank(op, x_name, x, 4, "[b, s, n, h_d]"));
  const int64_t b = x.size(0), s = x.size(1), hd = x.size(3);
  if (hd % 2 != 0) return Invalid(StrCat(op, ": h_d (", hd, ") of ", x_name, " must be even"));
  CCTUNE_RETURN_IF_ERROR(CheckRank(op, "cos", cos, 2, "[max_seq_len, h_d/2]"));
  CCTUNE_RETURN_IF_ERROR(CheckShape(op, "cos", cos, {cos.size(0), hd / 2}));
  CCTUNE_RETURN_IF_ERROR(CheckShape(op, "sin", sin, cos.shape()));
  if (positions.shape() != Shape{b, s} && positions.shape() != Shape{s}) {
    return Invalid(StrCat(op, ": positions has shape ", ShapeToString(positions.shape()),
                          "; expected [b, s] = ", ShapeToString({b, s}), " or [s] = [", s, "]"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status Rope(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                  const Tensor& positions, RopePairing pairing) {
  constexpr const char* kOp = "Rope";
  CCTUNE_ASSIGN_OR_RETURN(
      Device device,
      CheckArgs(
          kOp,
          {{"out", &out}, {"x", &x}, {"cos", &cos}, {"sin", &sin}, {"positions", &positions}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "x", x));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "out", out));
  CCTUNE_RETURN_IF_ERROR(CheckRopeArgs(kOp, "x", x, cos, sin, positions));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, x.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  return Dispatch(device,
                  [&](OpBackend* be) { return be->Rope(out, x, cos, sin, positions, pairing); });
}

absl::Status SiluMul(Tensor& out, const Tensor& gate, const Tensor& up) {
  constexpr const char* kOp = "SiluMul";
  CCTUNE_ASSIGN_OR_RETURN(Device device,
                          CheckArgs(kOp, {{"out", &out}, {"gate", &gate}, {"up", &up}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "gate", gate));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "up", up));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "out", out));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "up", up, gate.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, gate.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  return Dispatch(device, [&](OpBackend* be) { return be->SiluMul(out, gate, up); });
}

absl::Status Softmax(Tensor& out, const Tensor& x) {
  constexpr const char* kOp = "Softmax";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"out", &out}, {"x", &x}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "x", x));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "out", out));
  if (x.dim() < 1) return Invalid(StrCat(kOp, ": x is 0-d; expected [..., d]"));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, x.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  return Dispatch(device, [&](OpBackend* be) { return be->Softmax(out, x); });
}

namespace {

// The checks Attention, AttentionWithLse and AttentionBackward share: q, k, v and the mask
// against each other, and the scale.
absl::Status CheckAttentionInputs(const char* op, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const AttentionOptions& options) {
  CCTUNE_RETURN_IF_ERROR(CheckFloat(op, "q", q));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(op, "k", k));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(op, "v", v));
  CCTUNE_RETURN_IF_ERROR(CheckRank(op, "q", q, 4, "[b, n_h, s_q, h_d]"));
  CCTUNE_RETURN_IF_ERROR(CheckRank(op, "k", k, 4, "[b, n_kv, s_kv, h_d]"));
  const int64_t b = q.size(0), n_h = q.size(1), s_q = q.size(2), hd = q.size(3);
  const int64_t n_kv = k.size(1), s_kv = k.size(2);
  if (k.size(0) != b || k.size(3) != hd) {
    return Invalid(StrCat(op, ": k ", ShapeToString(k.shape()), " does not match q ",
                          ShapeToString(q.shape()), " in b or h_d"));
  }
  CCTUNE_RETURN_IF_ERROR(CheckShape(op, "v", v, k.shape()));
  if (n_kv <= 0 || n_h % n_kv != 0) {
    return Invalid(StrCat(op, ": n_h (", n_h, ") must be a multiple of n_kv (", n_kv, ")"));
  }
  if (options.mask != nullptr) {
    CCTUNE_RETURN_IF_ERROR(CheckDType(op, "mask", *options.mask, DType::kBool));
    CCTUNE_RETURN_IF_ERROR(CheckShape(op, "mask", *options.mask, {b, s_q, s_kv}));
  }
  if (!std::isfinite(options.scale)) {
    return Invalid(StrCat(op, ": scale (", options.scale, ") must be finite"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionOptions& options) {
  constexpr const char* kOp = "Attention";
  CCTUNE_ASSIGN_OR_RETURN(
      Device device,
      CheckArgs(kOp, {{"out", &out}, {"q", &q}, {"k", &k}, {"v", &v}, {"mask", options.mask}}));
  CCTUNE_RETURN_IF_ERROR(CheckAttentionInputs(kOp, q, k, v, options));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "out", out));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, q.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  return Dispatch(device, [&](OpBackend* be) { return be->Attention(out, q, k, v, options); });
}

absl::Status AttentionWithLse(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                              const Tensor& v, const AttentionOptions& options) {
  constexpr const char* kOp = "AttentionWithLse";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"out", &out},
                                                         {"lse", &lse},
                                                         {"q", &q},
                                                         {"k", &k},
                                                         {"v", &v},
                                                         {"mask", options.mask}}));
  CCTUNE_RETURN_IF_ERROR(CheckAttentionInputs(kOp, q, k, v, options));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "out", out));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, q.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "lse", lse, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "lse", lse, {q.size(0), q.size(1), q.size(2)}));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "lse", lse));
  return Dispatch(device,
                  [&](OpBackend* be) { return be->AttentionWithLse(out, lse, q, k, v, options); });
}

// ---- Elementwise ----

absl::Status Add(Tensor& out, const Tensor& a, const Tensor& b) {
  Device device;
  CCTUNE_RETURN_IF_ERROR(CheckBinary("Add", out, a, b, &device));
  return Dispatch(device, [&](OpBackend* be) { return be->Add(out, a, b); });
}

absl::Status Mul(Tensor& out, const Tensor& a, const Tensor& b) {
  Device device;
  CCTUNE_RETURN_IF_ERROR(CheckBinary("Mul", out, a, b, &device));
  return Dispatch(device, [&](OpBackend* be) { return be->Mul(out, a, b); });
}

absl::Status Scale(Tensor& out, const Tensor& x, float alpha) {
  constexpr const char* kOp = "Scale";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"out", &out}, {"x", &x}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "x", x));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "out", out));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, x.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  return Dispatch(device, [&](OpBackend* be) { return be->Scale(out, x, alpha); });
}

absl::Status Dropout(Tensor& out, const Tensor& x, float p, uint64_t seed, uint64_t offset) {
  constexpr const char* kOp = "Dropout";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"out", &out}, {"x", &x}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "x", x));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "out", out));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, x.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  if (!(p >= 0.f && p < 1.f)) {
    return Invalid(StrCat(kOp, ": p (", p, ") must be in [0, 1)"));
  }
  // Uniform() = k · 2^-24 with k the word's top 24 bits, so "Uniform() < p" is exactly
  // "k < ceil(p · 2^24)" (p · 2^24 is exact in fp64): an integer test every backend shares.
  const uint32_t drop_below =
      static_cast<uint32_t>(std::ceil(static_cast<double>(p) * 16777216.0));
  const float scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(p)));
  return Dispatch(device, [&](OpBackend* be) {
    return be->Dropout(out, x, drop_below, scale, seed, offset);
  });
}

absl::Status Cast(Tensor& out, const Tensor& x) {
  constexpr const char* kOp = "Cast";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"out", &out}, {"x", &x}}));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, x.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  if (device.is_meta()) return absl::OkStatus();
  return out.CopyFrom(x);
}

// ---- Selection and sampling ----

absl::Status Argmax(Tensor& out, const Tensor& x) {
  constexpr const char* kOp = "Argmax";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"out", &out}, {"x", &x}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "x", x));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "out", out, DType::kI64));
  if (x.dim() < 1 || x.size(-1) == 0) {
    return Invalid(StrCat(kOp, ": x ", ShapeToString(x.shape()), " has no last dim to reduce"));
  }
  Shape want = x.shape();
  want.pop_back();
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, want));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  return Dispatch(device, [&](OpBackend* be) { return be->Argmax(out, x); });
}

absl::Status TopK(Tensor& values, Tensor& indices, const Tensor& x, int64_t k) {
  constexpr const char* kOp = "TopK";
  CCTUNE_ASSIGN_OR_RETURN(Device device,
                          CheckArgs(kOp, {{"values", &values}, {"indices", &indices}, {"x", &x}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "x", x));
  if (x.dim() < 1) return Invalid(StrCat(kOp, ": x is 0-d; expected [..., v]"));
  const int64_t v = x.size(-1);
  if (k < 1 || k > v) {
    return Invalid(
        StrCat(kOp, ": k (", k, ") must be in [1, v = ", v, "] for x ", ShapeToString(x.shape())));
  }
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "values", values, x.dtype()));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "indices", indices, DType::kI64));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "values", values, WithLast(x.shape(), k)));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "indices", indices, WithLast(x.shape(), k)));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "values", values));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "indices", indices));
  return Dispatch(device, [&](OpBackend* be) { return be->TopK(values, indices, x, k); });
}

absl::Status Sample(Tensor& out, const Tensor& logits, const SamplingParams& params,
                    Generator& gen) {
  constexpr const char* kOp = "Sample";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"out", &out}, {"logits", &logits}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "logits", logits));
  CCTUNE_RETURN_IF_ERROR(CheckRank(kOp, "logits", logits, 2, "[b, v]"));
  if (logits.size(1) == 0) return Invalid(StrCat(kOp, ": logits [", logits.size(0), ", 0]"));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "out", out, DType::kI64));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", out, {logits.size(0)}));
  CCTUNE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  if (!(params.temperature >= 0.f) || !std::isfinite(params.temperature)) {
    return Invalid(StrCat(kOp, ": temperature (", params.temperature, ") must be finite and >= 0"));
  }
  if (params.top_k < 0) return Invalid(StrCat(kOp, ": top_k (", params.top_k, ") must be >= 0"));
  if (!(params.top_p > 0.f && params.top_p <= 1.f)) {
    return Invalid(StrCat(kOp, ": top_p (", params.top_p, ") must be in (0, 1]"));
  }
  return Dispatch(device, [&](OpBackend* be) { return be->Sample(out, logits, params, gen); });
}

// ---- Cross-entropy ----

namespace {

absl::Status CheckLogitsTargets(const char* op, const Tensor& logits, const Tensor& targets) {
  CCTUNE_RETURN_IF_ERROR(CheckFloat(op, "logits", logits));
  CCTUNE_RETURN_IF_ERROR(CheckRank(op, "logits", logits, 2, "[n, v]"));
  if (logits.size(1) == 0) {
    return Invalid(StrCat(op, ": logits ", ShapeToString(logits.shape()), " has no classes"));
  }
  CCTUNE_RETURN_IF_ERROR(CheckIndex(op, "targets", targets));
  return CheckShape(op, "targets", targets, {logits.size(0)});
}

}  // namespace

absl::Status CrossEntropyForward(Tensor& loss_sum, Tensor& num_valid, Tensor* row_loss,
                                 const Tensor& logits, const Tensor& targets,
                                 int64_t ignore_index) {
  constexpr const char* kOp = "CrossEntropyForward";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"loss_sum", &loss_sum},
                                                         {"num_valid", &num_valid},
                                                         {"row_loss", row_loss},
                                                         {"logits", &logits},
                                                         {"targets", &targets}}));
  CCTUNE_RETURN_IF_ERROR(CheckLogitsTargets(kOp, logits, targets));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "loss_sum", loss_sum, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "loss_sum", loss_sum, {}));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "num_valid", num_valid, DType::kI64));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "num_valid", num_valid, {}));
  if (row_loss != nullptr) {
    CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "row_loss", *row_loss, {logits.size(0)}));
  }
  return Dispatch(device, [&](OpBackend* be) {
    return be->CrossEntropyForward(loss_sum, num_valid, row_loss, logits, targets, ignore_index);
  });
}

absl::Status CrossEntropyBackward(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                  float scale, int64_t ignore_index) {
  constexpr const char* kOp = "CrossEntropyBackward";
  CCTUNE_ASSIGN_OR_RETURN(
      Device device,
      CheckArgs(kOp, {{"dlogits", &dlogits}, {"logits", &logits}, {"targets", &targets}}));
  CCTUNE_RETURN_IF_ERROR(CheckLogitsTargets(kOp, logits, targets));
  CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dlogits", dlogits, logits.shape()));
  if (!std::isfinite(scale)) {
    return Invalid(StrCat(kOp, ": scale (", scale, ") must be finite"));
  }
  return Dispatch(device, [&](OpBackend* be) {
    return be->CrossEntropyBackward(dlogits, logits, targets, scale, ignore_index);
  });
}

// ---- Backward ----

absl::Status LinearBackward(Tensor* dx, Tensor* dw, Tensor* dbias, const Tensor& dy,
                            const Tensor& x, const Tensor& w) {
  constexpr const char* kOp = "LinearBackward";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"dx", dx},
                                                         {"dw", dw},
                                                         {"dbias", dbias},
                                                         {"dy", &dy},
                                                         {"x", &x},
                                                         {"w", &w}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "x", x));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "w", w));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "dy", dy, DType::kF32));
  if (x.dim() < 1) return Invalid(StrCat(kOp, ": x is 0-d; expected [..., k]"));
  CCTUNE_RETURN_IF_ERROR(CheckRank(kOp, "w", w, 2, "[n, k]"));
  if (x.size(-1) != w.size(1)) {
    return Invalid(StrCat(kOp, ": x ", ShapeToString(x.shape()), " last dim ", x.size(-1),
                          " != w ", ShapeToString(w.shape()), " dim 1"));
  }
  const int64_t n = w.size(0);
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "dy", dy, WithLast(x.shape(), n)));
  if (dx != nullptr) CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dx", *dx, x.shape()));
  if (dw != nullptr) CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dw", *dw, w.shape()));
  if (dbias != nullptr) CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dbias", *dbias, {n}));
  if (dx == nullptr && dw == nullptr && dbias == nullptr) return absl::OkStatus();
  return Dispatch(device,
                  [&](OpBackend* be) { return be->LinearBackward(dx, dw, dbias, dy, x, w); });
}

absl::Status EmbeddingBackward(Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  constexpr const char* kOp = "EmbeddingBackward";
  CCTUNE_ASSIGN_OR_RETURN(Device device,
                          CheckArgs(kOp, {{"dtable", &dtable}, {"dy", &dy}, {"ids", &ids}}));
  CCTUNE_RETURN_IF_ERROR(CheckIndex(kOp, "ids", ids));
  CCTUNE_RETURN_IF_ERROR(CheckRank(kOp, "dtable", dtable, 2, "[v, d]"));
  CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dtable", dtable, dtable.shape()));
  Shape want = ids.shape();
  want.push_back(dtable.size(1));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "dy", dy, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "dy", dy, want));
  return Dispatch(device, [&](OpBackend* be) { return be->EmbeddingBackward(dtable, dy, ids); });
}

absl::Status RmsNormBackward(Tensor& dx, Tensor* dweight, const Tensor& dy, const Tensor& x,
                             const Tensor& weight, float eps) {
  constexpr const char* kOp = "RmsNormBackward";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"dx", &dx},
                                                         {"dweight", dweight},
                                                         {"dy", &dy},
                                                         {"x", &x},
                                                         {"weight", &weight}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "x", x));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "weight", weight));
  if (x.dim() < 1) return Invalid(StrCat(kOp, ": x is 0-d; expected [..., d]"));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "weight", weight, {x.size(-1)}));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "dy", dy, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "dy", dy, x.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dx", dx, x.shape()));
  if (dweight != nullptr) {
    CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dweight", *dweight, weight.shape()));
  }
  if (!(eps >= 0.f) || !std::isfinite(eps)) {
    return Invalid(StrCat(kOp, ": eps (", eps, ") must be finite and >= 0"));
  }
  return Dispatch(device, [&](OpBackend* be) {
    return be->RmsNormBackward(dx, dweight, dy, x, weight, eps);
  });
}

absl::Status RopeBackward(Tensor& dx, const Tensor& dy, const Tensor& cos, const Tensor& sin,
                          const Tensor& positions, RopePairing pairing) {
  constexpr const char* kOp = "RopeBackward";
  CCTUNE_ASSIGN_OR_RETURN(
      Device device,
      CheckArgs(
          kOp,
          {{"dx", &dx}, {"dy", &dy}, {"cos", &cos}, {"sin", &sin}, {"positions", &positions}}));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "dy", dy, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckRopeArgs(kOp, "dy", dy, cos, sin, positions));
  CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dx", dx, dy.shape()));
  return Dispatch(device, [&](OpBackend* be) {
    return be->RopeBackward(dx, dy, cos, sin, positions, pairing);
  });
}

absl::Status SiluMulBackward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate,
                             const Tensor& up) {
  constexpr const char* kOp = "SiluMulBackward";
  CCTUNE_ASSIGN_OR_RETURN(
      Device device,
      CheckArgs(kOp,
                {{"dgate", &dgate}, {"dup", &dup}, {"dy", &dy}, {"gate", &gate}, {"up", &up}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "gate", gate));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "up", up));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "up", up, gate.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "dy", dy, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "dy", dy, gate.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dgate", dgate, gate.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dup", dup, gate.shape()));
  return Dispatch(device,
                  [&](OpBackend* be) { return be->SiluMulBackward(dgate, dup, dy, gate, up); });
}

absl::Status SoftmaxBackward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  constexpr const char* kOp = "SoftmaxBackward";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"dx", &dx}, {"dy", &dy}, {"y", &y}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "y", y));
  if (y.dim() < 1) return Invalid(StrCat(kOp, ": y is 0-d; expected [..., d]"));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "dy", dy, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "dy", dy, y.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dx", dx, y.shape()));
  return Dispatch(device, [&](OpBackend* be) { return be->SoftmaxBackward(dx, dy, y); });
}

absl::Status AddBackward(Tensor* da, Tensor* db, const Tensor& dy) {
  constexpr const char* kOp = "AddBackward";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"da", da}, {"db", db}, {"dy", &dy}}));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "dy", dy, DType::kF32));
  if (da != nullptr) CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "da", *da, dy.shape()));
  if (db != nullptr) {
    CCTUNE_RETURN_IF_ERROR(CheckBroadcast(kOp, dy, *db, "dy", "db"));
    CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "db", *db, db->shape()));
  }
  if (da == nullptr && db == nullptr) return absl::OkStatus();
  return Dispatch(device, [&](OpBackend* be) { return be->AddBackward(da, db, dy); });
}

absl::Status MulBackward(Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a,
                         const Tensor& b) {
  constexpr const char* kOp = "MulBackward";
  CCTUNE_ASSIGN_OR_RETURN(
      Device device,
      CheckArgs(kOp, {{"da", da}, {"db", db}, {"dy", &dy}, {"a", &a}, {"b", &b}}));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "a", a));
  CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "b", b));
  CCTUNE_RETURN_IF_ERROR(CheckBroadcast(kOp, a, b));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "dy", dy, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "dy", dy, a.shape()));
  if (da != nullptr) CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "da", *da, a.shape()));
  if (db != nullptr) CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "db", *db, b.shape()));
  if (da == nullptr && db == nullptr) return absl::OkStatus();
  return Dispatch(device, [&](OpBackend* be) { return be->MulBackward(da, db, dy, a, b); });
}

absl::Status AttentionBackward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dy,
                               const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor* out, const Tensor* lse,
                               const AttentionOptions& options) {
  constexpr const char* kOp = "AttentionBackward";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"dq", &dq},
                                                         {"dk", &dk},
                                                         {"dv", &dv},
                                                         {"dy", &dy},
                                                         {"q", &q},
                                                         {"k", &k},
                                                         {"v", &v},
                                                         {"out", out},
                                                         {"lse", lse},
                                                         {"mask", options.mask}}));
  CCTUNE_RETURN_IF_ERROR(CheckAttentionInputs(kOp, q, k, v, options));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "dy", dy, DType::kF32));
  CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "dy", dy, q.shape()));
  if (out != nullptr) {
    CCTUNE_RETURN_IF_ERROR(CheckFloat(kOp, "out", *out));
    CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "out", *out, q.shape()));
  }
  if (lse != nullptr) {
    CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "lse", *lse, DType::kF32));
    CCTUNE_RETURN_IF_ERROR(CheckShape(kOp, "lse", *lse, {q.size(0), q.size(1), q.size(2)}));
  }
  CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dq", dq, q.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dk", dk, k.shape()));
  CCTUNE_RETURN_IF_ERROR(CheckGrad(kOp, "dv", dv, v.shape()));
  return Dispatch(device, [&](OpBackend* be) {
    return be->AttentionBackward(dq, dk, dv, dy, q, k, v, out, lse, options);
  });
}

// ---- Optimizer updates ----

namespace {

// A finite hyperparameter that satisfies `ok`, else InvalidArgument naming it and its value.
absl::Status CheckHyper(const char* op, const char* key, double v, bool ok,
                        const char* requirement) {
  if (ok && std::isfinite(v)) return absl::OkStatus();
  return Invalid(StrCat(op, ": ", key, " (", v, ") must be ", requirement));
}

// Whether the memory of a and b (same storage) overlaps.
bool Overlap(const Tensor& a, const Tensor& b) {
  if (!a.SharesStorageWith(b) || a.numel() == 0 || b.numel() == 0) return false;
  const int64_t a0 = a.offset() * static_cast<int64_t>(DTypeSize(a.dtype()));
  const int64_t b0 = b.offset() * static_cast<int64_t>(DTypeSize(b.dtype()));
  return a0 < b0 + static_cast<int64_t>(b.nbytes()) && b0 < a0 + static_cast<int64_t>(a.nbytes());
}

// The flat buffers of an optimizer update: param (f32, or bf16 with an f32 master), f32
// state and grad, all contiguous with param's element count, and no written tensor
// overlapping another tensor.
absl::Status CheckUpdateBuffers(const char* op, const Tensor& param, const Tensor* master,
                                const std::vector<Arg>& state, const Tensor& grad) {
  if (param.dtype() == DType::kBF16) {
    if (master == nullptr) {
      return Invalid(StrCat(op, ": param is bf16 (", Desc(param), ") but no f32 master is given"));
    }
  } else if (param.dtype() == DType::kF32) {
    if (master != nullptr) {
      return Invalid(StrCat(op, ": param is f32 (", Desc(param),
                            "); a master copy is only for bf16 params"));
    }
  } else {
    return Invalid(
        StrCat(op, ": param has dtype ", DTypeName(param.dtype()), "; expected f32 or bf16"));
  }
  std::vector<Arg> all = {{"param", &param}, {"grad", &grad}};
  if (master != nullptr) all.push_back({"master", master});
  for (const Arg& a : state) all.push_back(a);
  const int64_t n = param.numel();
  for (const Arg& a : all) {
    if (a.t != &param) CCTUNE_RETURN_IF_ERROR(CheckDType(op, a.name, *a.t, DType::kF32));
    if (!a.t->is_contiguous()) {
      return Invalid(StrCat(op, ": ", a.name, " ", Desc(*a.t), " must be contiguous"));
    }
    if (a.t->numel() != n) {
      return Invalid(StrCat(op, ": ", a.name, " has ", a.t->numel(), " elements (",
                            Desc(*a.t), ") but param has ", n));
    }
  }
  // Every tensor but grad is written.
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = i + 1; j < all.size(); ++j) {
      if (Overlap(*all[i].t, *all[j].t)) {
        return Invalid(StrCat(op, ": ", all[i].name, " and ", all[j].name, " overlap"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AdamWUpdate(Tensor& param, Tensor* master, Tensor& exp_avg, Tensor& exp_avg_sq,
                         const Tensor& grad, const AdamWStep& step) {
  constexpr const char* kOp = "AdamWUpdate";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"param", &param},
                                                         {"master", master},
                                                         {"exp_avg", &exp_avg},
                                                         {"exp_avg_sq", &exp_avg_sq},
                                                         {"grad", &grad}}));
  const AdamWStep& o = step;
  CCTUNE_RETURN_IF_ERROR(CheckHyper(kOp, "lr", o.lr, o.lr >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(CheckHyper(kOp, "eps", o.eps, o.eps >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(
      CheckHyper(kOp, "beta1", o.beta1, o.beta1 >= 0 && o.beta1 < 1, "in [0, 1)"));
  CCTUNE_RETURN_IF_ERROR(
      CheckHyper(kOp, "beta2", o.beta2, o.beta2 >= 0 && o.beta2 < 1, "in [0, 1)"));
  CCTUNE_RETURN_IF_ERROR(
      CheckHyper(kOp, "weight_decay", o.weight_decay, o.weight_decay >= 0, ">= 0"));
  if (o.step < 1) return Invalid(StrCat(kOp, ": step (", o.step, ") must be >= 1"));
  CCTUNE_RETURN_IF_ERROR(CheckUpdateBuffers(
      kOp, param, master, {{"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}}, grad));
  // Scalars as torch computes them (Python floats), then used in f32 arithmetic.
  const double lr = o.lr;
  const double t = static_cast<double>(o.step);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(o.beta2, t);
  AdamWScalars s;
  s.decay = static_cast<float>(1.0 - lr * o.weight_decay);
  s.step_size = static_cast<float>(lr / bias_correction1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.w1 = static_cast<float>(1.0 - o.beta1);  // the lerp weight
  s.beta2 = static_cast<float>(o.beta2);
  s.w2 = static_cast<float>(1.0 - o.beta2);
  s.eps = static_cast<float>(o.eps);
  s.lerp_low = s.w1 < 0.5f;
  return Dispatch(device, [&](OpBackend* be) {
    return be->AdamWUpdate(param, master, exp_avg, exp_avg_sq, grad, s);
  });
}

absl::Status SgdUpdate(Tensor& param, Tensor* master, Tensor* momentum_buffer, const Tensor& grad,
                       const SgdStep& step) {
  constexpr const char* kOp = "SgdUpdate";
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"param", &param},
                                                         {"master", master},
                                                         {"momentum_buffer", momentum_buffer},
                                                         {"grad", &grad}}));
  const SgdStep& o = step;
  CCTUNE_RETURN_IF_ERROR(CheckHyper(kOp, "lr", o.lr, o.lr >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(CheckHyper(kOp, "momentum", o.momentum, o.momentum >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(CheckHyper(kOp, "dampening", o.dampening, true, "finite"));
  CCTUNE_RETURN_IF_ERROR(
      CheckHyper(kOp, "weight_decay", o.weight_decay, o.weight_decay >= 0, ">= 0"));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    return Invalid(StrCat(kOp, ": nesterov needs momentum > 0 and dampening == 0 (momentum ",
                          o.momentum, ", dampening ", o.dampening, ")"));
  }
  const bool momentum = o.momentum != 0;
  if (momentum != (momentum_buffer != nullptr)) {
    return Invalid(StrCat(kOp, ": momentum is ", o.momentum, momentum ? " but no" : " but a",
                          " momentum_buffer is given"));
  }
  CCTUNE_RETURN_IF_ERROR(CheckUpdateBuffers(
      kOp, param, master,
      momentum ? std::vector<Arg>{{"momentum_buffer", momentum_buffer}} : std::vector<Arg>{},
      grad));
  SgdScalars s;
  s.lr = static_cast<float>(o.lr);
  s.wd = static_cast<float>(o.weight_decay);
  s.mu = static_cast<float>(o.momentum);
  s.keep = static_cast<float>(1.0 - o.dampening);
  s.decay = o.weight_decay != 0;
  s.momentum = momentum;
  s.first = o.first;
  s.nesterov = o.nesterov;
  return Dispatch(device, [&](OpBackend* be) {
    return be->SgdUpdate(param, master, momentum_buffer, grad, s);
  });
}

absl::Status SquaredNorm(double* sum, const Tensor& x) {
  constexpr const char* kOp = "SquaredNorm";
  if (sum == nullptr) return Invalid(StrCat(kOp, ": sum is null"));
  CCTUNE_ASSIGN_OR_RETURN(Device device, CheckArgs(kOp, {{"x", &x}}));
  CCTUNE_RETURN_IF_ERROR(CheckDType(kOp, "x", x, DType::kF32));
  if (!x.is_contiguous()) return Invalid(StrCat(kOp, ": x ", Desc(x), " must be contiguous"));
  return Dispatch(device, [&](OpBackend* be) { return be->SquaredNorm(sum, x); });
}

}  // namespace ops
}  // namespace cctune
