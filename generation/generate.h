// Autoregressive generation for a TransformerDecoder, the way torchtune's generation utils
// do it: one prefill pass over the (left-padded) prompt, then one token per step, either
// incrementally through the model's KV caches (when SetupCaches() was called) or by running
// the whole sequence again (no caches). Sampling goes through ops::Sample with a seeded
// Generator, so the same seed gives the same tokens.
//
//   CCTUNE_RETURN_IF_ERROR(model.SetupCaches(/*batch_size=*/1, DType::kF32));
//   GenerateOptions opts;
//   opts.max_new_tokens = 64;
//   opts.sampling = {/*temperature=*/0.8f, /*top_k=*/200, /*top_p=*/0.95f};
//   opts.stop_tokens = {tokenizer.stop_tokens().begin(), tokenizer.stop_tokens().end()};
//   Generator gen(1234);
//   CCTUNE_ASSIGN_OR_RETURN(GenerateResult out, Generate(model, prompt, opts, gen));
//
// Padding: a prompt [b, s] is left-padded with pad_id (LeftPad builds one). Padding never
// takes part in attention, and each row's positions start at 0 on its first real token
// (torchtune's get_causal_mask_from_padding_mask / get_position_ids_from_padding_mask).
#ifndef CCTUNE_GENERATION_GENERATE_H_
#define CCTUNE_GENERATION_GENERATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/op_types.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// padding_mask: bool [b, s], true = a real token. Returns bool [b, s, target_seq_len]
// (target_seq_len <= 0 means s): query i may attend key j when j <= i and j is a real token;
// the diagonal is always allowed, so a padding query still has one key (torchtune's rule).
// Keys j >= s (room in a static cache) are never allowed. CPU tensors; InvalidArgument for
// bad shapes or target_seq_len < s.
absl::StatusOr<Tensor> CausalMaskFromPaddingMask(const Tensor& padding_mask,
                                                 int64_t target_seq_len = -1);

// padding_mask: bool [b, s]. Returns i64 [b, s]: the number of real tokens before each real
// token (so positions start at 0 on a row's first real token), and 0 on padding.
absl::StatusOr<Tensor> PositionIdsFromPaddingMask(const Tensor& padding_mask);

// Left-pads prompts of different lengths with pad_id into an i64 [b, max_len] CPU tensor.
// InvalidArgument for no prompts or an empty prompt.
absl::StatusOr<Tensor> LeftPad(const std::vector<std::vector<int32_t>>& prompts, int32_t pad_id);

// What the per-token callback sees after each step.
struct GenerationStep {
  int64_t step = 0;                  // index of the generated token, from 0
  absl::Span<const int32_t> tokens;  // [b] the tokens of this step (pad_id for stopped rows)
  // [b] 1 when the row had stopped before this step (its token is padding), else 0.
  absl::Span<const uint8_t> stopped;
};
using TokenCallback = std::function<void(const GenerationStep&)>;

struct GenerateOptions {
  int64_t max_new_tokens = 0;  // >= 1
  int32_t pad_id = 0;
  // temperature 0 = greedy (argmax); top_k 0 = off; top_p 1 = off.
  ops::SamplingParams sampling;
  // A row stops after it samples any of these; generation ends when every row has stopped.
  std::vector<int32_t> stop_tokens;
  bool return_logits = false;
  TokenCallback on_token;  // optional; called once per step (streaming output)
};

struct GenerateResult {
  // i64 [b, s + n] on the CPU: the prompt as given, then the n generated tokens; a row's
  // tokens after its stop token are pad_id (torchtune's stop-token mask).
  Tensor tokens;
  // f32 [b, n, v] on the CPU when return_logits: the logits each token was sampled from
  // (zero after the row's stop token).
  Tensor logits;
  int64_t num_generated = 0;  // n (<= max_new_tokens; fewer when every row stopped)
  // Per row: its generated tokens up to and including its stop token.
  std::vector<std::vector<int32_t>> generated;
  // Model forward passes run, and the sum over them of the KV-cache positions the attention
  // read (filled length after each update; 0 without caches). Bandwidth figures use these.
  int64_t num_forward_passes = 0;
  int64_t kv_positions_read = 0;
  // Wall time (steady clock) from entering Generate() until the first generated token is on
  // the host (the prefill pass and its sampling: the time to first token), and from then
  // until Generate() returns (the num_generated - 1 decode steps). Their sum is the whole
  // call less argument checks and the final copy of the tokens.
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// `v` rounded to 3 significant digits, in fixed notation: 11.42 -> "11.4", 1043.2 -> "1040",
// 0.12345 -> "0.123", 0 -> "0" (the printed rates and times of the generate recipe).
std::string ThreeSignificantDigits(double v);

// Generates from `prompt` (i32/i64 [b, s] or [s], left-padded with options.pad_id, on any
// device). With caches set up (model.CachesAreSetup()), they are reset first and must hold
// the batch and s + max_new_tokens positions. Errors (bad options, prompts too long for the
// model or the caches, a row that is all padding) name the values.
absl::StatusOr<GenerateResult> Generate(TransformerDecoder& model, const Tensor& prompt,
                                        const GenerateOptions& options, Generator& gen);

}  // namespace cctune

#endif  // CCTUNE_GENERATION_GENERATE_H_
