// The two model shapes the training benchmarks share (train_bench, dist_scaling_bench):
//   "15m"  a ~15.7M-parameter Llama (6 layers, dim 384, GQA 6/2, vocab 8192), batch 4 x 256;
//   "demo" the committed demo model's shape (tests/assets/demo/config.json) with its recipe's
//          batch of 64; 16 positions hold one "<a>+<b>=<sum>" sample with BOS/EOS.
#ifndef CCTUNE_BENCHMARKS_BENCH_MODELS_H_
#define CCTUNE_BENCHMARKS_BENCH_MODELS_H_

#include <cstdint>
#include <string>

#include "models/decoder_builder.h"

namespace cctune {

struct BenchModel {
  DecoderConfig config;
  int64_t batch = 0;
  int64_t seq = 0;
};

// The shape called `name` ("15m" or "demo"; anything else is taken as "15m").
inline BenchModel BenchModelShape(const std::string& name) {
  BenchModel m;
  DecoderConfig& c = m.config;
  if (name == "demo") {
    c.vocab_size = 264;
    c.num_layers = 4;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.embed_dim = 128;
    c.head_dim = 16;
    c.intermediate_dim = 384;
    c.max_seq_len = 64;
    m.batch = 64;
    m.seq = 16;
  } else {
    c.vocab_size = 8192;
    c.num_layers = 6;
    c.num_heads = 6;
    c.num_kv_heads = 2;
    c.embed_dim = 384;
    c.head_dim = 64;
    c.intermediate_dim = 1024;
    c.max_seq_len = 256;
    m.batch = 4;
    m.seq = 256;
  }
  c.rope_base = 10000.0;
  c.tie_word_embeddings = false;
  return m;
}

}  // namespace cctune

#endif  // CCTUNE_BENCHMARKS_BENCH_MODELS_H_
