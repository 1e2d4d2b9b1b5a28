#include "models/tiny/tiny.h"

#include "models/decoder_builder.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<TransformerDecoder>> TinyLlama(
    int64_t vocab_size, int64_t num_layers, int64_t num_heads, int64_t num_kv_heads,
    int64_t embed_dim, int64_t intermediate_dim, int64_t max_seq_len, bool tie_word_embeddings) {
  DecoderConfig c;
  c.vocab_size = vocab_size;
  c.num_layers = num_layers;
  c.num_heads = num_heads;
  c.num_kv_heads = num_kv_heads;
  c.embed_dim = embed_dim;
  c.intermediate_dim = intermediate_dim;
  c.max_seq_len = max_seq_len;
  c.norm_eps = 1e-5f;
  c.rope_base = 10000.0;
  c.tie_word_embeddings = tie_word_embeddings;
  return BuildDecoder(c);
}

}  // namespace cctune
