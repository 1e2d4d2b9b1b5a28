// Unicode NFC normalisation (canonical decomposition, canonical ordering, canonical
// composition, Hangul included) from tables generated out of Python's unicodedata
// (tools/golden/gen_nfc_tables.py), so text normalises as torchtune's Python does and no
// Unicode library is linked. Checked against ICU in nfc_test.
#ifndef CCTUNE_TOKENIZERS_NFC_H_
#define CCTUNE_TOKENIZERS_NFC_H_

#include <string>
#include <string_view>

namespace cctune {

// NFC of valid UTF-8 (replace invalid sequences first: they pass through unchanged).
std::string NormalizeNfc(std::string_view text);

// The Unicode version of the tables ("14.0.0").
const char* NfcUnicodeVersion();

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_NFC_H_
