#include "models/tiny/tiny.h"

namespace cctune {

DecoderConfig TinyLlamaConfig(int64_t vocab_size, int64_t num_layers, int64_t num_heads,
                              int64_t num_kv_heads, int64_t embed_dim, int64_t intermediate_dim,
                              int64_t max_seq_len, bool tie_word_embeddings) {
  DecoderConfig c;  // eps 1e-5, RoPE base 10000 on interleaved pairs
  c = WithSizes(c, {vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, intermediate_dim,
                    max_seq_len});
  c.tie_word_embeddings = tie_word_embeddings;
  return c;
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> TinyLlama(
    int64_t vocab_size, int64_t num_layers, int64_t num_heads, int64_t num_kv_heads,
    int64_t embed_dim, int64_t intermediate_dim, int64_t max_seq_len, bool tie_word_embeddings) {
  return BuildDecoder(TinyLlamaConfig(vocab_size, num_layers, num_heads, num_kv_heads, embed_dim,
                                      intermediate_dim, max_seq_len, tie_word_embeddings));
}

const ModelFamily& TinyFamily() {
  static const ModelFamily* const family = [] {
    auto* f = new ModelFamily;
    f->name = "tiny";
    f->doc = "a tiny GQA model for tests (defaults: v=256, 2 layers, 8/2 heads, d=64)";
    f->models = {{"tiny_llama",
                  f->doc,
                  TinyLlamaConfig(),
                  {"vocab_size", "num_layers", "num_heads", "num_kv_heads", "embed_dim",
                   "intermediate_dim", "max_seq_len", "tie_word_embeddings"}}};
    f->lora_attn_modules_required = false;
    return f;
  }();
  return *family;
}

}  // namespace cctune
