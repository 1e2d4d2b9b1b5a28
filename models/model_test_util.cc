#include "models/model_test_util.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "config/config.h"
#include "core/device_interface.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "models/registry.h"
#include "modules/parameters.h"

namespace cctune {
namespace testing {

void ExpectModel(absl::StatusOr<std::unique_ptr<TransformerDecoder>> model,
                 const ExpectedModel& want) {
  ASSERT_TRUE(model.ok()) << model.status();
  TransformerDecoder& m = **model;
  const MemoryStats before = GetMemoryStats(Device::Cpu());
  auto arena = ParameterArena::Create(m, DType::kBF16, Device::Meta());
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_EQ(GetMemoryStats(Device::Cpu()).current_bytes, before.current_bytes);
  EXPECT_EQ(arena->NumParameters(), want.num_parameters);
  EXPECT_EQ(m.NumParameters(), want.num_parameters);
  EXPECT_EQ(arena->named_tensors().size(), want.num_tensors);
  EXPECT_GE(arena->Bytes(), static_cast<size_t>(want.num_parameters) * 2);

  const int64_t h_d = want.embed_dim / want.num_heads;
  auto shape = [&](const std::string& name) -> Shape {
    auto t = arena->Get(name);
    return t.ok() ? t->shape() : Shape{-1};
  };
  EXPECT_EQ(shape("tok_embeddings.weight"), (Shape{want.vocab_size, want.embed_dim}));
  EXPECT_EQ(shape("layers.0.attn.q_proj.weight"), (Shape{want.num_heads * h_d, want.embed_dim}));
  EXPECT_EQ(shape("layers.0.attn.k_proj.weight"), (Shape{want.num_kv_heads * h_d, want.embed_dim}));
  EXPECT_EQ(shape("layers.0.attn.output_proj.weight"),
            (Shape{want.embed_dim, want.num_heads * h_d}));
  EXPECT_EQ(shape("layers.0.mlp.w1.weight"), (Shape{want.intermediate_dim, want.embed_dim}));
  EXPECT_EQ(shape("layers.0.mlp.w2.weight"), (Shape{want.embed_dim, want.intermediate_dim}));
  EXPECT_EQ(shape("layers.0.sa_norm.scale"), (Shape{want.embed_dim}));
  const std::string last = "layers." + std::to_string(want.num_layers - 1) + ".mlp_norm.scale";
  EXPECT_EQ(shape(last), (Shape{want.embed_dim}));
  EXPECT_EQ(shape("layers." + std::to_string(want.num_layers) + ".mlp_norm.scale"), (Shape{-1}));
  EXPECT_EQ(shape("norm.scale"), (Shape{want.embed_dim}));
  EXPECT_EQ(arena->Get("output.weight").ok(), !want.tied);
  EXPECT_EQ(arena->Get("layers.0.attn.v_proj.bias").ok(), want.qkv_bias);
  EXPECT_FALSE(arena->Get("layers.0.attn.output_proj.bias").ok());
  EXPECT_EQ(m.vocab_size(), want.vocab_size);
  EXPECT_EQ(m.num_layers(), static_cast<size_t>(want.num_layers));
  EXPECT_EQ(m.layer(0).attn().num_kv_heads(), want.num_kv_heads);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildModelYaml(const std::string& body) {
  CCTUNE_RETURN_IF_ERROR(RegisterModelComponents());
  std::string yaml = "model:\n";
  for (absl::string_view line : absl::StrSplit(body, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&yaml, "  ", line, "\n");
  }
  CCTUNE_ASSIGN_OR_RETURN(Config cfg, Config::FromString(yaml, "test.yaml"));
  return ModelComponentRegistry().InstantiateKey(cfg.root(), "model", ConfigNode());
}

}  // namespace testing
}  // namespace cctune
