#include "generation/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {

namespace {

absl::Status CheckPaddingMask(const Tensor& m, const char* op) {
  if (!m.defined() || m.dim() != 2 || m.dtype() != DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": padding_mask must be bool [b, s], got ",
                                                   m.defined() ? DTypeName(m.dtype()) : "undefined",
                                                   " ", ShapeToString(m.shape())));
  }
  return absl::OkStatus();
}

// The padding mask as host bytes [b * s] (1 = real token).
absl::StatusOr<std::vector<uint8_t>> HostMask(const Tensor& m) {
  CCTUNE_ASSIGN_OR_RETURN(Tensor cpu, m.To(Device::Cpu()));
  CCTUNE_ASSIGN_OR_RETURN(cpu, cpu.Contiguous());
  const bool* p = cpu.data<bool>();
  return std::vector<uint8_t>(p, p + cpu.numel());
}

// mask[r, i, j] for queries i in [q0, q0 + sq) and keys j in [0, kv_len), rows of `pad`
// ([b, row_len] bytes, 1 = real token). dst is a contiguous bool [b, sq, kv_len] buffer.
void FillCausalMask(bool* dst, const uint8_t* pad, int64_t b, int64_t row_len, int64_t q0,
                    int64_t sq, int64_t kv_len) {
  for (int64_t r = 0; r < b; ++r) {
    const uint8_t* row = pad + r * row_len;
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t q = q0 + i;
      bool* out = dst + (r * sq + i) * kv_len;
      for (int64_t j = 0; j < kv_len; ++j) {
        out[j] = j == q || (j < q && j < row_len && row[j] != 0);
      }
    }
  }
}

// positions[r, j] = (number of real tokens in row r up to and including j) - 1, or 0 on
// padding.
void FillPositions(int64_t* dst, const uint8_t* pad, int64_t b, int64_t row_len) {
  for (int64_t r = 0; r < b; ++r) {
    int64_t count = 0;
    for (int64_t j = 0; j < row_len; ++j) {
      const bool real = pad[r * row_len + j] != 0;
      count += real ? 1 : 0;
      dst[r * row_len + j] = real ? count - 1 : 0;
    }
  }
}

// Host staging buffers for one forward pass, plus their device copies when the model is not
// on the CPU. Allocated once per shape and reused (decode steps allocate nothing).
class StepInputs {
 public:
  absl::Status Prepare(int64_t b, int64_t sq, int64_t kv_capacity, const Device& device) {
    if (host_tokens_.defined() && host_tokens_.size(1) == sq && host_mask_.size(2) >= kv_capacity) {
      return absl::OkStatus();
    }
    device_ = device;
    CCTUNE_ASSIGN_OR_RETURN(host_tokens_, Tensor::Empty({b, sq}, DType::kI64));
    CCTUNE_ASSIGN_OR_RETURN(host_pos_, Tensor::Empty({b, sq}, DType::kI64));
    CCTUNE_ASSIGN_OR_RETURN(host_mask_, Tensor::Empty({b, sq, kv_capacity}, DType::kBool));
    if (device.is_cpu()) {
      tokens_ = host_tokens_;
      pos_ = host_pos_;
      mask_ = host_mask_;
    } else {
      CCTUNE_ASSIGN_OR_RETURN(tokens_, Tensor::Empty({b, sq}, DType::kI64, device));
      CCTUNE_ASSIGN_OR_RETURN(pos_, Tensor::Empty({b, sq}, DType::kI64, device));
      CCTUNE_ASSIGN_OR_RETURN(mask_, Tensor::Empty({b, sq, kv_capacity}, DType::kBool, device));
    }
    return absl::OkStatus();
  }

