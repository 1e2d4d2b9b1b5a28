// Accuracy of weight-only quantization (docs/generation.md, "Quantized models"): for a
// random-weight model and, when present, stories260K (../shared/models/stories260K), the
// logits of the int8 and int4 models against the f32 model on the same tokens (max and mean
// absolute error, also relative to the largest |logit|), and greedy agreement over 200 tokens:
// the free-running prefix that stays identical, and the teacher-forced top-1 agreement on the
// f32 model's greedy sequence. Logits come from decode steps through the KV cache (the GEMV
// generation runs); int8 and int4 are shown with int8 activations (the default) and f32 ones.
//
//   bazel run -c opt //benchmarks:quant_accuracy -- [--shared_dir=../shared]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "core/status.h"
#include "generation/generate.h"
#include "generation/model_loader.h"
#include "kernels/cpu/quant/quant.h"
#include "models/decoder_builder.h"
#include "models/model_builder.h"
#include "models/quantization.h"
#include "models/registry.h"
#include "models/tiny/tiny.h"
#include "modules/parameters.h"

namespace cctune {
namespace {

constexpr int64_t kTokens = 200;

struct Model {
  std::unique_ptr<TransformerDecoder> model;
  ParameterArena arena;
};

// Greedy continuation of [bos] for kTokens tokens.
absl::StatusOr<std::vector<int32_t>> Greedy(TransformerDecoder& m, int32_t bos) {
  CCTUNE_RETURN_IF_ERROR(m.SetupCaches(1, DType::kF32, kTokens + 1));
  GenerateOptions o;
  o.max_new_tokens = kTokens;
  o.pad_id = -1;
  o.sampling.temperature = 0.f;
  Generator gen(1);
  CCTUNE_ASSIGN_OR_RETURN(Tensor prompt, Tensor::Empty({1, 1}, DType::kI32));
  prompt.data<int32_t>()[0] = bos;
  CCTUNE_ASSIGN_OR_RETURN(GenerateResult r, Generate(m, prompt, o, gen));
  m.DeleteCaches();
  return r.generated[0];
}

// The logits of every position of `ids`, one decode step at a time through the KV cache (the
// path, and for int8 weights the int8-activation GEMV, that generation runs).
absl::StatusOr<std::vector<double>> DecodeLogits(TransformerDecoder& m,
                                                 const std::vector<int32_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  CCTUNE_RETURN_IF_ERROR(m.SetupCaches(1, DType::kF32, n));
  CCTUNE_ASSIGN_OR_RETURN(Tensor tok, Tensor::Empty({1, 1}, DType::kI32));
  CCTUNE_ASSIGN_OR_RETURN(Tensor pos, Tensor::Empty({1, 1}, DType::kI32));
  CCTUNE_ASSIGN_OR_RETURN(Tensor mask, Tensor::Zeros({1, 1, n}, DType::kBool));
  CCTUNE_ASSIGN_OR_RETURN(Tensor logits, Tensor::Empty({1, 1, m.vocab_size()}, DType::kF32));
  std::vector<double> out;
  for (int64_t p = 0; p < n; ++p) {
    tok.data<int32_t>()[0] = ids[p];
    pos.data<int32_t>()[0] = static_cast<int32_t>(p);
    static_cast<bool*>(mask.raw_data())[p] = true;
    CCTUNE_RETURN_IF_ERROR(m.Forward(logits, tok, &mask, &pos));
    CCTUNE_ASSIGN_OR_RETURN(std::vector<double> row, logits.ToDoubleVector());
    out.insert(out.end(), row.begin(), row.end());
  }
  m.DeleteCaches();
  return out;
}

absl::Status Compare(const std::string& label, const DecoderConfig& config, Model& f32,
                     int32_t bos) {
  CCTUNE_ASSIGN_OR_RETURN(std::vector<int32_t> ref_gen, Greedy(*f32.model, bos));
  std::vector<int32_t> seq = {bos};
  seq.insert(seq.end(), ref_gen.begin(), ref_gen.end());
  seq.pop_back();  // inputs: bos and the first kTokens - 1 generated tokens
  CCTUNE_ASSIGN_OR_RETURN(std::vector<double> ref, DecodeLogits(*f32.model, seq));
  const int64_t v = config.vocab_size;
  double max_logit = 0;
  for (double x : ref) max_logit = std::max(max_logit, std::fabs(x));
  std::printf("%s: %lld layers, dim %lld, vocab %lld; %lld tokens; max |logit| %.3f\n",
              label.c_str(), static_cast<long long>(config.num_layers),
              static_cast<long long>(config.embed_dim), static_cast<long long>(v),
              static_cast<long long>(kTokens), max_logit);
  std::printf("  %-22s %12s %12s %10s %10s %14s %14s\n", "quantizer", "max |err|", "mean |err|",
              "max rel", "mean rel", "greedy prefix", "top-1 agree");
  const StateDict full = f32.arena.ExportStateDict();
  // int8 and int4 (groupsizes 32 and 256) twice: the decode GEMV with int8 activations (the
  // default) and with f32 ones (the weights' error alone).
  struct Row {
    WeightQuantization q;
    cpu::QuantActivations acts;
  };
  const Row rows[] = {{{cpu::QuantFormat::kInt8PerChannel, 0}, cpu::QuantActivations::kF32},
                      {{cpu::QuantFormat::kInt8PerChannel, 0}, cpu::QuantActivations::kInt8},
                      {{cpu::QuantFormat::kInt4Grouped, 32}, cpu::QuantActivations::kF32},
                      {{cpu::QuantFormat::kInt4Grouped, 32}, cpu::QuantActivations::kInt8},
                      {{cpu::QuantFormat::kInt4Grouped, 64}, cpu::QuantActivations::kInt8},
                      {{cpu::QuantFormat::kInt4Grouped, 128}, cpu::QuantActivations::kInt8},
                      {{cpu::QuantFormat::kInt4Grouped, 256}, cpu::QuantActivations::kF32},
                      {{cpu::QuantFormat::kInt4Grouped, 256}, cpu::QuantActivations::kInt8}};
  for (const Row& row : rows) {
    const WeightQuantization& q = row.q;
    cpu::SetQuantActivations(row.acts);
    CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<TransformerDecoder> qm,
                            BuildDecoder(config, QuantizedProjections(q)));
    CCTUNE_ASSIGN_OR_RETURN(StateDict qsd, QuantizeStateDict(full, *qm, q));
    CCTUNE_ASSIGN_OR_RETURN(ParameterArena arena, LoadWeights(*qm, qsd, DType::kF32, Device::Cpu()));
    CCTUNE_ASSIGN_OR_RETURN(std::vector<double> got, DecodeLogits(*qm, seq));
    double max_err = 0, sum_err = 0;
    int64_t agree = 0;
    for (int64_t p = 0; p < kTokens; ++p) {
      int64_t a = 0, b = 0;
      for (int64_t j = 0; j < v; ++j) {
        const double e = std::fabs(got[p * v + j] - ref[p * v + j]);
        max_err = std::max(max_err, e);
        sum_err += e;
        if (ref[p * v + j] > ref[p * v + a]) a = j;
        if (got[p * v + j] > got[p * v + b]) b = j;
      }
      agree += a == b;
    }
    CCTUNE_ASSIGN_OR_RETURN(std::vector<int32_t> qgen, Greedy(*qm, bos));
    int64_t prefix = 0;
    while (prefix < kTokens && qgen[prefix] == ref_gen[prefix]) ++prefix;
    const double mean_err = sum_err / static_cast<double>(kTokens * v);
    std::printf("  %-22s %12.5f %12.6f %10.5f %10.6f %10lld/%lld %10lld/%lld\n",
                (q.QuantizerName().substr(0, 4) +
                 (q.format == cpu::QuantFormat::kInt4Grouped ? absl::StrCat(" g", q.groupsize)
                                                             : std::string()) +
                 (row.acts == cpu::QuantActivations::kInt8 ? " (int8 act)" : " (f32 act)"))
                    .c_str(),
                max_err, mean_err, max_err / max_logit, mean_err / max_logit,
                static_cast<long long>(prefix), static_cast<long long>(kTokens),
                static_cast<long long>(agree), static_cast<long long>(kTokens));
  }
  cpu::SetQuantActivations(cpu::QuantActivations::kInt8);
  return absl::OkStatus();
}

absl::Status Run(const std::string& shared_dir) {
  CCTUNE_RETURN_IF_ERROR(RegisterModelComponents());
  {
    // Random weights (InitializeRandom, as a model trained from scratch starts); ffn 1376 is not
    // a multiple of 256, so int4 rows of w2 end in a short group.
    const DecoderConfig config = TinyLlamaConfig(4096, 4, 8, 4, 512, 1376, 512);
    Model m;
    CCTUNE_ASSIGN_OR_RETURN(m.model, BuildDecoder(config));
    CCTUNE_ASSIGN_OR_RETURN(m.arena, ParameterArena::Create(*m.model, DType::kF32, Device::Cpu()));
    Generator gen(1234);
    CCTUNE_RETURN_IF_ERROR(m.arena.InitializeRandom(gen));
    CCTUNE_RETURN_IF_ERROR(Compare("random weights", config, m, 1));
  }
  const std::string bin = shared_dir + "/models/stories260K/stories260K.bin";
  if (FILE* f = std::fopen(bin.c_str(), "rb"); f != nullptr) {
    std::fclose(f);
    CCTUNE_ASSIGN_OR_RETURN(ConfigNode args, Llama2cModelArgs(bin));
    CCTUNE_ASSIGN_OR_RETURN(DecoderConfig config,
                            ModelConfig("cctune.models.llama2c.llama2c", ConfigNode(), args));
    CCTUNE_ASSIGN_OR_RETURN(LoadedModel loaded, LoadLlama2cModel(bin));
    Model m{std::move(loaded.model), std::move(loaded.arena)};
    CCTUNE_RETURN_IF_ERROR(Compare("stories260K", config, m, 1));
  } else {
    std::printf("stories260K: %s not found (skipped)\n", bin.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace cctune

int main(int argc, char** argv) {
  std::string shared = "../shared";
  for (int i = 1; i < argc; ++i) {
    if (absl::StartsWith(argv[i], "--shared_dir=")) shared = argv[i] + 13;
  }
  const absl::Status s = cctune::Run(shared);
  if (!s.ok()) {
    std::fprintf(stderr, "quant_accuracy: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
