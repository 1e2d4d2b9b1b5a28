// Decode speed with the grouped KV cache (n_kv heads) against the expanded one (n_h heads,
// torchtune before #1961), on a randomly initialised model of any shape, in one run:
//
//   bazel run //benchmarks:generate_kv_cache -- [--model NAME] [--model_arg key=value ...]
//       [--config_json PATH] [--dtype bf16|fp32] [--prompt_tokens 16] [--new_tokens 32]
//       [--repeats 1] [--layouts grouped,expanded] [--device cpu|cuda|cuda:N]
//
// --model: a shape alias, llama3_2_1b_shape (dim 2048, 16 layers, 32/8 heads, ffn 8192,
// vocab 128256, tied; the default), llama3_2_3b_shape, llama3_1_8b_shape (~6.4 / 16 GB in
// bf16), or any registered model builder (`cctune ls --components --kind model`), e.g.
// cctune.models.qwen2_5.qwen2_5_0_5b. --model_arg key=value (repeatable) sets a builder
// argument in the config override syntax (num_layers=4, max_seq_len=4096). --config_json PATH
// builds cctune.models.from_config_json from a checkpoint's config.json (or its folder).
// At a long context (--prompt_tokens 2048) the grouped/expanded ratio of decode tokens/s shows
// what reading n_kv instead of n_h cached heads per position buys.
//
// For each layout it prints tokens/sec, the bandwidth achieved and its fraction of the
// machine's STREAM triad bandwidth (measured in-process at start; on a GPU, a large
// device-to-device copy counting bytes read and written), memory used and KV-cache bytes,
// then the ratios. Figures follow docs/generation.md: bytes read per generated token = the
// weights once per forward pass + the filled part of the KV cache the attention reads;
// "decode" columns leave the prefill pass out (GenerateResult::decode_seconds). Greedy
// decoding from random prompt ids; nothing is asserted.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "benchmarks/stream.h"
#include "config/overrides.h"
#include "core/device_interface.h"
#include "core/random.h"
#include "core/status.h"
#include "generation/generate.h"
#include "models/registry.h"
#include "modules/attention.h"
#include "modules/parameters.h"

namespace cctune {
namespace {

struct Flags {
  std::string model = "llama3_2_1b_shape";
  std::vector<std::string> model_args;  // key=value builder arguments
  std::string config_json;
  std::string dtype = "bf16";
  int64_t prompt_tokens = 16;
  int64_t new_tokens = 32;
  int repeats = 1;
  std::vector<std::string> layouts = {"grouped", "expanded"};
  std::string device = "cpu";
};

void Usage() {
  std::fprintf(stderr,
               "usage: generate_kv_cache [--model llama3_2_1b_shape|llama3_2_3b_shape|"
               "llama3_1_8b_shape|<model builder>] [--model_arg key=value ...] "
               "[--config_json PATH] [--dtype bf16|fp32] [--prompt_tokens N] [--new_tokens N] "
               "[--repeats N] [--layouts grouped,expanded] [--device cpu|cuda|cuda:N]\n");
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], value;
    const size_t eq = a.find('=');
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return false;
    }
    if (a == "--model") {
      f->model = value;
    } else if (a == "--model_arg") {
      f->model_args.push_back(value);
    } else if (a == "--config_json") {
      f->config_json = value;
    } else if (a == "--dtype") {
      f->dtype = value;
    } else if (a == "--prompt_tokens") {
      f->prompt_tokens = std::atoll(value.c_str());
    } else if (a == "--new_tokens") {
      f->new_tokens = std::atoll(value.c_str());
    } else if (a == "--repeats") {
      f->repeats = std::atoi(value.c_str());
    } else if (a == "--layouts") {
      f->layouts = absl::StrSplit(value, ',');
    } else if (a == "--device") {
      f->device = value;
    } else {
      return false;
    }
  }
  return f->prompt_tokens >= 1 && f->new_tokens >= 2 && f->repeats >= 1;
}

