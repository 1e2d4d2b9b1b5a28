#include "recipes/generate_recipe.h"

#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpointer_components.h"
#include "config/validate.h"
#include "config/value_checks.h"
#include "core/device.h"
#include "core/device_interface.h"
#include "core/random.h"
#include "core/status.h"
#include "generation/generate.h"
#include "generation/model_loader.h"
#include "kernels/cpu/blas_shim/lazy_openblas.h"
#include "kernels/cpu/op_profile.h"
#include "models/quantization.h"
#include "models/registry.h"
#include "modules/attention.h"
#include "recipes/builtin_configs.h"
#include "recipes/config_checks.h"
#include "recipes/quantize_recipe.h"
#include "tokenizers/prompt_template.h"
#include "tokenizers/tokenizer_components.h"

namespace cctune {

namespace {

absl::Status DeviceName(const ConfigNode& node) {
  if (node.kind() != ConfigNode::Kind::kString) return absl::OkStatus();
  absl::StatusOr<Device> d = ParseDevice(node.string_value());
  if (!d.ok()) return d.status();
  if (d->is_meta()) return absl::InvalidArgumentError("generation cannot run on the meta device");
  return absl::OkStatus();
}

absl::Status Probability(const ConfigNode& node) {
  if ((node.kind() == ConfigNode::Kind::kInt || node.kind() == ConfigNode::Kind::kFloat) &&
      !(node.float_value() > 0.0 && node.float_value() <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("must be in (0, 1], got ", node.text()));
  }
  return absl::OkStatus();
}

Schema PromptSchema() {
  return Schema("prompt", "the chat messages to continue")
      .Default("system", KeyType::String().OrNull(), ConfigNode::Null(),
               "system message (null: none)")
      .Required("user", KeyType::String(), "user message");
}

Schema BuildSchema() {
  return Schema("generate", "text generation (recipes/generate)")
      .Optional("output_dir", KeyType::String().OrNull(),
                "where outputs go (unused by generation; kept for torchtune configs)")
      .Optional("shared_dir", KeyType::String(),
                "a base folder that other keys refer to as ${shared_dir}")
      .Required("model", KeyType::Component("model"), "model builder (cctune.models.*)")
      .Required("checkpointer", KeyType::Component("checkpointer"), "where the weights come from")
      .Required("tokenizer", KeyType::Component("tokenizer"), "tokenizer and prompt template")
      .Default("device", KeyType::String(), ConfigNode::String("cpu"), "cpu, cuda or cuda:N")
      .Check("device", DeviceName)
      .Default("dtype", KeyType::Enum({"fp32", "bf16"}), ConfigNode::String("fp32"),
               "dtype of the weights and of the KV cache (activations accumulate in f32)")
      .Default("seed", KeyType::Int().OrNull(), ConfigNode::Null(),
               "sampling seed (null: a random one, logged)")
      .Required("prompt", KeyType::Object(PromptSchema()), "prompt.system and prompt.user")
      .Required("max_new_tokens", KeyType::Int().InRange(1, kMaxSeqLenKey),
                "most tokens to generate")
      .Check("max_new_tokens", AtLeastOne)
      .Default("temperature", KeyType::Float().AtLeast(0), ConfigNode::Float(1.0),
               "softmax temperature (0: greedy)")
      .Check("temperature", NonNegative)
      .Default("top_k", KeyType::Int().InRange(1, kMaxTopKKey).OrNull(), ConfigNode::Null(),
               "sample among the k most likely tokens (null: all)")
      .Check("top_k", AtLeastOne)
      .Default("top_p", KeyType::Float(), ConfigNode::Float(1.0),
               "nucleus sampling: the smallest set reaching this probability (1: off)")
      .Check("top_p", Probability)
      .Default("enable_kv_cache", KeyType::Bool(), ConfigNode::Bool(true),
               "decode incrementally with a KV cache (false: recompute everything)")
      .Default("kv_cache_layout", KeyType::Enum({"grouped", "expanded"}),
               ConfigNode::String("grouped"),
               "grouped: n_kv heads cached; expanded: n_h heads (torchtune before #1961)")
      .Default("load_weights", KeyType::Enum({"copy", "view"}), ConfigNode::String("view"),
               "view: the parameters view the mapped checkpoint files where the dtypes agree "
               "(zero copy, ~0.2 s for 2 GB from the page cache; 4 KiB pages unless the page "
               "cache holds huge folios), the other tensors are converted; copy: the weights "
               "into memory of their own, on huge pages, releasing the file's pages as they go "
               "(decode up to ~1.1-1.3x faster, for seconds of load)")
      .Default("quantizer", KeyType::Component("quantizer").OrNull(), ConfigNode::Null(),
               "weight-only quantizer (cctune.training.quantization.Int8WeightOnlyQuantizer / "
               "Int4WeightOnlyQuantizer; CPU): quantizes a full-precision checkpoint at load, "
               "and must match a checkpoint the quantize recipe wrote (null: none)")
      .Default("profile", KeyType::Bool(), ConfigNode::Bool(false),
               "print where the prefill's and the decode's time went, by kind of op (GEMMs with "
               "their GFLOP/s, attention, elementwise, untimed); device cpu only");
}

double Gb(double bytes) { return bytes / 1e9; }

// `after` less `before`, category by category.
cpu::OpProfile ProfileDelta(const cpu::OpProfile& after, const cpu::OpProfile& before) {
  cpu::OpProfile d = after;
  for (int i = 0; i < cpu::kNumOpCategories; ++i) {
    d[i].seconds -= before[i].seconds;
    d[i].flops -= before[i].flops;
    d[i].bytes -= before[i].bytes;
    d[i].calls -= before[i].calls;
  }
  return d;
}

// "Profile <phase>: <category> <s> sec (<%>), <n> calls[, <GFLOP/s>]" per category that ran,
// then the time outside the timed ops (sampling, the model's glue, thread hand-offs).
void PrintProfile(const char* phase, const cpu::OpProfile& prof, double wall_seconds) {
  double timed = 0;
  for (int i = 0; i < cpu::kNumOpCategories; ++i) {
    const cpu::OpStats& st = prof[i];
    if (st.calls <= 0) continue;
    timed += st.seconds;
    const double pct = wall_seconds > 0 ? 100.0 * st.seconds / wall_seconds : 0.0;
    std::string rate;
    if (st.flops > 0 && st.seconds > 0) {
      rate = absl::StrCat(", ", ThreeSignificantDigits(st.flops / st.seconds / 1e9), " GFLOP/s");
    }
    std::fprintf(stderr, "Profile %s: %s %s sec (%.1f%%), %lld calls%s\n", phase,
                 cpu::OpCategoryName(static_cast<cpu::OpCategory>(i)),
                 ThreeSignificantDigits(st.seconds).c_str(), pct,
                 static_cast<long long>(st.calls), rate.c_str());
  }
  const double rest = std::max(0.0, wall_seconds - timed);
  std::fprintf(stderr, "Profile %s: untimed %s sec (%.1f%%)\n", phase,
               ThreeSignificantDigits(rest).c_str(),
               wall_seconds > 0 ? 100.0 * rest / wall_seconds : 0.0);
}

// Bytes of the arena's parameters that view a mapped checkpoint file (resident as the file's
// pages, outside the allocator's counters). Tensors the arena views in memory of their own
// (weights quantized at load) are allocations, counted by GetMemoryStats already.
double FileViewedBytes(const ParameterArena& arena) {
  double bytes = 0;
  for (const auto& named : arena.named_tensors()) {
    const Tensor& t = named.second;
    if (t.storage() != nullptr && t.storage()->file_mapped()) bytes += t.nbytes();
  }
  return bytes;
}

}  // namespace

const Schema& GenerateRecipeSchema() {
  static const Schema* const schema = new Schema(BuildSchema());
  return *schema;
}

absl::Status RegisterGenerateComponents() {
  CCTUNE_RETURN_IF_ERROR(RegisterModelComponents());
  CCTUNE_RETURN_IF_ERROR(RegisterCheckpointers());
  CCTUNE_RETURN_IF_ERROR(RegisterTokenizers());
  CCTUNE_RETURN_IF_ERROR(RegisterQuantizers());
  return absl::OkStatus();
}

std::vector<ConfigError> ValidateGenerateConfig(const Config& config) {
  CCTUNE_CHECK_OK(RegisterGenerateComponents());
  std::vector<ConfigError> errors = Validate(config, GenerateRecipeSchema());
  // Files the checkpointer would read: on the resolved tree (a copy when unresolved).
  Config resolved = config;
  if (!resolved.resolved()) resolved.ResolveCollectingErrors();  // errors already reported
  CheckRecipeCheckpointer(resolved.root(), &errors);
  return errors;
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> LoadGenerateModel(const ConfigNode& root,
                                                                     Checkpointer& checkpointer,
                                                                     LoadedCheckpoint& ckpt) {
  CheckpointLoadOptions load_options;
  load_options.keep_qk_layout = true;
  CCTUNE_ASSIGN_OR_RETURN(ckpt, checkpointer.LoadCheckpoint(load_options));
  // The model component, or its quantized form (the `quantizer` key; recipes/quantize_recipe.h),
  // built once; the state dict is quantized only once the q/k layout is settled.
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<TransformerDecoder> model,
                          BuildModelStructureForCheckpoint(root, ckpt));
  CCTUNE_RETURN_IF_ERROR(CheckModelMatchesCheckpoint(*model, ckpt));
  if (ckpt.qk_half_split && !UseHalfSplitRope(*model)) {
    // The model rotates half-split pairs of its own accord: it takes the permuted q/k. The
    // model is the same (UseHalfSplitRope changed nothing); only the state dict is reloaded.
    ckpt = LoadedCheckpoint();  // unmaps the first load's files
    CCTUNE_ASSIGN_OR_RETURN(ckpt, checkpointer.LoadCheckpoint());
  }
  CCTUNE_RETURN_IF_ERROR(QuantizeCheckpointForModel(root, *model, ckpt));
  return model;
}

absl::Status RunGenerateRecipe(const Config& config) {
  CCTUNE_RETURN_IF_ERROR(RegisterGenerateComponents());
  const ConfigNode root = WithDefaults(config.root(), GenerateRecipeSchema());

  CCTUNE_ASSIGN_OR_RETURN(std::string device_name, root.GetString("device"));
  CCTUNE_ASSIGN_OR_RETURN(Device device, ParseDevice(device_name));
  if (!DeviceAvailable(device)) {
    CCTUNE_RETURN_IF_ERROR(GetDeviceInterface(device.type).status());
    return absl::FailedPreconditionError(
        absl::StrCat("device ", device.ToString(), " is not available on this machine"));
  }
  CCTUNE_ASSIGN_OR_RETURN(std::string dtype_name, root.GetString("dtype"));
  CCTUNE_ASSIGN_OR_RETURN(DType dtype, RecipeDType(dtype_name));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> seed_opt, root.GetOptionalInt("seed"));
  uint64_t seed;
  if (seed_opt.has_value()) {
    seed = static_cast<uint64_t>(*seed_opt);
  } else {
    seed = (static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
    std::fprintf(stderr, "Setting manual seed to local seed %llu.\n",
                 static_cast<unsigned long long>(seed));
  }

  // Tokenizer, checkpoint, model (torchtune's order: the checkpoint before the model, so that
  // a llama2.c header can size it).
  CCTUNE_ASSIGN_OR_RETURN(TokenizerComponent tok,
                          TokenizerRegistry().InstantiateKey(root, "tokenizer"));
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> checkpointer,
                          CheckpointerRegistry().InstantiateKey(root, "checkpointer"));
  if (const ConfigNode* q = root.Find("quantizer"); q != nullptr && !q->IsNull() &&
                                                    !device.is_cpu()) {
    return absl::UnimplementedError(absl::StrCat(
        "quantizer: the quantized kernels run on the CPU only; set device: cpu (got ",
        device.ToString(), ")"));
  }
  // q/k stay in the file's order (the model's RoPE follows them). load_weights: view (the
  // default) is zero-copy where the dtypes agree; copy puts the weights in an arena on huge
  // pages (decode ~1.1-1.3x the speed of views of the file's 4 KiB page-cache pages, for a
  // load of seconds: the fresh pages' first touch). Either way what is converted releases the
  // file's pages as it goes (docs/architecture.md, "Loading weights").
  CCTUNE_ASSIGN_OR_RETURN(std::string load_weights, root.GetString("load_weights"));
  const bool view_checkpoint = load_weights == "view";
  const auto load_start = std::chrono::steady_clock::now();
  // OpenBLAS is opened at its first call (kernels/cpu/blas_shim): here, in the load, rather
  // than in the first prefill GEMM, where it would add ~3 ms to the time to first token.
  if (device.is_cpu()) LoadOpenBlas();
  LoadedCheckpoint ckpt;
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<TransformerDecoder> model,
                          LoadGenerateModel(root, *checkpointer, ckpt));
  // copy: the files' tensors are copied onto huge pages; tensors already in memory of their
  // own (quantized at load) are used as they are, not copied again.
  CCTUNE_ASSIGN_OR_RETURN(ParameterArena arena,
                          LoadWeights(*model, ckpt.state_dict, dtype, device,
                                      /*view_checkpoint=*/true,
                                      /*view_mapped_files=*/view_checkpoint));
  ckpt = LoadedCheckpoint();  // unmaps the files no parameter views
  {
    double weight_bytes = 0;
    for (const auto& named : arena.named_tensors()) weight_bytes += named.second.nbytes();
    const double viewed = FileViewedBytes(arena);
    std::fprintf(stderr,
                 "Model loaded in %.02f sec: %.02f GB of weights, %.02f GB viewed in the "
                 "checkpoint files, %.02f GB copied\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start)
                     .count(),
                 Gb(weight_bytes), Gb(viewed), Gb(weight_bytes - viewed));
  }
  // Ids the tokenizer can produce must index the model's embedding; otherwise a prompt with a
  // high id fails late and stop tokens past the model's vocabulary could never be generated.
  // (A model with more rows than tokens, as Qwen2.5's padded vocabulary, is fine.)
  if (tok.tokenizer->vocab_size() > model->vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizer has ", tok.tokenizer->vocab_size(), " tokens but the model's vocab_size is ",
        model->vocab_size(), ": token ids up to ", tok.tokenizer->vocab_size() - 1,
        " would be outside the model's embedding; use the tokenizer the model was trained with"));
  }

  // The prompt: prompt.system (optional) and prompt.user through the template, with the
  // assistant's turn left open.
  std::vector<Message> messages;
  CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> system,
                          root.GetOptionalString("prompt.system"));
  if (system.has_value()) {
    Message m;
    m.role = Role::kSystem;
    m.content = *system;
    messages.push_back(std::move(m));
  }
  Message user;
  user.role = Role::kUser;
  CCTUNE_ASSIGN_OR_RETURN(user.content, root.GetString("prompt.user"));
  messages.push_back(std::move(user));
  CCTUNE_ASSIGN_OR_RETURN(std::vector<int32_t> prompt,
                          InferencePrompt(*tok.tokenizer, tok.prompt_format, messages));
  // torchtune cuts the prompt to tokenizer.max_seq_len without a word; that drops the end of
  // the prompt (the open assistant turn included), so the model would continue a sentence it
  // was never asked. An error says what to change instead.
  const int64_t prompt_len = static_cast<int64_t>(prompt.size());
  if (tok.max_seq_len.has_value() && prompt_len > *tok.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt is ", prompt_len, " tokens, more than tokenizer.max_seq_len (",
        *tok.max_seq_len, "); shorten prompt.user / prompt.system or raise "
        "tokenizer.max_seq_len"));
  }

  CCTUNE_ASSIGN_OR_RETURN(int64_t max_new_tokens, root.GetInt("max_new_tokens"));
  // Compared without adding, so that no value of max_new_tokens can overflow.
  if (max_new_tokens < 1 || prompt_len > model->max_seq_len() ||
      max_new_tokens > model->max_seq_len() - prompt_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt (", prompt_len, " tokens) plus max_new_tokens (", max_new_tokens,
        ") is more than the model's max_seq_len (", model->max_seq_len(), ")"));
  }
  const int64_t total = prompt_len + max_new_tokens;
  CCTUNE_ASSIGN_OR_RETURN(bool enable_kv_cache, root.GetBool("enable_kv_cache"));
  CCTUNE_ASSIGN_OR_RETURN(std::string layout_name, root.GetString("kv_cache_layout"));
  CCTUNE_ASSIGN_OR_RETURN(KvCacheLayout layout, ParseKvCacheLayout(layout_name));
  if (enable_kv_cache) {
    // As torchtune's recipe: one row, sized for this prompt plus the new tokens.
    CCTUNE_RETURN_IF_ERROR(model->SetupCaches(1, dtype, total, layout));
  }

  GenerateOptions options;
  options.max_new_tokens = max_new_tokens;
  options.pad_id = -1;  // one unpadded row: no id is padding
  CCTUNE_ASSIGN_OR_RETURN(double temperature, root.GetFloat("temperature"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, root.GetOptionalInt("top_k"));
  CCTUNE_ASSIGN_OR_RETURN(double top_p, root.GetFloat("top_p"));
  options.sampling.temperature = static_cast<float>(temperature);
  options.sampling.top_k = top_k.value_or(0);
  options.sampling.top_p = static_cast<float>(top_p);
  for (int32_t id : tok.tokenizer->stop_tokens()) {
    if (id < model->vocab_size()) options.stop_tokens.push_back(id);
  }
  Generator gen(seed);
  CCTUNE_ASSIGN_OR_RETURN(Tensor prompt_tensor, LeftPad({prompt}, options.pad_id));

  // profile: the CPU backend's op timers (kernels/cpu/op_profile.h), read once after the
  // prefill's token and once at the end.
  CCTUNE_ASSIGN_OR_RETURN(bool profile, root.GetBool("profile"));
  if (profile && !device.is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile: true times the CPU backend's ops; device is ", device_name, " (set profile=false)"));
  }
  cpu::OpProfile prefill_profile{};
  if (profile) {
    cpu::SetOpProfiling(true);
    cpu::ResetOpProfile();
    options.on_token = [&prefill_profile](const GenerationStep& step) {
      if (step.step == 0) prefill_profile = cpu::OpProfileSnapshot();
    };
  }

  ResetPeakMemory(device);
  const auto t0 = std::chrono::steady_clock::now();
  CCTUNE_ASSIGN_OR_RETURN(GenerateResult result, Generate(*model, prompt_tensor, options, gen));
  if (!device.is_cpu()) {
    CCTUNE_ASSIGN_OR_RETURN(DeviceInterface * iface, GetDeviceInterface(device.type));
    CCTUNE_RETURN_IF_ERROR(iface->Synchronize(device.index));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // stdout: the prompt and the generation, decoded as torchtune prints them.
  std::vector<int32_t> ids = prompt;
  ids.insert(ids.end(), result.generated[0].begin(), result.generated[0].end());
  CCTUNE_ASSIGN_OR_RETURN(std::string text, tok.DecodeForPrint(ids));
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);

  // stderr: the figures (docs/generation.md defines them).
  const int64_t n = result.num_generated;
  const double tokens_per_sec = seconds > 0 ? n / seconds : 0.0;
  double weight_bytes = 0;
  for (const auto& named : arena.named_tensors()) weight_bytes += named.second.nbytes();
  const double kv_bytes = static_cast<double>(model->KvCacheBytes());
  const double kv_bytes_per_position = enable_kv_cache ? kv_bytes / total : 0.0;
  const double bytes_read =
      result.num_forward_passes * weight_bytes + result.kv_positions_read * kv_bytes_per_position;
  const double bytes_per_token = n > 0 ? bytes_read / n : 0.0;
  std::fprintf(stderr, "Time for inference: %.02f sec total, %.02f tokens/sec\n", seconds,
               tokens_per_sec);
  std::fprintf(stderr, "Bandwidth achieved: %.02f GB/s\n", Gb(bytes_per_token * tokens_per_sec));
  // Prefill and decode apart, as llama.cpp reports them (pp / tg), 3 significant digits. The
  // prefill pass produces the first token, so its time is the time to first token.
  const double pp_rate = result.prefill_seconds > 0 ? prompt_len / result.prefill_seconds : 0.0;
  std::fprintf(stderr, "Prefill: %lld tokens, %s sec (time to first token), %s tokens/sec\n",
               static_cast<long long>(prompt_len),
               ThreeSignificantDigits(result.prefill_seconds).c_str(),
               ThreeSignificantDigits(pp_rate).c_str());
  const int64_t decode_tokens = n - 1;
  if (decode_tokens > 0 && result.decode_seconds > 0) {
    // The decode passes: every pass after the first, and the cache positions they read.
    const int64_t decode_passes = result.num_forward_passes - 1;
    const int64_t decode_kv = enable_kv_cache ? result.kv_positions_read - prompt_len : 0;
    const double decode_bytes = decode_passes * weight_bytes + decode_kv * kv_bytes_per_position;
    std::fprintf(stderr, "Decode: %lld tokens, %s sec, %s tokens/sec, %s GB/s\n",
                 static_cast<long long>(decode_tokens),
                 ThreeSignificantDigits(result.decode_seconds).c_str(),
                 ThreeSignificantDigits(decode_tokens / result.decode_seconds).c_str(),
                 ThreeSignificantDigits(Gb(decode_bytes / result.decode_seconds)).c_str());
  } else {
    std::fprintf(stderr, "Decode: 0 tokens (only the first token was generated)\n");
  }
  if (profile) {
    const cpu::OpProfile all = cpu::OpProfileSnapshot();
    cpu::SetOpProfiling(false);
    PrintProfile("prefill", prefill_profile, result.prefill_seconds);
    if (decode_tokens > 0) {
      PrintProfile("decode", ProfileDelta(all, prefill_profile), result.decode_seconds);
    }
  }
  // Allocations at their peak plus the weights viewed in the mapped files (resident too).
  std::fprintf(stderr, "Memory used: %.02f GB\n",
               Gb(static_cast<double>(GetMemoryStats(device).peak_bytes) +
                  FileViewedBytes(arena)));
  if (enable_kv_cache) {
    const KVCache& cache = *model->layer(0).attn().kv_cache();
    std::fprintf(stderr,
                 "KV cache: %lld bytes (%.02f GB), layout %s, %zu layers x %lld heads x %lld "
                 "positions x %lld head_dim, %s\n",
                 static_cast<long long>(model->KvCacheBytes()), Gb(kv_bytes), layout_name.c_str(),
                 model->num_layers(), static_cast<long long>(cache.num_kv_heads()),
                 static_cast<long long>(cache.max_seq_len()),
                 static_cast<long long>(cache.head_dim()), DTypeName(cache.dtype()));
  } else {
    std::fprintf(stderr, "KV cache: 0 bytes (0.00 GB), layout none (enable_kv_cache=false)\n");
  }
  return absl::OkStatus();
}

const RecipeEntry& GenerateRecipe() {
  static const RecipeEntry* const recipe = new RecipeEntry{
      "generate", GenerateRecipeSchema, RegisterGenerateComponents, ValidateGenerateConfig,
      RunGenerateRecipe, [] {
        return absl::StrCat("Keys (docs/config_reference.md):\n",
                            GenerateRecipeSchema().Describe(), "\nprompt keys:\n",
                            PromptSchema().Describe());
      }};
  return *recipe;
}

}  // namespace cctune