  // Fills tokens, positions and the mask for queries [q0, q0 + sq) over keys [0, q0 + sq)
  // from the full rows (`seq`, `pad`, `positions`, each [b, row_len]).
  absl::Status Fill(const std::vector<int64_t>& seq, const std::vector<uint8_t>& pad,
                    const std::vector<int64_t>& positions, int64_t b, int64_t row_len, int64_t q0,
                    int64_t sq) {
    const int64_t kv_len = q0 + sq;
    int64_t* t = host_tokens_.data<int64_t>();
    int64_t* p = host_pos_.data<int64_t>();
    for (int64_t r = 0; r < b; ++r) {
      for (int64_t i = 0; i < sq; ++i) {
        t[r * sq + i] = seq[r * row_len + q0 + i];
        p[r * sq + i] = positions[r * row_len + q0 + i];
      }
    }
    // The mask is written compactly as [b, sq, kv_len] at the start of the buffer.
    CCTUNE_ASSIGN_OR_RETURN(Tensor host_mask, CompactMask(host_mask_, b, sq, kv_len));
    FillCausalMask(host_mask.data<bool>(), pad.data(), b, row_len, q0, sq, kv_len);
    CCTUNE_ASSIGN_OR_RETURN(mask_view_, CompactMask(mask_, b, sq, kv_len));
    if (!device_.is_cpu()) {
      CCTUNE_RETURN_IF_ERROR(tokens_.CopyFrom(host_tokens_));
      CCTUNE_RETURN_IF_ERROR(pos_.CopyFrom(host_pos_));
      CCTUNE_RETURN_IF_ERROR(mask_view_.CopyFrom(host_mask));
    }
    return absl::OkStatus();
  }

  const Tensor& tokens() const { return tokens_; }
  const Tensor& positions() const { return pos_; }
  const Tensor& mask() const { return mask_view_; }

 private:
  // A contiguous [b, sq, kv_len] tensor over the first elements of `buffer`'s storage.
  static absl::StatusOr<Tensor> CompactMask(const Tensor& buffer, int64_t b, int64_t sq,
                                            int64_t kv_len) {
    return Tensor::FromStorage(buffer.storage(), {b, sq, kv_len}, DType::kBool, buffer.offset());
  }

  Device device_ = Device::Cpu();
  Tensor host_tokens_, host_pos_, host_mask_;
  Tensor tokens_, pos_, mask_, mask_view_;
};