// Fast fill of every parameter buffer with small values (±0.02): a block of pseudo-random
// values tiled over the buffers in parallel. The speed of a decode step does not depend on
// the values, and Philox normals for 1B+ parameters would dominate the run time.
void FillBuffer(const Tensor& buffer) {
  constexpr int64_t kBlock = (1 << 20) - 3;  // not a multiple of any row length
  std::vector<float> block(kBlock);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (float& v : block) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = (static_cast<float>(x & 0xFFFFFF) / 16777216.0f - 0.5f) * 0.04f;
  }
  std::vector<bf16> block_bf16(kBlock);
  for (int64_t i = 0; i < kBlock; ++i) block_bf16[i] = FloatToBf16(block[i]);
  {
    const int64_t n = buffer.numel();
    const size_t elem = DTypeSize(buffer.dtype());
    const char* src = buffer.dtype() == DType::kBF16
                          ? reinterpret_cast<const char*>(block_bf16.data())
                          : reinterpret_cast<const char*>(block.data());
    char* dst = static_cast<char*>(buffer.raw_data());
#pragma omp parallel for schedule(static)
    for (int64_t start = 0; start < n; start += kBlock) {
      const int64_t count = std::min(kBlock, n - start);
      std::memcpy(dst + start * elem, src, count * elem);
    }
  }
}

// The bandwidth a device sustains: for a GPU, the best of 5 copies of 1 GiB within device
// memory (bytes read + written over the time, after a warm-up copy; the copy and the
// synchronisation are timed together on the host clock).
absl::StatusOr<double> DeviceCopyGbs(const Device& device) {
  const int64_t n = int64_t{1} << 29;  // bf16 elements: 1 GiB
  CCTUNE_ASSIGN_OR_RETURN(Tensor a, Tensor::Zeros({n}, DType::kBF16, device));
  CCTUNE_ASSIGN_OR_RETURN(Tensor b, Tensor::Empty({n}, DType::kBF16, device));
  CCTUNE_ASSIGN_OR_RETURN(DeviceInterface * iface, GetDeviceInterface(device.type));
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    CCTUNE_RETURN_IF_ERROR(iface->Synchronize(device.index));
    const auto t0 = std::chrono::steady_clock::now();
    CCTUNE_RETURN_IF_ERROR(b.CopyFrom(a));
    CCTUNE_RETURN_IF_ERROR(iface->Synchronize(device.index));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::max(best, 2.0 * a.nbytes() / s / 1e9);
  }
  return best;
}

void FillParameters(const ParameterArena& arena) {
  for (const Tensor& buffer : arena.buffers()) FillBuffer(buffer);
}

struct Row {
  std::string layout;
  size_t kv_bytes = 0;
  double tokens_per_sec = 0;
  double bandwidth_gbs = 0;
  double decode_tokens_per_sec = 0;
  double decode_bandwidth_gbs = 0;
  double memory_gb = 0;
};

