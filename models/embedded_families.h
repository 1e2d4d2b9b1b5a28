// The model-family files (models/<family>/<family>.yaml) compiled into the binary by
// models/embed_families.sh; models/registry.cc parses and registers them.
#ifndef CCTUNE_MODELS_EMBEDDED_FAMILIES_H_
#define CCTUNE_MODELS_EMBEDDED_FAMILIES_H_

namespace cctune {

struct EmbeddedFamily {
  const char* path;  // "models/llama3_2/llama3_2.yaml"
  const char* yaml;
};

namespace internal {
extern const EmbeddedFamily kEmbeddedFamilies[];
extern const int kNumEmbeddedFamilies;
}  // namespace internal

}  // namespace cctune

#endif  // CCTUNE_MODELS_EMBEDDED_FAMILIES_H_
