#include "checkpoint/llama2c.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/mapped_file.h"
#include "core/status.h"

namespace cctune {
namespace {

constexpr int64_t kHeaderBytes = 7 * 4;

std::string Prefix(const std::string& file) {
  return absl::StrCat("llama2.c checkpoint '", file, "': ");
}

std::string HeaderString(const Llama2cHeader& c) {
  return absl::StrCat("dim=", c.dim, " hidden_dim=", c.hidden_dim, " n_layers=", c.n_layers,
                      " n_heads=", c.n_heads, " n_kv_heads=", c.n_kv_heads,
                      " vocab_size=", c.shared_classifier ? c.vocab_size : -c.vocab_size,
                      " seq_len=", c.seq_len);
}

// Number of f32 values in each section, in file order. ParseLlama2cHeader bounds the header
// values so that none of these products can overflow.
struct Sections {
  int64_t embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq_cis, wcls;
  int64_t Total() const {
    return embedding + rms_att + wq + wk + wv + wo + rms_ffn + w1 + w2 + w3 + rms_final +
           2 * freq_cis + wcls;
  }
};

Sections SectionSizes(const Llama2cHeader& c) {
  const int64_t d = c.dim, h = c.hidden_dim, l = c.n_layers, v = c.vocab_size;
  const int64_t hd = c.head_dim(), kv = int64_t{c.n_kv_heads} * hd, q = int64_t{c.n_heads} * hd;
  Sections s;
  s.embedding = v * d;
  s.rms_att = l * d;
  s.wq = l * d * q;
  s.wk = l * d * kv;
  s.wv = l * d * kv;
  s.wo = l * q * d;
  s.rms_ffn = l * d;
  s.w1 = l * d * h;
  s.w2 = l * h * d;
  s.w3 = l * d * h;
  s.rms_final = d;
  s.freq_cis = int64_t{c.seq_len} * hd / 2;
  s.wcls = c.shared_classifier ? 0 : v * d;
  return s;
}

}  // namespace

int64_t Llama2cHeader::ExpectedFileBytes() const {
  return kHeaderBytes + 4 * SectionSizes(*this).Total();
}

absl::StatusOr<Llama2cHeader> ParseLlama2cHeader(const void* bytes, size_t size,
                                                 const std::string& file) {
  if (size < static_cast<size_t>(kHeaderBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        Prefix(file), "file is ", size, " bytes, too short for the 28-byte header"));
  }
  int32_t h[7];
  std::memcpy(h, bytes, sizeof(h));
  Llama2cHeader c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.shared_classifier = h[5] > 0;
  // -INT32_MIN overflows; reject it along with zero below.
  c.vocab_size = h[5] == INT32_MIN ? 0 : (h[5] > 0 ? h[5] : -h[5]);
  c.seq_len = h[6];
  const std::string where = absl::StrCat(Prefix(file), "bad header (", HeaderString(c), "): ");
  // Bounds keep every section size below 2^52 and their sum far from overflowing.
  constexpr int kMaxSize = 1 << 20;
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 ||
      c.n_kv_heads <= 0 || c.vocab_size <= 0 || c.seq_len <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "every value must be non-zero and "
                                                   "all but vocab_size positive"));
  }
  if (c.dim > kMaxSize || c.hidden_dim > kMaxSize || c.n_layers > 4096 ||
      c.seq_len > kMaxSize || c.vocab_size > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(where, "sizes are implausibly large"));
  }
  if (c.dim % c.n_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "dim (", c.dim,
                                                   ") must be divisible by n_heads (",
                                                   c.n_heads, ")"));
  }
  if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "n_heads (", c.n_heads,
                                                   ") must be a multiple of n_kv_heads (",
                                                   c.n_kv_heads, ")"));
  }
  if (c.head_dim() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "head size (", c.head_dim(), ") must be even for RoPE"));
  }
  return c;
}