absl::Status Main(const Flags& f) {
  std::string builder = f.model;
  if (f.model == "llama3_2_1b_shape") {
    builder = "cctune.models.llama3_2.llama3_2_1b";
  } else if (f.model == "llama3_2_3b_shape") {
    builder = "cctune.models.llama3_2.llama3_2_3b";
  } else if (f.model == "llama3_1_8b_shape") {
    builder = "cctune.models.llama3_1.llama3_1_8b";
  }
  // Builder arguments: --config_json's path first, then --model_arg in order.
  ConfigNode args = ConfigNode::Map();
  std::vector<std::string> arg_overrides;
  if (!f.config_json.empty()) {
    builder = "cctune.models.from_config_json";
    arg_overrides.push_back("path='" + f.config_json + "'");
  }
  arg_overrides.insert(arg_overrides.end(), f.model_args.begin(), f.model_args.end());
  if (absl::Status st = ApplyOverrides(arg_overrides, &args); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model_arg: ", st.message()));
  }
  DType dtype;
  if (f.dtype == "bf16") {
    dtype = DType::kBF16;
  } else if (f.dtype == "fp32" || f.dtype == "f32") {
    dtype = DType::kF32;
  } else {
    return absl::InvalidArgumentError("--dtype must be bf16 or fp32, got '" + f.dtype + "'");
  }
  CCTUNE_ASSIGN_OR_RETURN(const Device device, ParseDevice(f.device));
  if (device.is_meta() || !DeviceAvailable(device)) {
    return absl::InvalidArgumentError("--device " + f.device + ": not available here");
  }
  std::printf("generate_kv_cache: %s (%s, %s weights, random) on %s, %d threads\n",
              f.config_json.empty() ? f.model.c_str() : f.config_json.c_str(), builder.c_str(), DTypeName(dtype), f.device.c_str(),
              omp_get_max_threads());
  double peak_gbs = 0;  // the reference bandwidth of the "% peak" columns
  if (device.is_cpu()) {
    const bench::StreamPeak& peak = bench::MeasuredStreamPeak();
    std::printf("STREAM triad %.2f GB/s, read %.2f GB/s\n", peak.triad_gbs, peak.read_gbs);
    peak_gbs = peak.triad_gbs;
  } else {
    CCTUNE_ASSIGN_OR_RETURN(peak_gbs, DeviceCopyGbs(device));
    std::printf("device-to-device copy %.1f GB/s (read + write)\n", peak_gbs);
  }

  auto built = BuildModel(builder, args);
  if (!built.ok()) {
    return absl::Status(built.status().code(),
                        absl::StrCat("--model ", builder, ": ", built.status().message()));
  }
  std::unique_ptr<TransformerDecoder> model = std::move(*built);
  if (f.prompt_tokens + f.new_tokens > model->max_seq_len()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prompt_tokens (", f.prompt_tokens, ") + --new_tokens (", f.new_tokens,
        ") exceed the model's max_seq_len (", model->max_seq_len(),
        "); raise it with --model_arg max_seq_len=N"));
  }
  CCTUNE_ASSIGN_OR_RETURN(ParameterArena arena, ParameterArena::Create(*model, dtype, device));
  if (device.is_cpu()) {
    FillParameters(arena);
  } else {
    // Fill a host copy of each arena buffer and copy it over.
    for (const Tensor& buffer : arena.buffers()) {
      CCTUNE_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(buffer.shape(), buffer.dtype()));
      FillBuffer(host);
      Tensor dst = buffer;
      CCTUNE_RETURN_IF_ERROR(dst.CopyFrom(host));
    }
  }
  double weight_bytes = 0;
  for (const auto& named : arena.named_tensors()) weight_bytes += named.second.nbytes();
  const auto& attn = model->layer(0).attn();
  std::printf(
      "weights %.3f GB, %zu layers, %lld/%lld heads, head_dim %lld; prompt %lld, "
      "new tokens %lld\n\n",
      weight_bytes / 1e9, model->num_layers(), static_cast<long long>(attn.num_heads()),
      static_cast<long long>(attn.num_kv_heads()), static_cast<long long>(attn.head_dim()),
      static_cast<long long>(f.prompt_tokens), static_cast<long long>(f.new_tokens));

  std::vector<int32_t> prompt(f.prompt_tokens);
  Generator ids(1);
  for (int32_t& id : prompt) id = 1 + static_cast<int32_t>(ids.UniformInt(model->vocab_size() - 1));
  CCTUNE_ASSIGN_OR_RETURN(Tensor prompt_tensor, LeftPad({prompt}, 0));
  const int64_t total = f.prompt_tokens + f.new_tokens;

  std::vector<Row> rows;
  for (const std::string& layout_name : f.layouts) {
    CCTUNE_ASSIGN_OR_RETURN(KvCacheLayout layout, ParseKvCacheLayout(layout_name));
    model->DeleteCaches();
    CCTUNE_RETURN_IF_ERROR(model->SetupCaches(1, dtype, total, layout));
    const double kv_per_position = static_cast<double>(model->KvCacheBytes()) / total;
    GenerateOptions opts;
    opts.max_new_tokens = f.new_tokens;
    opts.sampling.temperature = 0.f;
    opts.pad_id = 0;
    Generator gen(0);
    {  // warm-up: thread pools, scratch buffers, page faults (a short prompt: a long prefill
       // would double the run time)
      GenerateOptions warm = opts;
      warm.max_new_tokens = 2;
      CCTUNE_ASSIGN_OR_RETURN(Tensor warm_prompt,
                              prompt_tensor.Narrow(1, 0, std::min<int64_t>(f.prompt_tokens, 8)));
      CCTUNE_RETURN_IF_ERROR(Generate(*model, warm_prompt, warm, gen).status());
    }
    Row best;
    best.layout = layout_name;
    best.kv_bytes = model->KvCacheBytes();
    for (int rep = 0; rep < f.repeats; ++rep) {
      ResetPeakMemory(device);
      const auto t0 = std::chrono::steady_clock::now();
      CCTUNE_ASSIGN_OR_RETURN(GenerateResult r, Generate(*model, prompt_tensor, opts, gen));
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int64_t n = r.num_generated;
      const double bytes =
          r.num_forward_passes * weight_bytes + r.kv_positions_read * kv_per_position;
      // Decode: the passes after the prefill (tokens 1..n-1).
      const double decode_seconds = r.decode_seconds;
      const double decode_bytes = (r.num_forward_passes - 1) * weight_bytes +
                                  (r.kv_positions_read - f.prompt_tokens) * kv_per_position;
      Row row = best;
      row.tokens_per_sec = n / seconds;
      row.bandwidth_gbs = bytes / seconds / 1e9;
      row.decode_tokens_per_sec = (n - 1) / decode_seconds;
      row.decode_bandwidth_gbs = decode_bytes / decode_seconds / 1e9;
      row.memory_gb = GetMemoryStats(device).peak_bytes / 1e9;
      if (row.decode_tokens_per_sec > best.decode_tokens_per_sec) best = row;
    }
    rows.push_back(best);
    model->DeleteCaches();
  }

  std::printf(
      "| layout   | KV-cache bytes | tokens/s | GB/s  | %% peak  | decode tok/s | decode "
      "GB/s | %% peak  | memory used |\n");
  std::printf(
      "|----------|---------------:|---------:|------:|--------:|-------------:|---------"
      "---:|--------:|------------:|\n");
  for (const Row& r : rows) {
    std::printf(
        "| %-8s | %14zu | %8.2f | %5.2f | %6.1f%% | %12.2f | %11.2f | %6.1f%% | %8.2f GB "
        "|\n",
        r.layout.c_str(), r.kv_bytes, r.tokens_per_sec, r.bandwidth_gbs,
        100 * r.bandwidth_gbs / peak_gbs, r.decode_tokens_per_sec, r.decode_bandwidth_gbs,
        100 * r.decode_bandwidth_gbs / peak_gbs, r.memory_gb);
  }
  if (rows.size() == 2 && rows[1].kv_bytes > 0) {
    std::printf("\nKV-cache bytes %s/%s = %.2f\n", rows[1].layout.c_str(), rows[0].layout.c_str(),
                static_cast<double>(rows[1].kv_bytes) / rows[0].kv_bytes);
    std::printf("decode tokens/s %s/%s = %.3f at a context of %lld..%lld positions\n",
                rows[0].layout.c_str(), rows[1].layout.c_str(),
                rows[0].decode_tokens_per_sec / rows[1].decode_tokens_per_sec,
                static_cast<long long>(f.prompt_tokens), static_cast<long long>(total));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace cctune

int main(int argc, char** argv) {
  cctune::Flags flags;
  if (!cctune::ParseFlags(argc, argv, &flags)) {
    cctune::Usage();
    return 2;
  }
  absl::Status st = cctune::Main(flags);
  if (!st.ok()) {
    std::fprintf(stderr, "generate_kv_cache: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