// Greedy decoding picked ids[r] for each row of logits [b, v]: an error naming the row and
// the sequence position when that logit is NaN or infinite (the argmax order puts NaN first).
// On the CPU it reads the logits in place (no copy, no allocation: it runs every step).
absl::Status CheckGreedyLogits(const Tensor& logits, const std::vector<int64_t>& ids,
                               int64_t position) {
  for (int64_t r = 0; r < static_cast<int64_t>(ids.size()); ++r) {
    float value;
    if (logits.device().is_cpu() && logits.dtype() == DType::kF32) {
      value = logits.data<float>()[r * logits.stride(0) + ids[r] * logits.stride(1)];
    } else {
      CCTUNE_ASSIGN_OR_RETURN(Tensor row, logits.Select(0, r));
      CCTUNE_ASSIGN_OR_RETURN(Tensor cell, row.Narrow(0, ids[r], 1));
      CCTUNE_ASSIGN_OR_RETURN(std::vector<float> values, cell.ToFloatVector());
      value = values[0];
    }
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Generate: the logits at position ", position, " (row ", r, ") are not finite (",
          value, " at token ", ids[r], "); the weights or the activations hold NaN or "
          "infinity"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> CausalMaskFromPaddingMask(const Tensor& padding_mask,
                                                 int64_t target_seq_len) {
  CCTUNE_RETURN_IF_ERROR(CheckPaddingMask(padding_mask, "CausalMaskFromPaddingMask"));
  const int64_t b = padding_mask.size(0), s = padding_mask.size(1);
  if (target_seq_len <= 0) target_seq_len = s;
  if (target_seq_len < s) {
    return absl::InvalidArgumentError(
        absl::StrCat("CausalMaskFromPaddingMask: target_seq_len (", target_seq_len,
                     ") cannot be shorter than the sequence length of the padding mask (", s, ")"));
  }
  CCTUNE_ASSIGN_OR_RETURN(std::vector<uint8_t> pad, HostMask(padding_mask));
  CCTUNE_ASSIGN_OR_RETURN(Tensor mask, Tensor::Empty({b, s, target_seq_len}, DType::kBool));
  FillCausalMask(mask.data<bool>(), pad.data(), b, s, 0, s, target_seq_len);
  return mask;
}

absl::StatusOr<Tensor> PositionIdsFromPaddingMask(const Tensor& padding_mask) {
  CCTUNE_RETURN_IF_ERROR(CheckPaddingMask(padding_mask, "PositionIdsFromPaddingMask"));
  const int64_t b = padding_mask.size(0), s = padding_mask.size(1);
  CCTUNE_ASSIGN_OR_RETURN(std::vector<uint8_t> pad, HostMask(padding_mask));
  CCTUNE_ASSIGN_OR_RETURN(Tensor pos, Tensor::Empty({b, s}, DType::kI64));
  FillPositions(pos.data<int64_t>(), pad.data(), b, s);
  return pos;
}

absl::StatusOr<Tensor> LeftPad(const std::vector<std::vector<int32_t>>& prompts, int32_t pad_id) {
  if (prompts.empty()) return absl::InvalidArgumentError("LeftPad: no prompts");
  size_t max_len = 0;
  for (size_t r = 0; r < prompts.size(); ++r) {
    if (prompts[r].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("LeftPad: prompt ", r, " is empty"));
    }
    max_len = std::max(max_len, prompts[r].size());
  }
  const int64_t b = static_cast<int64_t>(prompts.size()), s = static_cast<int64_t>(max_len);
  CCTUNE_ASSIGN_OR_RETURN(Tensor out, Tensor::Full({b, s}, pad_id, DType::kI64));
  int64_t* p = out.data<int64_t>();
  for (int64_t r = 0; r < b; ++r) {
    const int64_t offset = s - static_cast<int64_t>(prompts[r].size());
    std::copy(prompts[r].begin(), prompts[r].end(), p + r * s + offset);
  }
  return out;
}

std::string ThreeSignificantDigits(double v) {
  if (!std::isfinite(v)) return v != v ? "nan" : (v > 0 ? "inf" : "-inf");
  if (v == 0) return "0";
  const int e = static_cast<int>(std::floor(std::log10(std::fabs(v))));
  const double scale = std::pow(10.0, e - 2);
  double r = std::round(v / scale) * scale;
  // Rounding can carry into the next power of ten (999.6 -> 1000).
  const int e2 = static_cast<int>(std::floor(std::log10(std::fabs(r))));
  const int decimals = std::max(0, 2 - e2);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, r);
  return buf;
}

absl::StatusOr<GenerateResult> Generate(TransformerDecoder& model, const Tensor& prompt,
                                        const GenerateOptions& options, Generator& gen) {
  const auto start = std::chrono::steady_clock::now();
  auto first_token = start;
  if (options.max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Generate: max_new_tokens (", options.max_new_tokens, ") must be >= 1"));
  }
  if (!prompt.defined() || (prompt.dim() != 1 && prompt.dim() != 2) ||
      (prompt.dtype() != DType::kI32 && prompt.dtype() != DType::kI64) || prompt.numel() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Generate: prompt must be a non-empty i32/i64 [s] or [b, s] tensor, got ",
                     prompt.defined() ? DTypeName(prompt.dtype()) : "undefined", " ",
                     ShapeToString(prompt.shape())));
  }
  const int64_t b = prompt.dim() == 2 ? prompt.size(0) : 1;
  const int64_t s = prompt.size(-1);
  const int64_t n_max = options.max_new_tokens;
  const int64_t v = model.vocab_size();
  if (s > model.max_seq_len() || n_max > model.max_seq_len() - s) {  // s + n_max may overflow
    return absl::InvalidArgumentError(
        absl::StrCat("Generate: prompt length (", s, ") + max_new_tokens (", n_max,
                     ") exceeds the model's max_seq_len (", model.max_seq_len(), ")"));
  }
  const int64_t total = s + n_max;
  for (int32_t id : options.stop_tokens) {
    if (id < 0 || id >= v) {
      return absl::InvalidArgumentError(
          absl::StrCat("Generate: stop token ", id, " is outside the vocabulary [0, ", v, ")"));
    }
  }

  // Rows of length `total`: the prompt, then room for the generated tokens.
  CCTUNE_ASSIGN_OR_RETURN(std::vector<int64_t> prompt_ids, prompt.ToInt64Vector());
  std::vector<int64_t> seq(b * total, options.pad_id);
  std::vector<uint8_t> pad(b * total, 1);
  for (int64_t r = 0; r < b; ++r) {
    int64_t real = 0;
    for (int64_t j = 0; j < s; ++j) {
      const int64_t id = prompt_ids[r * s + j];
      if (id < 0 || id >= v) {
        return absl::InvalidArgumentError(absl::StrCat("Generate: prompt token ", id, " (row ", r,
                                                       ", position ", j,
                                                       ") is outside the vocabulary [0, ", v, ")"));
      }
      seq[r * total + j] = id;
      pad[r * total + j] = id != options.pad_id;
      real += id != options.pad_id;
    }
    if (real == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Generate: prompt row ", r, " is all padding (pad_id ", options.pad_id, ")"));
    }
  }
  std::vector<int64_t> positions(b * total);
  FillPositions(positions.data(), pad.data(), b, total);

  const bool incremental = model.CachesAreSetup();
  if (incremental) {
    const KVCache& cache = *model.layer(0).attn().kv_cache();
    if (cache.batch_size() < b || cache.max_seq_len() < total) {
      return absl::InvalidArgumentError(
          absl::StrCat("Generate: the KV caches hold batch ", cache.batch_size(), " and ",
                       cache.max_seq_len(), " positions, but generation needs batch ", b, " and ",
                       total, " positions (prompt ", s, " + max_new_tokens ", n_max, ")"));
    }
    if (model.CacheSize() > 0) CCTUNE_RETURN_IF_ERROR(model.ResetCaches());
  }

  const Device device = model.tok_embeddings().weight().device();
  GenerateResult result;
  if (options.return_logits) {
    CCTUNE_ASSIGN_OR_RETURN(result.logits, Tensor::Zeros({b, n_max, v}, DType::kF32));
  }
  // Everything a decode step touches is made here or in the first decode step, so that later
  // steps allocate no Storage (generation/decode_allocations_test).
  result.generated.resize(b);
  for (auto& g : result.generated) g.reserve(n_max);
  CCTUNE_ASSIGN_OR_RETURN(Tensor sampled, Tensor::Empty({b}, DType::kI64, device));
  Tensor sampled_host = sampled;  // the sampled ids on the host
  if (!device.is_cpu()) {
    CCTUNE_ASSIGN_OR_RETURN(sampled_host, Tensor::Empty({b}, DType::kI64));
  }
  StepInputs prefill_inputs, decode_inputs;
  Tensor decode_logits;       // [b, 1, v], reused by every incremental step
  Tensor decode_last;         // its [b, v] view
  std::vector<uint8_t> stopped(b, 0), stopped_before(b, 0);
  std::vector<int32_t> step_tokens(b);
  std::vector<int64_t> ids(b);

  int64_t n = 0;
  for (int64_t t = 0; t < n_max; ++t) {
    // Queries [q0, q0 + sq) over keys [0, q0 + sq).
    const int64_t q0 = (incremental && t > 0) ? s + t - 1 : 0;
    const int64_t sq = (incremental && t > 0) ? 1 : s + t;
    StepInputs& in = (incremental && t > 0) ? decode_inputs : prefill_inputs;
    CCTUNE_RETURN_IF_ERROR(in.Prepare(b, sq, incremental && t > 0 ? total : q0 + sq, device));
    CCTUNE_RETURN_IF_ERROR(in.Fill(seq, pad, positions, b, total, q0, sq));
    // Pointers, not copies: a Tensor copy allocates its shape.
    Tensor prefill_logits, prefill_last;
    Tensor* logits = &decode_logits;
    if (incremental && t > 0) {
      if (!decode_logits.defined()) {
        CCTUNE_ASSIGN_OR_RETURN(decode_logits, Tensor::Empty({b, 1, v}, DType::kF32, device));
        CCTUNE_ASSIGN_OR_RETURN(decode_last, decode_logits.Select(1, 0));
      }
    } else {
      // Only the last position's logits are sampled from, so only they are computed.
      CCTUNE_ASSIGN_OR_RETURN(prefill_logits, Tensor::Empty({b, 1, v}, DType::kF32, device));
      logits = &prefill_logits;
    }
    absl::Status st = model.Forward(*logits, in.tokens(), &in.mask(), &in.positions());
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat("Generate: step ", t, " (", sq,
                                                  " tokens at position ", q0, "): ", st.message()));
    }
    ++result.num_forward_passes;
    if (incremental) result.kv_positions_read += q0 + sq;

    const Tensor* last = &decode_last;  // [b, v]
    if (logits == &prefill_logits) {
      CCTUNE_ASSIGN_OR_RETURN(prefill_last, prefill_logits.Select(1, 0));
      last = &prefill_last;
    }
    CCTUNE_RETURN_IF_ERROR(ops::Sample(sampled, *last, options.sampling, gen));
    if (!device.is_cpu()) CCTUNE_RETURN_IF_ERROR(sampled_host.CopyFrom(sampled));
    std::copy(sampled_host.data<int64_t>(), sampled_host.data<int64_t>() + b, ids.begin());
    if (options.sampling.temperature == 0.f) {
      // Sampling rejects rows with a NaN or no finite logit; greedy decoding takes the argmax,
      // which is the NaN itself when there is one. Check it, so that NaN weights fail here
      // instead of printing text.
      CCTUNE_RETURN_IF_ERROR(CheckGreedyLogits(*last, ids, s + t));
    }
    if (options.return_logits) {
      CCTUNE_ASSIGN_OR_RETURN(Tensor dst, result.logits.Select(1, t));  // [b, v]
      CCTUNE_RETURN_IF_ERROR(dst.CopyFrom(*last));
    }

    bool all_stopped = true;
    for (int64_t r = 0; r < b; ++r) {
      stopped_before[r] = stopped[r];
      // The model is fed the sampled token even for stopped rows (their outputs are masked
      // below), as torchtune does.
      seq[r * total + s + t] = ids[r];
      step_tokens[r] = stopped[r] ? options.pad_id : static_cast<int32_t>(ids[r]);
      if (!stopped[r]) {
        result.generated[r].push_back(static_cast<int32_t>(ids[r]));
        stopped[r] = std::find(options.stop_tokens.begin(), options.stop_tokens.end(), ids[r]) !=
                     options.stop_tokens.end();
      }
      all_stopped = all_stopped && stopped[r];
    }
    if (options.return_logits) {
      for (int64_t r = 0; r < b; ++r) {
        if (!stopped_before[r]) continue;
        CCTUNE_ASSIGN_OR_RETURN(Tensor row, result.logits.Select(0, r));
        CCTUNE_ASSIGN_OR_RETURN(Tensor cell, row.Select(0, t));
        std::fill(cell.data<float>(), cell.data<float>() + v, 0.f);
      }
    }
    n = t + 1;
    if (t == 0) first_token = std::chrono::steady_clock::now();
    if (options.on_token) {
      GenerationStep step;
      step.step = t;
      step.tokens = step_tokens;
      step.stopped = stopped_before;
      options.on_token(step);
    }
    if (all_stopped) break;
  }

  const auto end = std::chrono::steady_clock::now();
  result.prefill_seconds = std::chrono::duration<double>(first_token - start).count();
  result.decode_seconds = std::chrono::duration<double>(end - first_token).count();

  // Tokens: the prompt, then the generated ones with stopped rows masked to pad_id.
  result.num_generated = n;
  CCTUNE_ASSIGN_OR_RETURN(result.tokens, Tensor::Empty({b, s + n}, DType::kI64));
  int64_t* out = result.tokens.data<int64_t>();
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t j = 0; j < s; ++j) out[r * (s + n) + j] = seq[r * total + j];
    const int64_t kept = static_cast<int64_t>(result.generated[r].size());
    for (int64_t t = 0; t < n; ++t) {
      out[r * (s + n) + s + t] = t < kept ? result.generated[r][t] : options.pad_id;
    }
  }
  if (options.return_logits && n < n_max) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor used, result.logits.Narrow(1, 0, n));
    CCTUNE_ASSIGN_OR_RETURN(result.logits, used.Contiguous());
  }
  return result;
}

}  // namespace cctune