absl::StatusOr<Llama2cCheckpoint> LoadLlama2c(const std::string& path,
                                              const Llama2cLoadOptions& options) {
  auto mapped = MapFile(path);
  if (!mapped.ok()) {
    return absl::Status(mapped.status().code(),
                        absl::StrCat(Prefix(path), mapped.status().message()));
  }
  std::shared_ptr<Storage> storage = std::move(mapped).value();
  CCTUNE_ASSIGN_OR_RETURN(Llama2cHeader c,
                          ParseLlama2cHeader(storage->data(), storage->bytes(), path));
  const int64_t expected = c.ExpectedFileBytes();
  if (static_cast<int64_t>(storage->bytes()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        Prefix(path), "header (", HeaderString(c), ") implies ", expected,
        " bytes but the file has ", storage->bytes(),
        static_cast<int64_t>(storage->bytes()) < expected ? " (truncated?)" : " (extra data?)"));
  }
  const Sections s = SectionSizes(c);
  const int64_t d = c.dim, hidden = c.hidden_dim, v = c.vocab_size;
  const int64_t q = int64_t{c.n_heads} * c.head_dim(), kv = int64_t{c.n_kv_heads} * c.head_dim();

  Llama2cCheckpoint out;
  out.config = c;
  StateDict& sd = out.state_dict;
  // Element offsets into the mapping (the header is 7 floats' worth of bytes).
  int64_t pos = kHeaderBytes / 4;
  // One [rows, cols] view per layer out of a section holding all layers back to back.
  auto per_layer = [&](const std::string& suffix, int64_t section, Shape shape) -> absl::Status {
    const int64_t each = section / c.n_layers;
    for (int l = 0; l < c.n_layers; ++l) {
      CCTUNE_ASSIGN_OR_RETURN(sd[absl::StrCat("layers.", l, ".", suffix)],
                              Tensor::FromStorage(storage, shape, DType::kF32, pos + l * each));
    }
    pos += section;
    return absl::OkStatus();
  };
  CCTUNE_ASSIGN_OR_RETURN(sd["tok_embeddings.weight"],
                          Tensor::FromStorage(storage, {v, d}, DType::kF32, pos));
  pos += s.embedding;
  CCTUNE_RETURN_IF_ERROR(per_layer("sa_norm.scale", s.rms_att, {d}));
  CCTUNE_RETURN_IF_ERROR(per_layer("attn.q_proj.weight", s.wq, {q, d}));
  CCTUNE_RETURN_IF_ERROR(per_layer("attn.k_proj.weight", s.wk, {kv, d}));
  CCTUNE_RETURN_IF_ERROR(per_layer("attn.v_proj.weight", s.wv, {kv, d}));
  CCTUNE_RETURN_IF_ERROR(per_layer("attn.output_proj.weight", s.wo, {d, q}));
  CCTUNE_RETURN_IF_ERROR(per_layer("mlp_norm.scale", s.rms_ffn, {d}));
  CCTUNE_RETURN_IF_ERROR(per_layer("mlp.w1.weight", s.w1, {hidden, d}));
  CCTUNE_RETURN_IF_ERROR(per_layer("mlp.w2.weight", s.w2, {d, hidden}));
  CCTUNE_RETURN_IF_ERROR(per_layer("mlp.w3.weight", s.w3, {hidden, d}));
  CCTUNE_ASSIGN_OR_RETURN(sd["norm.scale"], Tensor::FromStorage(storage, {d}, DType::kF32, pos));
  pos += s.rms_final + 2 * s.freq_cis;  // the legacy RoPE tables are recomputed by the model
  if (c.shared_classifier) {
    if (options.alias_tied_output) sd["output.weight"] = sd["tok_embeddings.weight"];
  } else {
    CCTUNE_ASSIGN_OR_RETURN(sd["output.weight"],
                            Tensor::FromStorage(storage, {v, d}, DType::kF32, pos));
    pos += s.wcls;
  }
  CCTUNE_CHECK(pos * 4 == expected, "llama2.c section sizes disagree: ", pos * 4, " vs ",
               expected);
  return out;
}

}  // namespace cctune
